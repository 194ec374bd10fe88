"""`ltvm demo`: the main job end to end on programs/subleq/factorial.sq."""

from __future__ import annotations

import argparse
from pathlib import Path

from assembler.punchcard import encode, geometry_for
from assembler.subleq import assemble_file
from vm.cli.common import format_value
from vm.reference import run_reference

FACTORIAL = Path(__file__).resolve().parents[2] / "programs" / "subleq" / "factorial.sq"


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "demo", help="assemble factorial, run it and compare with the reference",
        description="Assemble programs/subleq/factorial.sq into its punchcard, run it and "
                    "print the result.")
    parser.add_argument("program", nargs="?", default=str(FACTORIAL), metavar="PROG",
                        help="program to demonstrate (default: factorial)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    program = assemble_file(args.program)
    geometry = geometry_for(program)
    X = encode(program, geometry)
    print(f"assembled {args.program}: {len(program.instructions)} instructions, "
          f"{len(program.memory)} memory cells")
    print(f"punchcard: X is {X.shape[0]} x {X.shape[1]} ({geometry.describe()})")
    result = run_reference(program)
    print(f"reference interpreter: halted={result.halted} after {result.steps} steps")
    for name, value in program.named_memory(result.memory).items():
        print(f"  {name} = {format_value(value)}")
    return 0 if result.halted else 1
