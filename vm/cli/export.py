"""`ltvm export`: weights.npz, layout.json and punchcard.npy for other tools."""

from __future__ import annotations

import argparse

from assembler.punchcard import encode
from vm.cli.common import add_program_arguments, load_program
from vm.export import export
from vm.layers import ATTENTION_MODES
from vm.machines.subleq import subleq_machine


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "export", help="export weights, layout and punchcard (npz/json/npy, no pickle)",
        description="Write DIR/weights.npz (every Q, K, V, lam, mask, W1, b1, W2, b2 and a "
                    "JSON meta string), DIR/layout.json (how to decode memory and the program "
                    "counter) and DIR/punchcard.npy (X before the first pass).")
    add_program_arguments(parser)
    parser.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="directory to write (new, empty, or a previous export)")
    parser.add_argument("--attention", choices=list(ATTENTION_MODES), default="masked",
                        help="masked (default) exports each head's geometry-only mask; dense "
                             "exports none")
    parser.add_argument("--temperature", type=float, metavar="LAM",
                        help="softmax temperature (default: the exact-read rule)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    program, geometry = load_program(args)
    machine = subleq_machine(geometry, args.temperature)
    punchcard = encode(program, geometry, machine.layout)
    extra = {"pc_column": 0, "halt_pc": geometry.eof_column,
             "pc_encoding": "pm1-binary-msb-first (absolute column index)",
             "memory_names": {name: [s.address, s.address + s.size]
                              for name, s in program.symbols.items()}}
    directory = export(args.output, machine.weights, machine.layout, punchcard, geometry.bits,
                       args.attention == "masked", extra)
    print(f"wrote {directory}/{{weights.npz, layout.json, punchcard.npy}}: "
          f"{len(machine.weights.layers)} layers, heads {machine.weights.heads}, "
          f"X {punchcard.shape[0]} x {punchcard.shape[1]}")
    return 0
