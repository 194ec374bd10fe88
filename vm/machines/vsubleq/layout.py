"""The standard SUBLEQ punchcard's geometry and row map.

Columns: the cpu column (0), then memory word j at column 1 + j, then the input tape
(one column per input byte and a sentinel holding -1, where the input pointer stops: end of
input), then the output tape. Memory holds m = 2^B words. Every column after the cpu has a
position code in one P-bit space: memory word j is j, the tapes follow memory. A word used
as an address is looked up by its own low B bits with the high P - B bits of the code of 0,
so the code of an address is part of the word.

Persistent fields (state between passes):
  mem       memory columns: the N-bit two's-complement word, MSB first
  pc        cpu column: the codes of pc, pc + 1 and pc + 2 (mod m), B bits each
  halted    cpu column: 1 once the machine halted (or stopped at an I/O instruction)
  pos       every other column: its P-bit position code (0 in the cpu column)
  inp, outp cpu column: the position codes of the next input byte and output slot
  overflow  cpu column: 1 once an output instruction found the output tape full
  scratch, cpu   1 in the cpu column
Working fields (zero between passes, used in the cpu column): the fetched words
wa|wb|wc (each split into its high N - B and low B bits), pn = pc + 3..5, c1|c2 =
c + 1, c + 2, operands va|vb, res = mem[b] - mem[a], 0/1 flags (fall, io_a, io_b, c_out,
hold, sj, sf, jump and the I/O flags), the write address waddr (P bits), the input byte
vin, the incremented pointers inp1/outp1 and the write buffer wbuf (every column).
"""

from __future__ import annotations

from dataclasses import dataclass

from vm.blocks.adder_plan import carry_blocks
from vm.common.errors import InputError
from vm.common.limits import is_whole_number
from vm.transformer.layout import Layout, LayoutBuilder

MAX_MEMORY = 1 << 15
MAX_COLUMNS = 1 << 16


@dataclass(frozen=True)
class VGeometry:
    """What the weights depend on: the memory size m (a power of two), the word size N and
    the lengths of the input and output tapes."""

    memory: int
    bits: int
    inputs: int = 0
    outputs: int = 0

    def __post_init__(self) -> None:
        for name in ("memory", "bits", "inputs", "outputs"):  # bits=8.5 was a geometry
            value = getattr(self, name)
            if not is_whole_number(value):
                raise InputError(f"{name} must be a whole number, got {value!r:.40}")
            object.__setattr__(self, name, int(value))  # numpy's has no bit_length
        if self.memory < 4 or self.memory & (self.memory - 1) or self.memory > MAX_MEMORY:
            raise InputError(f"memory size must be a power of two from 4 to {MAX_MEMORY}, "
                             f"got {self.memory}")
        if not self.pos_bits < self.bits <= 64:
            raise InputError(f"{self.bits}-bit words cannot address {self.memory} cells "
                             f"(and at most 64 bits)")
        if self.inputs < 0 or self.outputs < 0:
            raise InputError(f"the tapes must have 0 or more bytes, got input {self.inputs}, "
                             f"output {self.outputs}")
        if self.columns > MAX_COLUMNS:
            raise InputError(f"{self.memory:,} memory words, an input tape of {self.inputs:,} "
                             f"bytes and an output tape of {self.outputs:,} bytes need "
                             f"{self.columns:,} columns, more than the transformer's "
                             f"{MAX_COLUMNS:,}")

    @property
    def pos_bits(self) -> int:
        return self.memory.bit_length() - 1

    @property
    def input_start(self) -> int:
        """Position code of the first input byte (the sentinel is at input_start + inputs)."""
        return self.memory

    @property
    def output_start(self) -> int:
        """Position code of the first output slot; output_start + outputs means full."""
        return self.memory + self.inputs + 1

    @property
    def code_bits(self) -> int:
        """P: bits of a position code, enough for every column and the full output pointer."""
        return (self.output_start + self.outputs).bit_length()

    @property
    def columns(self) -> int:
        return 1 + self.output_start + self.outputs

    @property
    def scratch(self) -> int:
        return 1

    def describe(self) -> str:
        return (f"n={self.columns} columns (cpu 1, memory {self.memory}, input "
                f"{self.inputs} + 1, output {self.outputs}), N={self.bits}-bit words, "
                f"{self.pos_bits}-bit addresses, {self.code_bits}-bit position codes")

    def as_dict(self) -> dict[str, int]:
        return {"memory": self.memory, "bits": self.bits, "inputs": self.inputs,
                "outputs": self.outputs, "columns": self.columns, "pos_bits": self.pos_bits,
                "code_bits": self.code_bits}


def vsubleq_layout(geometry: VGeometry) -> Layout:
    """Allocate every field and region of the standard SUBLEQ machine."""
    B, N, P = geometry.pos_bits, geometry.bits, geometry.code_bits
    builder = LayoutBuilder()
    builder.add("mem", N, persistent=True)
    for part in ("pc0", "pc1", "pc2"):
        builder.add(part, B, persistent=True)
    builder.group("pc", ["pc0", "pc1", "pc2"])
    builder.add("halted", 1, persistent=True)
    builder.add("pos", P, persistent=True)
    builder.add("inp", P, persistent=True)
    builder.add("outp", P, persistent=True)
    builder.add("overflow", 1, persistent=True)
    builder.add("scratch", 1, persistent=True)
    builder.add("cpu", 1, persistent=True)
    for word in ("wa", "wb", "wc"):
        builder.add(f"{word}_hi", N - B)
        builder.add(f"{word}_lo", B)
        builder.group(word, [f"{word}_hi", f"{word}_lo"])
    for name in ("pn0", "pn1", "pn2", "c1", "c2"):
        builder.add(name, B)
    for name in ("waddr", "inp1", "outp1"):
        builder.add(name, P)
    for name in ("va", "vb", "vin", "res", "wbuf"):
        builder.add(name, N)
    for name in ("fall", "io_a", "io_b", "c_out", "eof", "end", "io", "nomem", "outw",
                 "outsel", "full", "doin", "sj", "sf", "jump"):
        builder.add(name, 1)
    blocks = carry_blocks(N)
    if blocks is not None:
        builder.add("sum0", N)
        builder.add("sum1", N)
        builder.add("carry", len(blocks))
    builder.region("scratch", 1)
    builder.region("memory", geometry.memory)
    builder.region("input", geometry.inputs + 1)
    builder.region("output", geometry.outputs)
    return builder.build()
