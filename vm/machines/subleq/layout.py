"""The SUBLEQ punchcard's row map (paper Eq. 5) plus the machine's working rows.

Persistent fields (state between passes):
  instr_a|instr_b|instr_c  instruction columns: pointers p_a, p_b, p_c
  mem                      memory columns: N-bit two's-complement word, MSB first
  pc                       cpu column (scratch column 0): program counter p_PC
  pos                      memory and instruction columns: positional code p_i
                           (0 in scratch columns, which are never addressed)
  scratch                  1 in scratch columns
  cpu                      1 in scratch column 0, where an instruction executes
Working fields (zero between passes, used within a pass at the cpu column):
  cur_a|cur_b|cur_c fetched instruction, inc = pc + 1, va/vb operands,
  res = mem[b] - mem[a], wbuf write buffer (every column), and for words wider
  than the one-level adder allows, the carry-select temporaries sum0/sum1/carry.
"""

from __future__ import annotations

from vm.blocks.adder_plan import carry_blocks
from vm.common.geometry import Geometry
from vm.transformer.layout import Layout, LayoutBuilder


def subleq_layout(geometry: Geometry) -> Layout:
    """Allocate every field and region of the SUBLEQ machine for `geometry`."""
    positions, bits = geometry.pos_bits, geometry.bits
    builder = LayoutBuilder()
    for part in ("instr_a", "instr_b", "instr_c"):
        builder.add(part, positions, persistent=True)
    builder.group("instr", ["instr_a", "instr_b", "instr_c"])
    builder.add("mem", bits, persistent=True)
    builder.add("pc", positions, persistent=True)
    builder.add("pos", positions, persistent=True)
    builder.add("scratch", 1, persistent=True)
    builder.add("cpu", 1, persistent=True)
    for part in ("cur_a", "cur_b", "cur_c"):
        builder.add(part, positions)
    builder.group("cur", ["cur_a", "cur_b", "cur_c"])
    builder.add("inc", positions)
    for name in ("va", "vb", "res", "wbuf"):
        builder.add(name, bits)
    blocks = carry_blocks(bits)
    if blocks is not None:
        builder.add("sum0", bits)
        builder.add("sum1", bits)
        builder.add("carry", len(blocks))
    builder.region("scratch", geometry.scratch)
    builder.region("memory", geometry.memory)
    builder.region("instructions", geometry.instructions)
    return builder.build()
