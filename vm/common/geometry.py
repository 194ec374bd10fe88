"""SUBLEQ machine geometry: the sizes every weight depends on, and nothing else.

Two programs with equal geometry run on byte-identical weights.
"""

from __future__ import annotations

from dataclasses import dataclass

from vm.common.errors import InputError
from vm.common.limits import is_whole_number

MAX_COLUMNS = 1 << 16
MAX_BITS = 64


@dataclass(frozen=True)
class Geometry:
    """Column counts of the three regions and the memory word size N.

    Columns are scratch (s) | memory (m) | instructions (k, the EOF
    instruction last); n = s + m + k. Every column carries a ±1 positional
    code of `pos_bits` = ceil(log2 n) bits (at least 2).
    """

    scratch: int
    memory: int
    instructions: int
    bits: int

    def __post_init__(self) -> None:
        for name in ("scratch", "memory", "instructions", "bits"):
            value = getattr(self, name)  # 2.5 failed in bit_length, '2' in a comparison
            if not is_whole_number(value):
                raise InputError(f"geometry {name} must be an integer, got {value!r}")
            object.__setattr__(self, name, int(value))  # numpy's has no bit_length
        if self.scratch < 1:
            raise InputError(f"scratch width must be at least 1, got {self.scratch}")
        if self.memory < 2:
            raise InputError("memory needs at least the two reserved cells (0 and -1)")
        if self.instructions < 1:
            raise InputError("a program needs at least the EOF instruction")
        if not 2 <= self.bits <= MAX_BITS:
            raise InputError(f"word size must be between 2 and {MAX_BITS} bits, got {self.bits}")
        if self.columns > MAX_COLUMNS:
            raise InputError(f"{self.columns:,} columns ({self.scratch:,} scratch, "
                             f"{self.memory:,} memory, {self.instructions:,} instructions) "
                             f"exceed the limit of {MAX_COLUMNS:,}")

    @property
    def columns(self) -> int:
        return self.scratch + self.memory + self.instructions

    @property
    def pos_bits(self) -> int:
        return max(2, (self.columns - 1).bit_length())

    @property
    def memory_start(self) -> int:
        return self.scratch

    @property
    def instruction_start(self) -> int:
        return self.scratch + self.memory

    @property
    def eof_column(self) -> int:
        return self.columns - 1

    def memory_column(self, address: int) -> int:
        return self.scratch + address

    def instruction_column(self, index: int) -> int:
        return self.scratch + self.memory + index

    def describe(self) -> str:
        return (f"n={self.columns} columns (scratch {self.scratch}, memory {self.memory}, "
                f"instructions {self.instructions} incl. EOF), N={self.bits}-bit words, "
                f"{self.pos_bits}-bit positions")

    def as_dict(self) -> dict[str, int]:
        return {"scratch": self.scratch, "memory": self.memory,
                "instructions": self.instructions, "bits": self.bits,
                "columns": self.columns, "pos_bits": self.pos_bits}
