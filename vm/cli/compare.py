"""`ltvm compare`: the transformer and the reference in lockstep."""

from __future__ import annotations

import argparse
import json

from vm.cli.common import (add_engine_arguments, add_program_arguments, engine_config,
                           load_program, positive_int)
from vm.compare import compare_program
from vm.progress import Progress

DEFAULT_MAX_STEPS = 100_000


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "compare", help="run the transformer and the reference in lockstep",
        description="Execute PROG (or --csv CMDS MEM) on the looped transformer and the "
                    "reference interpreter side by side, comparing memory and program counter "
                    "after every step. Prints one OK line, or the first divergence (step, "
                    "instruction, field, both values) and exits 1.")
    add_program_arguments(parser)
    parser.add_argument("--max-steps", type=positive_int, default=DEFAULT_MAX_STEPS,
                        metavar="K", help=f"step limit (default {DEFAULT_MAX_STEPS})")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    add_engine_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    program, geometry = load_program(args)
    progress = Progress("compared steps", args.max_steps)
    result = compare_program(program, geometry, args.max_steps, engine_config(args), progress)
    progress.done()
    if args.json:
        payload = {"ok": result.ok, "steps": result.steps, "halted": result.halted,
                   "divergence": result.divergence.__dict__ if result.divergence else None}
        print(json.dumps(payload, indent=2))
    elif result.ok:
        ending = "halted" if result.halted else "step limit reached"
        print(f"OK: transformer and reference agree for {result.steps} steps ({ending})")
    else:
        print(result.divergence.describe())
    return 0 if result.ok and result.halted else 1
