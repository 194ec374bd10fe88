"""The FLEQ punchcard (Figure 6): geometry and row map.

Columns, left to right:
  control      column 0: fetches like every scratch column; the null key of reads
  blocks       per function block: A (d columns) | B (d) | C (d) | extra columns
  memory       cells of d columns each; a cell holds a d x d matrix, zero-padded,
               in its d columns' `mem` rows (a scalar is its top-left entry)
  instructions one column per instruction, the EOF instruction last

Every scratch column carries the program counter and runs the control
logic in parallel, so no layer is spent broadcasting the instruction.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from vm.common.errors import InputError
from vm.common.limits import is_whole_number
from vm.functions import FunctionBlock, make_block
from vm.transformer.layout import Layout, LayoutBuilder

MAX_COLUMNS = 1 << 16


@dataclass(frozen=True)
class FleqGeometry:
    """Block size d, the function blocks (name and parameters), memory cells and
    instructions (EOF included): everything the weights depend on."""

    d: int
    functions: tuple[tuple[str, tuple[tuple[str, float], ...]], ...]
    cells: int
    instructions: int

    def __post_init__(self) -> None:
        for name in ("d", "cells", "instructions"):  # as Geometry's: 2.5 failed in
            value = getattr(self, name)  # bit_length, None in a comparison
            if not is_whole_number(value):
                raise InputError(f"geometry {name} must be an integer, got {value!r:.40}")
            object.__setattr__(self, name, int(value))  # numpy's has no bit_length
        if not (isinstance(self.functions, tuple) and all(
                isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], tuple) for entry in self.functions)):
            # None failed with "not iterable" when the blocks were first built, a list
            # as the key of the machine's cache ("unhashable type")
            raise InputError(f"geometry functions must be a tuple of (name, parameters) "
                             f"pairs, as FLEQ.geometry_for(program) makes them, got "
                             f"{self.functions!r:.60}")
        if not 1 <= self.d <= 16:
            raise InputError(f"block size d must be between 1 and 16, got {self.d}")
        if self.cells < 2:
            raise InputError("memory needs at least the two reserved cells (0 and 1)")
        if self.instructions < 1:
            raise InputError("a program needs at least the EOF instruction")
        if self.columns > MAX_COLUMNS:
            raise InputError(f"{self.columns:,} columns ({self.scratch:,} scratch and "
                             f"function blocks, {self.cells:,} memory cells of {self.d}, "
                             f"{self.instructions:,} instructions) exceed the limit of "
                             f"{MAX_COLUMNS:,}")

    @cached_property
    def blocks(self) -> tuple[FunctionBlock, ...]:
        return tuple(make_block(name, **dict(params)) for name, params in self.functions)

    def block_width(self, index: int) -> int:
        return 3 * self.d + self.blocks[index].extra_columns(self.d)

    @property
    def scratch(self) -> int:
        return 1 + sum(self.block_width(i) for i in range(len(self.blocks)))

    @property
    def columns(self) -> int:
        return self.scratch + self.cells * self.d + self.instructions

    @property
    def pos_bits(self) -> int:
        return max(2, (self.columns - 1).bit_length())

    @property
    def memory_start(self) -> int:
        return self.scratch

    @property
    def instruction_start(self) -> int:
        return self.scratch + self.cells * self.d

    @property
    def eof_column(self) -> int:
        return self.columns - 1

    def cell_column(self, cell: int) -> int:
        return self.scratch + cell * self.d

    def instruction_column(self, index: int) -> int:
        return self.instruction_start + index

    def block_columns(self, index: int) -> range:
        start = 1 + sum(self.block_width(i) for i in range(index))
        return range(start, start + self.block_width(index))

    def describe(self) -> str:
        names = ", ".join(repr(b) for b in self.blocks) or "none"
        return (f"n={self.columns} columns (scratch {self.scratch}, memory {self.cells} cells "
                f"x d={self.d}, instructions {self.instructions} incl. EOF), "
                f"{self.pos_bits}-bit positions, blocks: {names}")

    def as_dict(self) -> dict:
        return {"d": self.d, "cells": self.cells, "instructions": self.instructions,
                "columns": self.columns, "scratch": self.scratch, "pos_bits": self.pos_bits,
                "functions": [{"name": n, **dict(p)} for n, p in self.functions]}


POINTERS = ("a", "b", "c", "flag", "p")


def fleq_layout(geometry: FleqGeometry) -> Layout:
    """Allocate every field and region of the FLEQ machine for `geometry`."""
    B, d, M = geometry.pos_bits, geometry.d, len(geometry.blocks)
    builder = LayoutBuilder()
    for name in POINTERS:
        builder.add(f"i_{name}", B, persistent=True)
    builder.add("i_m", max(M, 1), persistent=True)
    builder.add("i_dh", d, persistent=True)
    builder.add("i_dw", d, persistent=True)
    builder.group("instr", [f"i_{n}" for n in (*POINTERS, "m", "dh", "dw")])
    builder.add("mem", d, persistent=True)
    builder.add("pc", B, persistent=True)
    builder.add("pos", B, persistent=True)
    for name in ("one", "scratch", "nullkey", "isA", "isB", "isC"):
        builder.add(name, 1, persistent=True)
    builder.add("kone", d, persistent=True)
    builder.add("koff", B, persistent=True)
    for index in range(M):
        builder.add(f"gblock{index}", 1, persistent=True)
        builder.add(f"cblock{index}", 1, persistent=True)
    for name in ("gA", "gB", "gC"):
        builder.add(name, 1, persistent=True)
    for index, block in enumerate(geometry.blocks):
        for name in block.constant_fields(d):
            size = block.constant_fields(d)[name].shape[0]
            builder.add(f"b{index}.{name}", size, persistent=True)
    for name in POINTERS:
        builder.add(f"cur_{name}", B)
    builder.add("cur_m", max(M, 1))
    builder.add("cur_dh", d)
    builder.add("cur_dw", d)
    builder.group("cur", [f"cur_{n}" for n in (*POINTERS, "m", "dh", "dw")])
    for name, size in (("inc", B), ("ptr", B), ("wptr", B), ("sel", 1), ("dwk", 1),
                       ("flagval", d), ("fb", 1), ("rd", d), ("old", d), ("res", d),
                       ("resmask", d), ("wkey", B), ("wbuf", d)):
        builder.add(name, size)
    for index, block in enumerate(geometry.blocks):
        for name, size in block.private_fields(d):
            builder.add(f"b{index}.{name}", size)
    builder.region("scratch", geometry.scratch)
    builder.region("memory", geometry.cells * d)
    builder.region("instructions", geometry.instructions)
    return builder.build()
