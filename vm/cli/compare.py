"""`ltvm compare`: the transformer and the reference in lockstep."""

from __future__ import annotations

import argparse
import json

from vm.cli.common import (add_engine_arguments, add_program_arguments, engine_config,
                           load_program, positive_int)
from assembler.fleq_program import FleqProgram
from vm.compare import compare_fleq, compare_program
from vm.progress import Progress

DEFAULT_MAX_STEPS = 100_000


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "compare", help="run the transformer and the reference in lockstep",
        description="Execute PROG (or --csv CMDS MEM) on the looped transformer and the "
                    "reference interpreter side by side. SUBLEQ: memory and program counter "
                    "must agree after every step; prints one OK line, or the first divergence "
                    "(step, instruction, field, both values) and exits 1. FLEQ: prints, per "
                    "written value, its absolute and (normwise: max |error| / max |exact|) "
                    "relative error against the reference run and the block's error on the "
                    "transformer's own operands; a branch that differs fails with exit 1.")
    add_program_arguments(parser)
    parser.add_argument("--max-steps", type=positive_int, default=DEFAULT_MAX_STEPS,
                        metavar="K", help=f"step limit (default {DEFAULT_MAX_STEPS})")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    add_engine_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    program, geometry = load_program(args)
    if isinstance(program, FleqProgram):
        return _compare_fleq(program, geometry, args)
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


def _compare_fleq(program: FleqProgram, geometry, args: argparse.Namespace) -> int:
    progress = Progress("compared steps", args.max_steps)
    result = compare_fleq(program, geometry, args.max_steps, engine_config(args), progress)
    progress.done()
    if args.json:
        steps = [{"step": e.step, "pc": e.pc, "instruction": e.instruction, "cell": e.cell,
                  "abs_error": e.absolute, "rel_error": e.relative,
                  "local_abs_error": e.local_absolute,
                  "transformer": e.transformer.tolist(), "reference": e.reference.tolist()}
                 for e in result.errors]
        print(json.dumps({"ok": result.ok, "steps": result.steps, "halted": result.halted,
                          "max_abs_error": result.max_absolute,
                          "max_rel_error": result.max_relative, "writes": steps,
                          "branch_divergence": result.branch.__dict__ if result.branch
                          else None}, indent=2))
    else:
        print(f"{'step':>6} {'pc':>4}  {'instruction':<32} {'cell':<8} {'abs error':>10} "
              f"{'rel error':>10} {'block alone':>11}")
        for e in result.errors:
            print(f"{e.step:>6} {e.pc:>4}  {e.instruction:<32} {e.cell:<8} {e.absolute:>10.3g} "
                  f"{e.relative:>10.3g} {e.local_absolute:>11.3g}")
        if result.branch is not None:
            print(f"branch {result.branch.describe()}")
        else:
            ending = "halted" if result.halted else "step limit reached"
            print(f"OK: branches agree for {result.steps} steps ({ending}); max abs error "
                  f"{result.max_absolute:.3g}, max rel error {result.max_relative:.3g}")
    return 0 if result.ok and result.halted else 1
