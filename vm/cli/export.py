"""`ltvm export`: weights (npz, safetensors or ONNX), layout.json and punchcard.npy."""

from __future__ import annotations

import argparse
import sys

from vm.cli.common import add_program_arguments, load_program, temperature_value
from vm.common.errors import shown_path
from vm.isa import for_program
from vm.runtime.export import FORMATS, check_export_directory, files
from vm.transformer.modes import ATTENTION_MODES
DESCRIPTION = """\
Write DIR/weights.npz (every Q, K, V, lam, mask, W1, b1, W2, b2 and a JSON meta string),
DIR/layout.json (how to decode memory and the program counter) and DIR/punchcard.npy (X
before the first pass). Run by repeating X <- TF(X) (Eq. 1, every layer in order) while
the pc code differs from halt_pc (standard SUBLEQ: while halted is 0, below).

--format safetensors writes DIR/weights.safetensors instead: the same tensors under the
same names, and the meta JSON string in the header's metadata under "meta" (pip install
'ltvm[formats]'). --format onnx writes DIR/pass.onnx instead: one pass, every layer, as
an ONNX graph (opset 17) from input X (rows x columns, float64 like the punchcard) to
output X_next, the weights as initializers and meta in the model's metadata_props; loop
it as the weights are looped (pip install 'ltvm[onnx]').

layout.json, every machine: fields {name: [first row, stop]}, regions {name: [first
column, stop]}, memory_field, pc_field, pc_column. SUBLEQ and FLEQ add halt_pc (the EOF
instruction's column) and memory_names; their pc_column's pc_field rows hold the pc, as a
±1 code of `bits` bits, MSB first, of the absolute column of the next instruction.

SUBLEQ (.sq): memory is one N-bit ±1 two's-complement word per memory column (encoding
pm1-twos-complement-msb-first, bits = N); memory_names {name: [first, stop]} in words.

FLEQ (.fleq): machine "fleq", encoding "real": memory is `cells` cells of d columns from
column cell_start; cell i is X[memory_field rows, cell_start + i*d : cell_start + (i+1)*d],
a d x d matrix (a scalar is its [0, 0] entry); memory_names {name: {cell, columns: [first
column, stop], shape: [rows, columns], kind}}; bits = the width of the pc code; dtype:
the weights are float64 and the products need it.

Standard SUBLEQ (.dec, .vsq): machine "vsubleq", no halt_pc: loop while the
halted_field row of pc_column is 0 (it becomes 1 when the machine halts). Memory word j is
column 1 + j, one N-bit ±1 two's-complement word (bits = N, MSB first); the region
output holds the output tape, one byte a column in memory_field (unwritten slots 0); the
input tape is empty (export takes no input: region input holds only the end-of-input
sentinel). The pc field holds the codes of pc, pc + 1 and pc + 2, pc_bits each."""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "export", help="export weights, layout and punchcard (npz/json/npy, no pickle)",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_program_arguments(parser)
    parser.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="directory to write (new, empty, or a previous export)")
    parser.add_argument("--attention", choices=list(ATTENTION_MODES), default="masked",
                        help="masked (default) exports each head's geometry-only mask; dense "
                             "exports none")
    parser.add_argument("--temperature", type=temperature_value, metavar="LAM",
                        help="softmax temperature (default: the exact-read rule for SUBLEQ, "
                             "the exact-move temperature 800 for FLEQ)")
    parser.add_argument("--format", choices=FORMATS, default="npz",
                        help="weights as weights.npz (default), weights.safetensors, or one "
                             "pass as pass.onnx")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_export_directory(args.output)  # a bad -o is refused before the program is read
    program, geometry = load_program(args)
    isa = for_program(program)
    directory = isa.export(program, geometry, args.output, args.temperature, args.attention,
                           args.format)
    machine = isa.machine(geometry, args.temperature)  # the one the export built (cached)
    if not machine.temperature_is_safe(isa.default_dtype):
        print(f"warning: at temperature {machine.temperature:g} the reads of these weights are "
              "not provably exact (ltvm runs check every pass there; an executor of the "
              "export does not)", file=sys.stderr)
    print(f"wrote {shown_path(directory)}/{{{', '.join(files(args.format))}}}: "
          f"{len(machine.weights.layers)} layers, heads {machine.weights.heads}, "
          f"X {machine.layout.rows} x {machine.layout.columns}")
    return 0
