"""`ltvm demo`: the main job end to end on programs/subleq/factorial.sq.

Assemble the program into its punchcard, run it on the looped transformer,
and compare every step with the reference interpreter.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from vm.machines.subleq.punchcard import encode, geometry_for
from assembler.subleq import assemble_file
from vm.cli.common import add_time_limit, file_path, format_value
from vm.common.errors import InputError, counted, shown_path
from vm.isa import SUBLEQ, for_path
from vm.tools.progress import Progress
from vm.machines.subleq.machine import subleq_machine
from vm.machines.subleq.reference import run_reference

FACTORIAL = Path(__file__).resolve().parents[2] / "programs" / "subleq" / "factorial.sq"


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "demo", help="assemble factorial, run it on the transformer, compare with the reference",
        description="Assemble programs/subleq/factorial.sq into its punchcard X, run it on the "
                    "looped transformer, run it on the reference interpreter, and compare the "
                    "two step by step.")
    parser.add_argument("program", nargs="?", default=str(FACTORIAL), type=file_path,
                        metavar="PROG",
                        help="SUBLEQ source (.sq) to demonstrate, a path (default: "
                             "programs/subleq/factorial.sq)")
    add_time_limit(parser)  # any PROG may be given: a wide one runs for hours
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    from vm.runtime.compare import compare_program  # torch: not for every `ltvm` call
    from vm.runtime.executor import EngineConfig, run_transformer

    if for_path(args.program) is not SUBLEQ:  # it was parsed as .sq: "unknown directive"
        raise InputError(f"{shown_path(args.program)}: the demo runs SUBLEQ programs (.sq); "
                         "compare this one with the reference by `ltvm compare "
                         f"{shown_path(args.program)}`")
    program = assemble_file(args.program)
    reference = run_reference(program)
    if not reference.halted:  # the lockstep comparison would go on for ten times as long
        raise InputError(f"{shown_path(args.program)} does not halt within {reference.steps} "
                         "steps: the demo runs a program to its end (step any program with ltvm "
                         "repl)")
    geometry = geometry_for(program)
    machine = subleq_machine(geometry)
    X = encode(program, geometry, machine.layout)
    print(f"assembled {shown_path(Path(args.program).name)}: {len(program.instructions)} "
          f"instructions, {len(program.memory)} memory cells")
    print(f"punchcard X: {X.shape[0]} rows x {X.shape[1]} columns ({geometry.describe()})")
    print(f"transformer: {len(machine.weights.layers)} layers, heads per layer "
          f"{machine.weights.heads}, temperature {machine.temperature:.3g}")
    start = time.perf_counter()
    progress = Progress("steps", reference.steps, max_seconds=args.max_seconds,
                        since=started)  # long runs were silent
    result = run_transformer(program, geometry, config=EngineConfig(), progress=progress)
    progress.done()
    elapsed = time.perf_counter() - start
    print(f"transformer run: halted={result.halted} after {counted(result.steps, 'step')} "
          f"({elapsed:.2f} s)")
    print(f"{'name':<8} {'transformer':>12} {'reference':>12}")
    named = program.named_memory(result.memory)
    for name, value in program.named_memory(reference.memory).items():
        print(f"{name:<8} {format_value(named[name]):>12} {format_value(value):>12}")
    progress = Progress("compared steps", reference.steps, max_seconds=args.max_seconds,
                        unfinished="the comparison ended", since=started)
    comparison = compare_program(program, geometry, 10 * reference.steps + 10,
                                 progress=progress)
    progress.done()
    if comparison.ok and result.memory == reference.memory:
        print(f"lockstep comparison: OK, every one of {comparison.steps} steps agrees")
        return 0
    print(f"lockstep comparison: {comparison.divergence.describe() if comparison.divergence else 'final memory differs'}")
    return 1
