"""`ltvm repl`: step a program on the transformer and the reference side by side."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from vm.cli.common import (add_engine_arguments, add_sampling_refusal, engine_config,
                           file_path, positive_float, positive_int, refuse_sampling_options)
from vm.common.errors import InputError, shown_path
from vm.isa import VSUBLEQ
from vm.isa.base import ProgramOptions
from vm.repl import DEFAULT_MAX_STEPS, DEFAULT_PICTURE_DIR, ENGINES

DEFAULT_HISTORY = os.path.expanduser("~/.ltvm_history")


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "repl", help="interactive debugger: step, break, watch, edit memory, draw pictures",
        description="An interactive session on PROG (or on a program loaded later with "
                    "`load FILE`): the looped transformer and the reference interpreter "
                    "execute it in lockstep; step, run to breakpoints, watch and edit memory, "
                    "type instructions, compare the engines and draw X and attention. Type "
                    "`help` inside for the commands; Ctrl-D quits.")
    parser.add_argument("program", nargs="?", type=file_path, metavar="PROG",
                        help="assembly source (.sq or .fleq), or a standard SUBLEQ image "
                             "(.dec, .vsq: step, watch pc, memory and output, feed input)")
    parser.add_argument("--bits", type=positive_int, metavar="N",
                        help="memory word size N for every program loaded")
    parser.add_argument("--scratch", type=positive_int, metavar="S",
                        help="scratch columns (default 1)")
    parser.add_argument("--engine", choices=list(ENGINES), default="transformer",
                        help="the engine that drives and is shown at first (default "
                             "transformer)")
    parser.add_argument("--max-steps", type=positive_int, default=DEFAULT_MAX_STEPS,
                        metavar="K", help=f"steps one step, run or continue may take "
                                          f"(default {DEFAULT_MAX_STEPS})")
    parser.add_argument("--max-seconds", type=positive_float, metavar="S",
                        help="seconds of wall time one step, run or continue may take "
                             "(default: no limit; Ctrl-C stops one sooner)")
    parser.add_argument("--out", metavar="DIR",
                        help=f"directory for `show` pictures (default {DEFAULT_PICTURE_DIR}; "
                             f"not for standard SUBLEQ images, whose REPL draws none)")
    parser.add_argument("--history", type=file_path, default=DEFAULT_HISTORY, metavar="FILE",
                        help="command history file (default ~/.ltvm_history); one that "
                             "names a program or holds binary data is left as it is")
    add_engine_arguments(parser)
    add_sampling_refusal(parser)
    parser.set_defaults(func=run, notes_at_once=True)  # a session's notes when they arise


def run(args: argparse.Namespace) -> int:
    from vm.repl.session import Repl  # torch: not for every `ltvm` call
    from vm.repl.terminal import interact

    refuse_sampling_options(args)
    if args.out == "":  # Path("") is the current directory: show wrote pictures there
        raise InputError("--out is an empty path")
    if args.out and os.path.exists(args.out) and not os.path.isdir(args.out):
        # `show` failed much later
        raise InputError(f"--out {shown_path(args.out)} is not a directory")
    if args.program and Path(args.program).suffix in VSUBLEQ.suffixes:
        return _image_repl(args, interact)
    if args.evaluation in ("fused", "active") and not args.checked and args.attention != "dense":
        # steps are single full passes (Lockstep.step): the option was taken without a word
        print(f"ltvm: note: the REPL of a .sq or .fleq program runs every pass in full "
              f"(--evaluation {args.evaluation} does not apply)", file=sys.stderr)
    repl = Repl(engine_config(args), bits=args.bits, scratch=args.scratch,
                picture_dir=Path(args.out or DEFAULT_PICTURE_DIR), max_steps=args.max_steps,
                engine=args.engine,
                max_seconds=args.max_seconds)
    if args.program:
        print(repl.load(args.program))
    print("ltvm repl: type help for the commands, Ctrl-D or quit to leave", flush=True)
    return interact(repl, Path(args.history))


def _image_repl(args: argparse.Namespace, interact) -> int:
    """The REPL of a standard SUBLEQ image (its own commands: `help` lists them)."""
    from vm.repl.vsubleq import VsubleqRepl

    if args.scratch or args.engine != "transformer":
        raise InputError("--scratch and --engine do not apply to standard SUBLEQ images "
                         "(.dec, .vsq): both engines run in lockstep")
    if args.out is not None:  # it was taken and ignored: this REPL has no `show`
        raise InputError("--out does not apply to standard SUBLEQ images (.dec, .vsq): "
                         "their REPL draws no pictures")
    image, _ = VSUBLEQ.load(Path(args.program), ProgramOptions(bits=args.bits))
    repl = VsubleqRepl(image, args.program, engine_config(args), args.max_steps,
                       args.max_seconds)
    print(repl.summary())
    print("ltvm repl: type help for the commands, Ctrl-D or quit to leave", flush=True)
    return interact(repl, Path(args.history))
