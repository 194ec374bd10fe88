"""`ltvm compare`: the transformer and the reference in lockstep."""

from __future__ import annotations

import argparse
import time

from vm.cli.common import (add_engine_arguments, add_input_arguments, add_program_arguments,
                           add_sampling_refusal, add_time_limit, engine_config, input_options,
                           load_program, positive_int, refuse_sampling_options)
from vm.isa import for_program
from vm.tools.progress import Progress

DEFAULT_MAX_STEPS = 100_000


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "compare", help="run the transformer and the reference in lockstep",
        description="Execute PROG (or --csv CMDS MEM) on the looped transformer and the "
                    "reference interpreter side by side. SUBLEQ: memory and program counter "
                    "must agree after every step (standard SUBLEQ: also the bytes read and the "
                    "output); prints one OK line, or the first divergence (step, instruction, "
                    "field, both values) and exits 1. A run the step limit stops before the "
                    "program halts ends in a NOT HALTED line and exit 1. FLEQ: prints, per "
                    "written value, its absolute and (normwise: max |error| / max |exact|) "
                    "relative error against the reference run and the block's error on the "
                    "transformer's own operands; a branch that differs, a value either side "
                    "writes outside the machine's domain, or a block called outside the "
                    "domain its error bound covers (the `domain:` line), fails with exit 1.")
    add_program_arguments(parser)
    parser.add_argument("--max-steps", type=positive_int, default=DEFAULT_MAX_STEPS,
                        metavar="K", help=f"step limit (default {DEFAULT_MAX_STEPS})")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    add_input_arguments(parser)
    add_time_limit(parser)
    add_engine_arguments(parser)
    add_sampling_refusal(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()  # --max-seconds bounds the command, loading included
    refuse_sampling_options(args)
    program, geometry = load_program(args)
    isa = for_program(program)
    progress = Progress("compared steps", args.max_steps, max_seconds=args.max_seconds,
                        since=started)
    result = isa.compare(program, geometry, args.max_steps, engine_config(args, geometry),
                         progress, **input_options(args, isa))
    progress.done()
    print(isa.compare_report(result, args.json))
    return 0 if result.ok and result.halted else 1
