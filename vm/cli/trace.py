"""`ltvm trace`: pictures of one pass (per layer) and an animation of X over a run."""

from __future__ import annotations

import argparse
from pathlib import Path

from vm.cli.common import (add_engine_arguments, add_program_arguments, atomic_path,
                           engine_config, load_program, positive_int)
from vm.common.errors import InputError
from vm.isa import for_program
from vm.tools.progress import Progress

DEFAULT_GIF_STEPS = 32


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "trace", help="draw X and every head's attention for one pass; animate X over a run",
        description="Run PROG K passes on the transformer. With --png DIR, write one PNG per "
                    "layer of the next pass: each head's attention matrix (queries x keys) "
                    "and X before and after the layer, columns labelled by region and by the "
                    "program's names (FLEQ: block columns by function name, cells by variable, "
                    "instructions by label), rows by field. With --gif FILE, write an animated GIF "
                    "of X from step K over the next S steps (it ends early at EOF).")
    add_program_arguments(parser)
    parser.add_argument("--step", type=int, default=0, metavar="K",
                        help="passes to run before drawing (default 0: the first pass)")
    parser.add_argument("--png", metavar="DIR", help="directory for the per-layer PNGs")
    parser.add_argument("--gif", metavar="FILE", help="animated GIF of X over --steps steps")
    parser.add_argument("--steps", type=positive_int, default=DEFAULT_GIF_STEPS, metavar="S",
                        help=f"steps the GIF covers (default {DEFAULT_GIF_STEPS})")
    add_engine_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not (args.png or args.gif):
        raise InputError("nothing to draw: give --png DIR and/or --gif FILE")
    if args.step < 0:
        raise InputError(f"--step must be at least 0, got {args.step}")
    if args.gif and Path(args.gif).suffix.lower() != ".gif":
        raise InputError(f"{args.gif}: the animation file must end in .gif")
    # matplotlib and torch take seconds to import: load them only when drawing
    from vm.runtime.executor import TransformerExecutor
    from vm.tools.pictures import axis_labels, save_pass_pictures, save_x_animation

    program, geometry = load_program(args)
    executor = TransformerExecutor(geometry, engine_config(args))
    labels = axis_labels(*for_program(program).column_names(program, geometry, executor.layout),
                         executor.layout)
    name = Path(args.program).name if args.program else "csv program"
    runner = executor.runner(executor.load([program]))
    progress = Progress("steps", args.step)
    runner.advance(args.step, progress)
    progress.done()
    X = runner.state()
    if executor.decode(X)[0][1] == program.eof:
        print(f"note: the program reached EOF after {int(runner.steps[0])} steps; the pictures "
              f"at step {args.step} show the EOF pass, which changes nothing")
    if args.png:
        paths = save_pass_pictures(executor.model, X[0], labels, _directory(args.png), args.step,
                                   f"{name} step {args.step}")
        for path in paths:
            print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    if args.gif:
        frames = []
        for step in range(args.step, args.step + args.steps + 1):
            pc = executor.decode(X)[0][1]
            frames.append((f"{name}: X at step {step}, pc {pc}", X[0]))
            if pc == program.eof:
                break
            X = executor.step(X, step)
        with atomic_path(args.gif) as temporary:
            save_x_animation(frames, labels, temporary)
        print(f"wrote {args.gif} ({len(frames)} frames, {Path(args.gif).stat().st_size:,} "
              "bytes)")
    return 0


def _directory(path: str) -> Path:
    """`path` as an existing directory, created if needed."""
    directory = Path(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"cannot create directory {directory}: {error.strerror}") from None
    return directory
