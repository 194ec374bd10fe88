"""The typed program every front end produces and every engine executes.

A `Program` is the single object shared by the reference interpreter and the
punchcard encoder, so both engines run exactly the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from vm.common.errors import InputError, counted, shown_path
from vm.common.limits import is_whole_number

ZERO_CELL = 0
"""Reserved memory cell holding 0 (paper, Step 7 of Lemma 4); also used by `goto`."""
MINUS_ONE_CELL = 1
"""Reserved memory cell holding -1, the EOF instruction's `b` operand."""
RESERVED_NAMES = {ZERO_CELL: "@zero", MINUS_ONE_CELL: "@minus_one"}


def first_not_whole(values: Sequence | np.ndarray) -> int | None:
    """The index of the first value that is no integer (`is_whole_number`), else None;
    the assemblers' own Python ints pass in one quick sweep."""
    if all(type(value) is int for value in values):
        return None
    return next((index for index, value in enumerate(values) if not is_whole_number(value)),
                None)


def check_index(index: object, what: str, stop: int | None = None) -> None:
    """InputError unless `index` is a whole number from 0 (to `stop`, when given): the
    programs' lookups by index answered for nonsense (instruction_text(-1) gave the last
    instruction, address_name(1.5) 'mem[1.5]', label_at(True) instruction 1's label) or
    failed in list indexing (instruction_text(None), 10**6)."""
    if not is_whole_number(index) or index < 0 or stop is not None and index > stop:
        upper = "" if stop is None else f" to {stop}"
        raise InputError(f"{what} must be a whole number from 0{upper}, got {index!r:.40}")


def check_parts(program: object, instruction_type: type, mappings: tuple[str, ...]) -> None:
    """InputError unless `program.instructions` is a list of `instruction_type` and each of
    `mappings` a dict: `dataclasses.replace(program, instructions=None)` failed with a
    TypeError, [None] on a missing attribute ('pos'), and labels=None or symbols=None were
    taken, to fail in the first lookup by name."""
    source = shown_path(program.source)
    instructions = program.instructions
    if isinstance(instructions, (str, bytes)) or not isinstance(instructions, Sequence):
        raise InputError(f"{source}: instructions must be a list of {instruction_type.__name__}, "
                         f"got {type(instructions).__name__}")
    for index, instruction in enumerate(instructions):
        if not isinstance(instruction, instruction_type):
            raise InputError(f"{source}: instruction {index} must be an "
                             f"{instruction_type.__name__}, got {type(instruction).__name__}")
    for name in mappings:
        if not isinstance(getattr(program, name), dict):
            raise InputError(f"{source}: {name} must be a dict, got "
                             f"{type(getattr(program, name)).__name__}")


def check_memory(memory: object, size: int, unit: str, whole: bool = False) -> None:
    """Refuse a memory to name that is not a list of the program's `size` entries (`unit`:
    what one is; `whole`: integers only): a shorter one failed with an IndexError, None
    with a TypeError, and a longer one (another program's) was named as if it were this
    program's."""
    if isinstance(memory, (str, bytes)) or not isinstance(memory, (Sequence, np.ndarray)):
        raise InputError(f"memory must be a list of the program's {counted(size, unit)}, "
                         f"got {type(memory).__name__}")
    if len(memory) != size:
        raise InputError(f"memory holds {counted(len(memory), unit)}, the program has {size}")
    bad = first_not_whole(memory) if whole else None  # 1.5 was named as a word's value
    if bad is not None:
        raise InputError(f"memory words must be integers, got {memory[bad]!r:.40}")


