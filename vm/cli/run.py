"""`ltvm run`: execute a program and print its final memory by name."""

from __future__ import annotations

import argparse

from vm.cli.common import add_program_arguments, load_program, positive_int, print_result
from vm.reference import run_reference

DEFAULT_MAX_STEPS = 100_000


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "run", help="run a program and print its final memory by name",
        description="Run PROG (or --csv CMDS MEM) until it reaches its EOF instruction or the "
                    "step limit. Exit code 0 when it halted, 1 when it did not.")
    add_program_arguments(parser)
    parser.add_argument("--engine", choices=["reference"], default="reference",
                        help="reference: the exact interpreter")
    parser.add_argument("--max-steps", type=positive_int, default=DEFAULT_MAX_STEPS,
                        metavar="K", help=f"step limit (default {DEFAULT_MAX_STEPS})")
    parser.add_argument("--trace", action="store_true",
                        help="print every executed instruction (pc, cell written, branch)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    program, _ = load_program(args)
    result = run_reference(program, args.max_steps, trace=args.trace)
    print_result(program, result, args.engine, args.json)
    return 0 if result.halted else 1
