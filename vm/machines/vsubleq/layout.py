"""The standard SUBLEQ punchcard's geometry and row map.

Columns: the cpu column (0), then memory word j at column 1 + j. Memory holds m = 2^B
words, and word j's position code is j's plain B-bit binary: a word used as an address
is looked up by its own low B bits, so the code of an address is part of the word.

Persistent fields (state between passes):
  mem       memory columns: the N-bit two's-complement word, MSB first
  pc        cpu column: the codes of pc, pc + 1 and pc + 2 (mod m), B bits each
  halted    cpu column: 1 once the machine halted (or stopped at an I/O instruction)
  pos       memory columns: the address code (0 in the cpu column, never addressed)
  scratch, cpu   1 in the cpu column
Working fields (zero between passes, used in the cpu column): the fetched words
wa|wb|wc (each split into its high N - B and low B bits), pn = pc + 3..5, c1|c2 =
c + 1, c + 2, operands va|vb, res = mem[b] - mem[a], 0/1 flags (fall, io_a, io_b, c_out,
hold, sj, sf, jump), the write address waddr and the write buffer wbuf (every column).
"""

from __future__ import annotations

from dataclasses import dataclass

from vm.blocks.adder_plan import carry_blocks
from vm.common.errors import InputError
from vm.transformer.layout import Layout, LayoutBuilder

MAX_MEMORY = 1 << 15


@dataclass(frozen=True)
class VGeometry:
    """What the weights depend on: the memory size m (a power of two) and the word size N."""

    memory: int
    bits: int

    def __post_init__(self) -> None:
        if self.memory < 4 or self.memory & (self.memory - 1) or self.memory > MAX_MEMORY:
            raise InputError(f"memory size must be a power of two from 4 to {MAX_MEMORY}, "
                             f"got {self.memory}")
        if not self.pos_bits < self.bits <= 64:
            raise InputError(f"{self.bits}-bit words cannot address {self.memory} cells "
                             f"(and at most 64 bits)")

    @property
    def pos_bits(self) -> int:
        return self.memory.bit_length() - 1

    @property
    def columns(self) -> int:
        return 1 + self.memory

    @property
    def scratch(self) -> int:
        return 1

    def describe(self) -> str:
        return (f"n={self.columns} columns (cpu 1, memory {self.memory}), N={self.bits}-bit "
                f"words, {self.pos_bits}-bit addresses")

    def as_dict(self) -> dict[str, int]:
        return {"memory": self.memory, "bits": self.bits, "columns": self.columns,
                "pos_bits": self.pos_bits}


def vsubleq_layout(geometry: VGeometry) -> Layout:
    """Allocate every field and region of the standard SUBLEQ machine."""
    B, N = geometry.pos_bits, geometry.bits
    builder = LayoutBuilder()
    builder.add("mem", N, persistent=True)
    for part in ("pc0", "pc1", "pc2"):
        builder.add(part, B, persistent=True)
    builder.group("pc", ["pc0", "pc1", "pc2"])
    builder.add("halted", 1, persistent=True)
    builder.add("pos", B, persistent=True)
    builder.add("scratch", 1, persistent=True)
    builder.add("cpu", 1, persistent=True)
    for word in ("wa", "wb", "wc"):
        builder.add(f"{word}_hi", N - B)
        builder.add(f"{word}_lo", B)
        builder.group(word, [f"{word}_hi", f"{word}_lo"])
    for name in ("pn0", "pn1", "pn2", "c1", "c2", "waddr"):
        builder.add(name, B)
    for name in ("va", "vb", "res", "wbuf"):
        builder.add(name, N)
    for name in ("fall", "io_a", "io_b", "c_out", "hold", "sj", "sf", "jump"):
        builder.add(name, 1)
    blocks = carry_blocks(N)
    if blocks is not None:
        builder.add("sum0", N)
        builder.add("sum1", N)
        builder.add("carry", len(blocks))
    builder.region("scratch", 1)
    builder.region("memory", geometry.memory)
    return builder.build()