@dataclass(frozen=True)
class SourcePos:
    """A 1-based position in a source file, kept for error messages and listings."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{shown_path(self.file)}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Instruction:
    """`subleq a, b, c`: memory addresses a, b (0-based) and instruction index c."""

    a: int
    b: int
    c: int
    pos: SourcePos | None = None
    text: str = ""


@dataclass(frozen=True)
class Symbol:
    """A named block of memory: a cell (size 1) or an array."""

    name: str
    address: int
    size: int
    pos: SourcePos | None = None


@dataclass
class Program:
    """A SUBLEQ program with Harvard memory: data cells and instructions apart.

    `instructions` excludes the EOF instruction; the punchcard appends it at
    index `len(instructions)`, with operands `eof_operands` (a cell holding 0
    and a cell holding a non-positive value), so it changes nothing and jumps
    to itself.
    """

    instructions: list[Instruction]
    memory: list[int]
    symbols: dict[str, Symbol] = field(default_factory=dict)
    labels: dict[str, int] = field(default_factory=dict)
    bits: int = 8
    source: str = "<program>"
    eof_operands: tuple[int, int] = (ZERO_CELL, MINUS_ONE_CELL)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise InputError unless the word size, every value and every operand is a whole
        number, every operand is in range, every value fits the word size, and the EOF
        instruction provably stays a no-op that jumps to itself. The memory is kept as a
        list of Python ints: `dataclasses.replace(program, memory=...)` took 2.5 (the
        reference computed 3! = 6.0 in 64 steps, the transformer 2 in 34), True, '1' (a
        TypeError), numpy int8 values (an OverflowError in the reference), an array and None
        (a TypeError in len)."""
        source = shown_path(self.source)
        if not is_whole_number(self.bits) or self.bits < 1:  # 16.0 failed in `<<`
            raise InputError(f"{source}: bits must be a whole number of bits, got "
                             f"{self.bits!r:.40}")
        self.bits = int(self.bits)  # np.int64(64) overflowed in wrap: 'gcd' gave -2^63
        if isinstance(self.memory, (str, bytes)) or not isinstance(self.memory,
                                                                   (Sequence, np.ndarray)):
            raise InputError(f"{source}: memory must be a list of integers, got "
                             f"{type(self.memory).__name__}")
        bad = first_not_whole(self.memory)
        if bad is not None:
            raise InputError(f"{source}: memory values must be integers, got "
                             f"{self.memory[bad]!r:.40}")
        self.memory = [int(value) for value in self.memory]
        cells = len(self.memory)
        low, high = word_range(self.bits)
        if not all(low <= value <= high for value in self.memory):
            bad = next(v for v in self.memory if not low <= v <= high)
            raise InputError(f"{source}: memory value {bad} does not fit in {self.bits}-bit words")
        eof_a, eof_b = self.eof_operands
        if not (0 <= eof_a < cells and 0 <= eof_b < cells):
            raise InputError(f"{source}: EOF operands {self.eof_operands} outside memory")
        if self.memory[eof_a] != 0 or self.memory[eof_b] > 0:
            raise InputError(f"{source}: the EOF instruction needs mem[{eof_a}] = 0 and "
                             f"mem[{eof_b}] <= 0")
        check_parts(self, Instruction, ("symbols", "labels"))
        for index, instruction in enumerate(self.instructions):
            where = str(instruction.pos) if instruction.pos else \
                f"{source}: instruction {index}"
            if not (type(instruction.a) is type(instruction.b) is type(instruction.c) is int
                    or all(is_whole_number(operand) for operand in
                           (instruction.a, instruction.b, instruction.c))):  # 2.0: an index
                raise InputError(f"{where}: operands must be integers, got "
                                 f"{(instruction.a, instruction.b, instruction.c)!r:.60}")
            if not (0 <= instruction.a < cells and 0 <= instruction.b < cells):
                raise InputError(f"{where}: operand outside memory (cells 0..{cells - 1})")
            if not 0 <= instruction.c <= self.eof:
                raise InputError(f"{where}: jump target {instruction.c} outside the program")
            if instruction.b in (eof_a, eof_b) and instruction.a != instruction.b:
                raise InputError(f"{where}: writes mem[{instruction.b}], which the EOF "
                                 "instruction needs unchanged (only 'subleq x, x' may write it)")

    @property
    def eof(self) -> int:
        """Index of the EOF instruction (one past the last real instruction)."""
        return len(self.instructions)

    def named_memory(self, memory: list[int]) -> dict[str, int | list[int]]:
        """Memory values by symbol name (arrays as lists), in address order."""
        check_memory(memory, len(self.memory), "word", whole=True)
        named: dict[str, int | list[int]] = {}
        for symbol in sorted(self.symbols.values(), key=lambda s: s.address):
            values = memory[symbol.address:symbol.address + symbol.size]
            named[symbol.name] = values if symbol.size > 1 else values[0]
        return named

    def label_at(self, index: int) -> str | None:
        """The first label that names instruction `index`, if any."""
        check_index(index, "index", self.eof)
        if index == self.eof:
            return "EOF"
        return self._first_labels.get(index)

    @cached_property
    def _first_labels(self) -> dict[int, str]:
        """The first label of each labelled instruction, built once: label_at scanned every
        label, so a trace of 30,000 steps through 30,000 labels took over a minute."""
        first: dict[int, str] = {}
        for name, index in self.labels.items():
            first.setdefault(index, name)
        return first

    def instruction_text(self, index: int) -> str:
        """Instruction `index` (0..eof) as written in the source, or rebuilt from its
        operands; the EOF instruction with its reserved operands."""
        check_index(index, "index", self.eof)
        if index == self.eof:
            a, b = self.eof_operands
            return f"subleq {self.address_name(a)}, {self.address_name(b)}, EOF"
        instruction = self.instructions[index]
        if instruction.text:
            return instruction.text
        target = self.label_at(instruction.c) or str(instruction.c)
        return (f"subleq {self.address_name(instruction.a)}, "
                f"{self.address_name(instruction.b)}, {target}")

    def address_name(self, address: int) -> str:
        """A readable name for a memory address: `x`, `xs+2`, or `mem[7]` (past the
        program's memory too: a geometry may hold more)."""
        check_index(address, "address")
        if address in RESERVED_NAMES:
            return RESERVED_NAMES[address]
        return self._address_names.get(address, f"mem[{address}]")

    @cached_property
    def _address_names(self) -> dict[int, str]:
        """The name of each memory cell a symbol covers (the first such symbol), built once,
        as _first_labels is for the same reason."""
        names: dict[int, str] = {}
        for symbol in self.symbols.values():
            for address in range(max(symbol.address, 0),
                                 min(symbol.address + symbol.size, len(self.memory))):
                offset = address - symbol.address
                names.setdefault(address, symbol.name if symbol.size == 1
                                 else f"{symbol.name}+{offset}")
        return names


def all_instructions(program: Program) -> list[Instruction]:
    """The program's instructions followed by its EOF instruction (jumps to itself)."""
    a, b = program.eof_operands
    return [*program.instructions, Instruction(a, b, program.eof, text="EOF")]


def word_range(bits: int) -> tuple[int, int]:
    """Smallest and largest value of an N-bit two's-complement word."""
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def bits_needed(value: int) -> int:
    """Smallest two's-complement word size that holds `value` (at least 2)."""
    bits = 2
    while not word_range(bits)[0] <= value <= word_range(bits)[1]:
        bits += 1
    return bits


def wrap(value: int, bits: int) -> int:
    """`value` reduced to an N-bit two's-complement word, as a binary adder does."""
    half = 1 << (bits - 1)
    return ((value + half) % (1 << bits)) - half
