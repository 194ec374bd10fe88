"""The typed FLEQ program every FLEQ front end produces and both engines execute.

Memory is a list of cells, each a d x d float64 matrix zero-padded around a
variable's true shape. An instruction is FLEQ(a, b, c, m, flag, p, d_h, d_w):
mem[c] = f_m(mem[a], mem[b]) (no write when `function` is None), then
if mem[flag] <= 0 goto p, else the next instruction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from assembler.program import SourcePos, check_index, check_memory, check_parts
from vm.common.errors import InputError, PlacedInputError, shown_path
from vm.common.limits import is_whole_number
from vm.common.signatures import MAGNITUDE, MAGNITUDE_BITS, Shape

ZERO_CELL = 0
"""Reserved integer cell holding 0: the flag of `goto` and of the EOF instruction."""
ONE_CELL = 1
"""Reserved integer cell holding 1: the flag of an instruction that never branches."""
RESERVED = {ZERO_CELL: "@zero", ONE_CELL: "@one"}



@dataclass(frozen=True)
class Variable:
    """A named cell: its shape (rows, columns) and whether it holds an integer counter."""

    name: str
    cell: int
    shape: Shape
    integer: bool
    pos: SourcePos | None = None

    @property
    def kind(self) -> str:
        if self.integer:
            return "int"
        if self.shape == (1, 1):
            return "real"
        return "vector" if self.shape[1] == 1 else "matrix"


@dataclass(frozen=True)
class FleqInstruction:
    """One FLEQ instruction; cells by index, the jump target by instruction index."""

    function: str | None
    a: int
    b: int
    c: int
    flag: int
    target: int
    shape: Shape
    """Result shape (d_h, d_w): the write mask."""
    a_shape: Shape = (1, 1)
    b_shape: Shape = (1, 1)
    pos: SourcePos | None = None
    text: str = ""


@dataclass
class FleqProgram:
    """A FLEQ program with its block size and function blocks (name, parameters)."""

    instructions: list[FleqInstruction]
    cells: list[np.ndarray]
    variables: dict[str, Variable] = field(default_factory=dict)
    labels: dict[str, int] = field(default_factory=dict)
    d: int = 1
    functions: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    source: str = "<program>"

    def __post_init__(self) -> None:
        self.validate()

    @property
    def eof(self) -> int:
        return len(self.instructions)

    def check_counters(self, dtype: str) -> None:
        """Raise InputError if an integer counter starts beyond the integers `dtype` holds
        exactly (2^24 in float32, 2^53 in float64): its arithmetic would round silently."""
        limit = 2.0 ** (np.finfo(dtype).nmant + 1)
        for variable in self.variables.values():
            value = float(self.cells[variable.cell][0, 0])
            if variable.integer and abs(value) > limit:
                message = (f"counter '{variable.name}' = {value:.0f} is beyond {limit:.0f}, "
                           f"the largest integer {dtype} counts exactly")
                if variable.pos is None:
                    raise InputError(f"{shown_path(self.source)}: {message}")
                pos = variable.pos
                raise PlacedInputError(message, pos.file, pos.line, pos.column)

    def validate(self) -> None:
        """Raise InputError unless operands, targets and cells fit the program, and its
        blocks are (name, parameters) pairs (None failed with a TypeError)."""
        self._check_cells()
        check_parts(self, FleqInstruction, ("variables", "labels"))
        if isinstance(self.functions, (str, bytes)) or not isinstance(self.functions, Sequence) \
                or not all(isinstance(f, tuple) and len(f) == 2 and isinstance(f[0], str)
                           for f in self.functions):
            raise InputError(f"{shown_path(self.source)}: functions must be (name, parameters) "
                             f"pairs, got {self.functions!r:.60}")
        cells, names = len(self.cells), [name for name, _ in self.functions]
        if self.cells[ZERO_CELL][0, 0] != 0 or self.cells[ONE_CELL][0, 0] != 1:
            raise InputError(f"{shown_path(self.source)}: cells 0 and 1 must hold 0 and 1")
        for index, instruction in enumerate(self.instructions):
            where = str(instruction.pos) if instruction.pos else \
                f"{shown_path(self.source)}: instruction {index}"
            operands = (instruction.a, instruction.b, instruction.c, instruction.flag)
            if not all(is_whole_number(number) for number in (*operands, instruction.target)):
                raise InputError(f"{where}: operands and the jump target must be integers, "
                                 f"got {(*operands, instruction.target)!r:.60}")  # 2.0: an index
            if not all(0 <= cell < cells for cell in operands):
                raise InputError(f"{where}: operand outside memory (cells 0..{cells - 1})")
            if not 0 <= instruction.target <= self.eof:
                raise InputError(f"{where}: jump target outside the program")
            if instruction.function is not None and instruction.function not in names:
                raise InputError(f"{where}: function '{instruction.function}' is not among "
                                 f"the program's blocks")
            if instruction.function is not None and instruction.c in RESERVED:
                raise InputError(f"{where}: writes reserved cell {RESERVED[instruction.c]}")

    def _check_cells(self) -> None:
        """The block size a whole number and the cells a list of d x d real arrays whose
        values the machine holds, as the assembler reads them (finite, |x| <= 2^50, none
        below the smallest normal double), kept as float64 arrays.
        `dataclasses.replace(program, cells=...)` took a NaN or 1e300 (the reference computed
        on with it, the transformer returned NaN), 3 + 1j (its imaginary part dropped),
        True, and d = 1.0; a nested list, None or [] failed with an AttributeError, a
        TypeError or an IndexError."""
        source = shown_path(self.source)
        if not is_whole_number(self.d) or self.d < 1:
            raise InputError(f"{source}: the block size d must be a whole number, at least "
                             f"1, got {self.d!r:.40}")
        self.d = int(self.d)
        if isinstance(self.cells, (str, bytes)) or not isinstance(self.cells, Sequence) \
                or len(self.cells) < len(RESERVED):
            raise InputError(f"{source}: cells must be a list of {self.d}x{self.d} arrays, "
                             f"cells 0 and 1 holding 0 and 1")
        checked = []
        for index, cell in enumerate(self.cells):
            array = np.asarray(cell)
            if array.dtype.kind not in "iuf":  # bool, complex, str, object
                raise InputError(f"{source}: cell {index} must hold real numbers, got dtype "
                                 f"{array.dtype}")
            if array.shape != (self.d, self.d):
                raise InputError(f"{source}: every cell must be {self.d}x{self.d}, cell "
                                 f"{index} is {'x'.join(map(str, array.shape)) or 'a scalar'}")
            array = array.astype(np.float64, copy=False)
            magnitudes = np.abs(array)
            if not (np.isfinite(array).all() and magnitudes.max() <= MAGNITUDE) or (
                    (magnitudes > 0) & (magnitudes < np.finfo(np.float64).tiny)).any():
                raise InputError(f"{source}: cell {index} holds a value the machine does not "
                                 f"hold: every value must be finite, within |x| <= "
                                 f"2^{MAGNITUDE_BITS} and 0 or at least the smallest normal "
                                 f"double (docs/fleq_machine.md)")
            checked.append(array)
        self.cells = checked

    def named_memory(self, cells: list[np.ndarray]) -> dict[str, float | list]:
        """Values by variable name: scalars as numbers, others as nested lists; `cells` as a
        run's memory holds them, each a d x d array."""
        check_memory(cells, len(self.cells), "cell")
        shapes = {np.shape(cell) for cell in cells} - {(self.d, self.d)}
        if shapes:  # a flat list of floats failed with "too many indices for array"
            raise InputError(f"memory cells must be {self.d} x {self.d} arrays, got one of "
                             f"shape {shapes.pop()}")
        named: dict[str, float | list] = {}
        for variable in sorted(self.variables.values(), key=lambda v: v.cell):
            rows, columns = variable.shape
            value = np.asarray(cells[variable.cell])[:rows, :columns]
            if variable.shape == (1, 1):
                number = float(value[0, 0])
                whole = variable.integer and np.isfinite(number)
                named[variable.name] = int(round(number)) if whole else number
            else:
                named[variable.name] = value.tolist()
        return named

    def cell_name(self, cell: int) -> str:
        """A cell's variable name, or `cell7` (past the program's cells too: a geometry may
        hold more)."""
        check_index(cell, "cell")
        if cell in RESERVED:
            return RESERVED[cell]
        return self._cell_names.get(cell, f"cell{cell}")

    def label_at(self, index: int) -> str | None:
        check_index(index, "index", self.eof)
        if index == self.eof:
            return "EOF"
        return self._first_labels.get(index)

    @cached_property
    def _cell_names(self) -> dict[int, str]:
        """The first variable naming each cell, built once (as _first_labels)."""
        names: dict[int, str] = {}
        for variable in self.variables.values():
            names.setdefault(variable.cell, variable.name)
        return names

    @cached_property
    def _first_labels(self) -> dict[int, str]:
        """The first label of each labelled instruction, built once: label_at and cell_name
        scanned every label and variable, so `ltvm asm --listing` of 20,000 labelled
        statements spent 7 s in them."""
        first: dict[int, str] = {}
        for name, index in self.labels.items():
            first.setdefault(index, name)
        return first

    def instruction_text(self, index: int) -> str:
        check_index(index, "index", self.eof)
        if index == self.eof:
            return "EOF"
        instruction = self.instructions[index]
        return instruction.text or describe(self, instruction)


def describe(program: FleqProgram, instruction: FleqInstruction) -> str:
    """A readable form of an instruction, e.g. `t = add(a, b) if n <= 0 goto L3`."""
    parts = []
    if instruction.function is not None:
        operands = program.cell_name(instruction.a)
        if instruction.b != ZERO_CELL or instruction.function in ("add", "sub", "mul"):
            operands += f", {program.cell_name(instruction.b)}"
        parts.append(f"{program.cell_name(instruction.c)} = {instruction.function}({operands})")
    if instruction.flag != ONE_CELL:
        target = program.label_at(instruction.target) or str(instruction.target)
        if instruction.flag == ZERO_CELL:
            parts.append(f"goto {target}")
        else:
            parts.append(f"if {program.cell_name(instruction.flag)} <= 0 goto {target}")
    return " ".join(parts) or "nop"


def padded(value: np.ndarray | float, d: int) -> np.ndarray:
    """A value placed in the top-left corner of a zero d x d cell."""
    cell = np.zeros((d, d))
    array = np.atleast_2d(np.asarray(value, dtype=float))
    cell[:array.shape[0], :array.shape[1]] = array
    return cell
