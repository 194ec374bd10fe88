"""`ltvm inspect`: the layers of a geometry's transformer beside the paper's Table 1."""

from __future__ import annotations

import argparse
import json

from vm.cli.common import (add_program_arguments, bound_text, load_program, positive_int,
                           temperature_value)
from vm.common.errors import InputError
from vm.common.json_values import finite_or_null
from vm.common.geometry import Geometry
from vm.isa import for_program
from vm.runtime.config import DTYPE_NAMES

def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "inspect", help="list the transformer's layers, heads, widths and parameters",
        description="Build the looped transformer for PROG's geometry (or for --memory M "
                    "--instructions K [--bits N] [--scratch S]) and print a table of its "
                    "layers with totals, beside the paper's Table 1.")
    add_program_arguments(parser)
    parser.add_argument("--memory", type=positive_int, metavar="M",
                        help="memory columns, reserved cells included (without PROG)")
    parser.add_argument("--instructions", type=positive_int, metavar="K",
                        help="instruction columns, EOF included (without PROG)")
    parser.add_argument("--temperature", type=temperature_value, metavar="LAM",
                        help="softmax temperature (default: the exact-read rule)")
    parser.add_argument("--dtype", choices=list(DTYPE_NAMES),
                        help="the machine of this dtype: FLEQ blocks take other parameters, "
                             "and so other bounds and depths, in float32 (default float32 "
                             "for SUBLEQ, float64 for FLEQ)")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    parser.set_defaults(func=run)


def _geometry(args: argparse.Namespace) -> tuple[object | None, Geometry]:
    """(the program, or None without PROG; the geometry)."""
    if args.program or args.csv:
        if args.memory or args.instructions:
            raise InputError("give PROG or --memory/--instructions, not both")
        return load_program(args)
    if not (args.memory and args.instructions):
        raise InputError("give PROG, --csv CMDS MEM, or --memory M --instructions K")
    if args.block_size is not None or args.param or args.functions is not None:
        raise InputError("--block-size, --param and --functions shape FLEQ machines: give a "
                         ".fleq PROG (--memory/--instructions build a SUBLEQ one)")
    return None, Geometry(args.scratch or 1, args.memory, args.instructions, args.bits or 8)


def summarize_roles(roles: list[str]) -> list[str]:
    """Head roles with numbered repeats collapsed: 'inv: sigmoid term x64'."""
    counts: dict[str, int] = {}
    for role in roles:
        stem = role.rstrip("0123456789").rstrip() if role[-1:].isdigit() else role
        counts[stem] = counts.get(stem, 0) + 1
    return [stem if count == 1 else f"{stem} x{count}" for stem, count in counts.items()]


def bounds_of(block: dict, dtype: str) -> dict:
    """A block's row (`isa.paper(...).blocks`) with the bounds of `dtype` only: the machine
    inspected is built with that dtype's parameters, for which the other dtype's bound means
    nothing."""
    row = {key: value for key, value in block.items()
           if not key.startswith(("error_bound_", "relative_error_bound_"))}
    return {**row, "error_bound": block[f"error_bound_{dtype}"],
            "relative_error_bound": block[f"relative_error_bound_{dtype}"]}


def run(args: argparse.Namespace) -> int:
    program, geometry = _geometry(args)
    isa = for_program(geometry)
    dtype = args.dtype or isa.default_dtype
    machine = isa.machine(geometry, args.temperature)
    layers = machine.weights.layers
    rows = [{"layer": i, "role": layer.role, "heads": len(layer.heads),
             "head_roles": summarize_roles([h.role for h in layer.heads]),
             "ffn_width": layer.ffn.width,
             "parameters": layer.parameter_count()} for i, layer in enumerate(layers)]
    paper = isa.paper(program, geometry)
    blocks, lemma = paper.blocks, paper.statement
    totals = {"layers": len(layers), "max_heads": max(r["heads"] for r in rows),
              "heads_in_all": sum(r["heads"] for r in rows),
              "ffn_width_max": max(r["ffn_width"] for r in rows),
              "parameters": sum(r["parameters"] for r in rows), "rows": machine.layout.rows,
              "temperature": machine.temperature}
    if args.json:
        # a block whose parameters leave it no bound has an infinite one: null in JSON
        print(json.dumps(finite_or_null(
            {"geometry": geometry.as_dict(), "dtype": dtype, "layers": rows, "totals": totals,
             "blocks": [bounds_of(block, dtype) for block in blocks],
             "paper": {"layers": paper.layers, "heads": paper.heads, "statement": lemma},
             "paper_routines": paper.routines}), indent=2, allow_nan=False))
        return 0
    print(f"geometry: {geometry.describe()}")
    print(f"residual stream: {machine.layout.rows} rows; temperature lam = "
          f"{machine.temperature:.4g}")
    print(f"{'layer':>5}  {'heads':>5}  {'ffn width':>9}  {'parameters':>10}  role")
    for row in rows:
        roles = f" [{'; '.join(row['head_roles'])}]" if row["head_roles"] else ""
        print(f"{row['layer']:>5}  {row['heads']:>5}  {row['ffn_width']:>9}  "
              f"{row['parameters']:>10,}  {row['role']}{roles}")
    print(f"total: {totals['layers']} layers, {totals['max_heads']} heads per layer at most "
          f"({totals['heads_in_all']} in all), {totals['parameters']:,} parameters")
    if blocks:
        print("function blocks:")
        for block in blocks:
            shown = ", ".join(f"{k}={v:g}" for k, v in block["parameters"].items())
            print(f"  {block['function']:<11} {block['layers']} layers  {block['lemma']:<24} "
                  f"domain {block['domain']}; error <= {bound_text(block, dtype)} ({dtype})"
                  + (f"; {shown}" if shown else ""))
        print(f"paper ({lemma}): {paper.layers} layers")
        for routine in paper.routines:
            print(f"paper ({routine['statement']}, {routine['routine']}): "
                  f"{routine['layers']} layers, {routine['heads']} head"
                  f"{'s' if routine['heads'] != 1 else ''}; here {totals['layers']} layers, "
                  f"{totals['max_heads']} heads per layer at most")
    else:
        print(f"paper (Table 1, {lemma}): {paper.layers} layers, {paper.heads} heads")
    return 0
