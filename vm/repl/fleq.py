"""The REPL on FLEQ programs: both engines in lockstep, named cells, typed instructions.

A FLEQ cell is a d x d block of reals; a variable is its top-left shape. The
transformer's reals differ from the reference's by the function blocks'
documented errors, so the engines "disagree" only when their program
counters do (control flow went apart); `errors` measures the rest per cell.
Edits between steps write reals into the punchcard's `mem` rows (and pc codes
into every scratch column's `pc` rows), exactly the entries a pass leaves.
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass, replace

import numpy as np
import torch

from assembler.diagnostics import SourceError
from assembler.fleq import (COMPARE_CELL, DIFFERENCE_CELL, SMALLEST_NORMAL, is_number,
                            underflows)
from vm.isa import FLEQ
from assembler.fleq_program import (ONE_CELL, RESERVED, FleqInstruction, FleqProgram,
                                    Variable, padded)
from vm.common.encoding import pm1_code
from vm.common.errors import InputError
from vm.common.signatures import MAGNITUDE, MAGNITUDE_BITS
from vm.machines.fleq.domains import EXACT_INTEGERS, unbounded_problem
from vm.machines.fleq.reference import FleqReference, machine_domain_problem
from vm.repl.state import ENGINES, Lockstep

MATRIX_PRECISION = 6
SCALAR_DIGITS = 10
"""Significant digits of a scalar: enough to read, few enough to hide the blocks' errors."""


ELEMENT = re.compile(r"^(?P<name>[^\s\[\]]+)\s*\[\s*(?P<first>\d+)\s*"
                     r"(?:,\s*(?P<second>\d+)\s*|\]\s*\[\s*(?P<nested>\d+)\s*)?\]$", re.ASCII)
"""One entry of a variable: `v[1]` of a vector, `M[1, 0]` or `M[1][0]` of a matrix."""


@dataclass(frozen=True)
class FleqLocation:
    """A named FLEQ cell, or one entry of it: its name, cell index and shape."""

    name: str
    cell: int
    shape: tuple[int, int]
    entry: tuple[int, int] | None = None
    """(row, column) of the one entry named, None for the whole variable from (0, 0)."""

    def read(self, cells: list[np.ndarray]) -> float | np.ndarray:
        (rows, columns), (top, left) = self.shape, self.entry or (0, 0)
        value = np.asarray(cells[self.cell])[top:top + rows, left:left + columns]
        return float(value[0, 0]) if self.shape == (1, 1) else value.copy()


def resolve_fleq_location(program: FleqProgram, text: str) -> FleqLocation:
    """A variable name, one entry of it (v[1], M[1, 0]), @zero, @one, or cellK for any
    cell -> the cell (or entry) it names."""
    text = text.strip()
    element = ELEMENT.match(text)
    if element is not None and element["name"] in program.variables:
        return _entry(program.variables[element["name"]],
                      [int(index) for index in element.group("first", "second", "nested")
                       if index is not None])
    variable = program.variables.get(text)
    if variable is not None:
        return FleqLocation(text, variable.cell, variable.shape)
    reserved = {name: cell for cell, name in RESERVED.items()}
    if text in reserved:
        return FleqLocation(text, reserved[text], (1, 1))
    index = text[4:]
    if text.startswith("cell") and index.isascii() and index.isdigit() and \
            int(index) < len(program.cells):
        return FleqLocation(text, int(index), (program.d, program.d))
    raise InputError(f"no variable named '{text}'")


def _entry(variable: Variable, indices: list[int]) -> FleqLocation:
    """The entry `indices` name in `variable`: one index for a vector (or a scalar's [0]),
    two for a matrix, as `print` shows its rows and columns (from 0)."""
    rows, columns = variable.shape
    if len(indices) == 1 and rows > 1 and columns > 1:
        raise InputError(f"'{variable.name}' is a {rows}x{columns} matrix: name an entry as "
                         f"{variable.name}[ROW, COLUMN]")
    row, column = (indices if len(indices) == 2 else
                   [indices[0], 0] if columns == 1 else [0, indices[0]])
    if row >= rows or column >= columns:
        raise InputError(f"[{', '.join(map(str, indices))}] is outside '{variable.name}' "
                         f"({rows}x{columns}; indices from 0)")
    name = (f"{variable.name}[{row}, {column}]" if rows > 1 and columns > 1 else
            f"{variable.name}[{max(row, column)}]")
    return FleqLocation(name, variable.cell, (1, 1), (row, column))


def format_real(value: float | np.ndarray) -> str:
    """A scalar as a number; a vector or matrix as rows of a matrix. Never fewer digits
    than the integer part within 2^50 has: 10 digits showed `set k 12345678901` as
    1.23456789e+10, a number the cell does not hold."""
    whole = _integer_digits(value)
    if isinstance(value, np.ndarray):
        return np.array2string(value, precision=max(MATRIX_PRECISION, whole - 1),
                               suppress_small=False)
    return f"{value:.{max(SCALAR_DIGITS, whole)}g}"


def _integer_digits(value: float | np.ndarray) -> int:
    """Digits of the integer part of the largest |entry| within the machine's 2^50 (beyond
    it, or not finite, the value carries no error bound: none are promised)."""
    magnitudes = np.abs(np.asarray(value, dtype=float))
    kept = magnitudes[magnitudes <= MAGNITUDE]
    return len(str(int(kept.max()))) if kept.size else 0


def same_value(first: object, second: object) -> bool:
    """Equal scalars, lists or arrays (element by element, exactly). NaN equals NaN: a
    watch on a cell left NaN by a block outside its domain fired at every step."""
    if isinstance(first, (float, np.ndarray)) or isinstance(second, (float, np.ndarray)):
        return np.array_equal(np.asarray(first, dtype=float), np.asarray(second, dtype=float),
                              equal_nan=True)
    return first == second


def fleq_changes(program: FleqProgram, before: list[np.ndarray], after: list[np.ndarray],
                 limit: int = 8) -> list[str]:
    """`name = new` (one line per matrix row) for every variable whose cell changed."""
    changed = []
    for variable in sorted(program.variables.values(), key=lambda v: v.cell):
        if np.array_equal(before[variable.cell], after[variable.cell], equal_nan=True):
            continue
        location = FleqLocation(variable.name, variable.cell, variable.shape)
        changed.append(f"{variable.name} = {inline_real(location.read(after))} "
                       f"(was {inline_real(location.read(before))})")
    if len(changed) > limit:
        changed = changed[:limit] + [f"... and {len(changed) - limit} more"]
    return changed


def inline_real(value: float | np.ndarray) -> str:
    """`format_real` on one line (a matrix's rows side by side), for change and watch lines."""
    return " ".join(format_real(value).split())


WORD = re.compile(r"[^\s\[\],]+")
"""What stands between a list's brackets, commas and blanks: each must be a NUMBER (Python's
0x10, 1_0, 0o7, True, "5" and None, which no source holds, are not: `is_number`)."""
BEYOND = (f"values must lie within |x| <= 2^{MAGNITUDE_BITS} (about {MAGNITUDE:.3g}), the "
          "magnitudes the machine keeps exact (docs/fleq_machine.md)")


def _as_read(word: re.Match) -> str:
    """One typed number as the assembler reads it, float(text), written back for
    ast.literal_eval: Python's own literals refused leading zeros ('007', which a source holds
    as 7) and integers past 4,300 digits ("not a number"), and took 1e-400 as 0, which the
    assembler refuses."""
    text = word.group()
    if not is_number(text):
        raise ValueError(text)
    value = float(text)
    if not np.isfinite(value):  # 1e999: finite as typed, past float64
        raise InputError(BEYOND)
    if underflows(text, value):
        raise InputError(f"{text} is below {SMALLEST_NORMAL:.3g}, the smallest normal double: "
                         "the machine flushes it to 0 (write 0)")
    return repr(value)


def parse_real_value(text: str, shape: tuple[int, int]) -> np.ndarray:
    """A number, or a literal list such as [[1, 2], [3, 4]], as a matrix of `shape`."""
    try:
        literal = ast.literal_eval(WORD.sub(_as_read, text).strip())
        value = np.asarray(literal, dtype=float)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise InputError(f"'{text}' is not a number or a list of numbers") from None
    if value.ndim == 1 and shape[1] == 1:
        value = value[:, None]
    if value.ndim == 0 and shape == (1, 1):
        value = value.reshape(1, 1)
    if value.shape != shape:
        raise InputError(f"the value has shape {'x'.join(map(str, value.shape)) or 'scalar'}, "
                         f"the variable is {shape[0]}x{shape[1]}")
    if value.size and np.abs(value).max() > MAGNITUDE:  # as the assembler refuses them
        raise InputError(BEYOND)
    return value


def assemble_fleq_instruction(program: FleqProgram, source: str, line: str) -> FleqInstruction:
    """The one instruction `line` names, assembled after `program`'s own source with the
    same blocks; refused when it would need another block, new cells or several
    instructions (a routine), since the machine's weights are fixed."""
    if "\n" in line or "\r" in line:
        raise InputError("type one instruction on one line")
    text = f"{source.rstrip()}\n.code\n{line}\n"
    typed_line = text.count("\n")
    parameters = {name: dict(values) for name, values in program.functions}
    try:
        extended = FLEQ.assemble_text(text, program.source, d=program.d, parameters=parameters,
                                 functions=[name for name, _ in program.functions])
    except SourceError as error:
        where = f" (column {error.column})" if error.line == typed_line else ""
        raise InputError(f"{error.message}{where}") from None
    if extended.functions != program.functions:
        known = ", ".join(name for name, _ in program.functions)
        raise InputError(f"the machine has only the blocks {known}" if known else
                         "the machine has no blocks: the program calls none, and a typed "
                         "instruction can call only the program's")
    added = len(extended.instructions) - len(program.instructions)
    if added != 1 or extended.labels != program.labels:
        raise InputError("type exactly one instruction (no label, no routine, no branch on "
                         "a real: it compiles to several)")
    new = [name for name in extended.variables if name not in program.variables]
    if new:  # `t = add(a, 3)` said only 'no new cells', not which literal needed one
        raise InputError(f"it needs a cell the program lacks ({', '.join(new)}): a typed "
                         "instruction can use only the literals the program uses")
    instruction = extended.instructions[-1]
    if instruction.function is None:
        raise InputError("a typed instruction must call a block: c = f(a, b)")
    return instruction


class FleqLockstep(Lockstep):
    """A FLEQ program on the transformer and on `FleqReference` (the FLEQ counterpart of
    `LockstepMachine`, with the same interface)."""

    def _new_reference(self) -> FleqReference:
        return FleqReference(self.program)

    def _reference_memory(self) -> list:
        return [cell.copy() for cell in self.reference.cells]

    def differences(self) -> list[tuple[str, int, int]]:
        """The program counters when they differ: reals always differ by block errors."""
        ours, theirs = self.state("transformer").pc, self.state("reference").pc
        return [("pc", ours, theirs)] if ours != theirs else []

    def errors(self) -> list[tuple[FleqLocation, object, object, float]]:
        """(variable, transformer value, reference value, max abs error) per variable."""
        ours, theirs = self.state("transformer").memory, self.state("reference").memory
        found = []
        for variable in sorted(self.program.variables.values(), key=lambda v: v.cell):
            location = FleqLocation(variable.name, variable.cell, variable.shape)
            mine, other = location.read(ours), location.read(theirs)
            error = float(np.max(np.abs(np.asarray(mine) - np.asarray(other))))
            found.append((location, mine, other, error))
        return found

    def execute(self, instruction: FleqInstruction) -> None:
        """Run one typed instruction on the current state; only its cell write is kept.

        The transformer runs one ordinary pass over X with the instruction
        column at pc replaced by the typed one (encoded by the machine's own
        encoder) and keeps the memory rows of the result; the reference runs
        the same instruction at pc and keeps its cells. pc and steps stay.
        """
        if not self.program.instructions:
            raise InputError("the program has no instruction column to run it in")
        self.check_domain(instruction)
        pc = min(max(self.state("transformer").pc, 0), len(self.program.instructions) - 1)
        typed = replace(instruction, flag=ONE_CELL, target=pc + 1)  # no jump: pc stays
        patched_program = replace(self.program, instructions=[
            typed if index == pc else old
            for index, old in enumerate(self.program.instructions)])
        card = self.executor.machine.encode(patched_program)
        column, instr = self.geometry.instruction_column(pc), self.layout["instr"]
        patched = self.X.clone()
        self._write_pc(patched, pc)
        patched[0, instr, column] = torch.as_tensor(card[instr, column], dtype=patched.dtype,
                                                    device=patched.device)
        new_X = self._memory_after_pass(patched)
        alone = FleqReference(patched_program)
        alone.cells = [cell.copy() for cell in self.reference.cells]
        alone.pc = pc
        alone.step()
        reference = self._reference_copy()
        reference.cells = alone.cells
        self.X, self.reference = new_X, reference

    def check_domain(self, instruction: FleqInstruction) -> None:
        """Refuse a typed instruction that `domain_problem` finds outside a domain, as
        `run`'s `domain:` check would flag it: the transformer's number would carry no
        error bound."""
        problem = self.domain_problem(instruction)
        if problem is not None:
            raise InputError(f"not run: {problem}, where its error bound does not hold")

    def domain_problem(self, instruction: FleqInstruction) -> str | None:
        """What `instruction`, run on the reference's exact cells now, leaves: its block's
        domain (the operands, or the result for blocks whose domain bounds it) or the
        machine's (a result beyond 2^50 or not finite: add(c, c) at c = 1e15); None when
        it stays inside both."""
        block = self.reference.blocks[instruction.function]
        unbounded = unbounded_problem(block, self.executor.dtype_name)
        if unbounded is not None:  # mul.scale=1e-50 wrote 1e51 into z and its operands
            return f"it leaves {instruction.function}'s domain ({unbounded})"
        (ha, wa), (hb, wb) = instruction.a_shape, instruction.b_shape
        cells = self.reference.cells
        a = cells[instruction.a][:ha, :wa]
        b = cells[instruction.b][:hb, :wb] if block.arity == 2 else None
        with np.errstate(all="ignore"):  # an overflow is a result outside the domain
            result = np.asarray(block.reference(a, b), dtype=float)
        outside = machine_domain_problem(result)
        if outside is not None:
            return f"its result leaves the machine's domain ({outside})"
        outside = self._dtype_problem(instruction.c, [a, result] if b is None else [a, b, result])
        if outside is not None:
            return f"it leaves the machine's domain ({outside})"
        domain = block.domain()
        values = [result] if domain.applies_to == "result" else [a] if b is None else [a, b]
        if not all(domain.contains(v) for v in values):
            what = "result leaves" if domain.applies_to == "result" else "operands leave"
            return f"its {what} {instruction.function}'s domain ({domain.explained()})"
        return None

    def _dtype_problem(self, written: int, values: list[np.ndarray]) -> str | None:
        """What the transformer's dtype cannot hold among an instruction's operands and
        result (`values`), as `ltvm run`'s domain check names it: a subnormal, which the
        passes flush to 0, or a counter beyond the integers the dtype holds exactly. In
        float32, add(x, x) at x = 1e-40 gave 0 and k = add(k, one) at k = 2^24 stayed 2^24,
        silently."""
        dtype = self.executor.dtype_name
        tiny = float(np.finfo(dtype).tiny)
        if any(((value != 0) & (np.abs(value) < tiny)).any() for value in values):
            return f"nonzero |x| >= {tiny:.3g} in {dtype}; smaller values flush to 0"
        exact = EXACT_INTEGERS[dtype]
        counter = any(v.integer and v.cell == written for v in self.program.variables.values())
        if counter and abs(values[-1][0, 0]) > exact:
            return f"counters within |n| <= 2^{exact.bit_length() - 1} in {dtype}"
        return None

    def step(self) -> str | None:
        """One instruction on both engines, as `Lockstep.step`; when it left a domain (see
        `domain_problem`), says so: the transformer's values carry no error bound from
        there on, and they went on silently wrong (t = mul(t, d) at t = 2e15)."""
        pc = self.reference.pc
        instruction = None if self.reference.halted else self.program.instructions[pc]
        problem = (self.domain_problem(instruction)
                   if instruction is not None and instruction.function is not None else None)
        super().step()
        if problem is None:
            return None
        return (f"step {self.steps - 1}: {self.program.instruction_text(pc)}: {problem}, "
                f"where its error bound does not hold (see diff)")

    def check_counter(self, location: FleqLocation, value: np.ndarray) -> None:
        """An integer counter takes only integers the machine's dtype holds exactly (2^24
        in float32, 2^53 in float64), as the assembler and the loader demand."""
        variable = next((v for v in self.program.variables.values()
                         if v.cell == location.cell), None)
        if variable is None or not variable.integer:
            return
        number = float(value[0, 0])
        dtype = str(self.X.dtype).removeprefix("torch.")
        limit = 2.0 ** (np.finfo(dtype).nmant + 1)
        if number != int(number):
            raise InputError(f"'{variable.name}' is an integer counter; {number:g} is not an "
                             "integer")
        if abs(number) > limit:
            raise InputError(f"'{variable.name}' is an integer counter; {number:g} is beyond "
                             f"{limit:.0f}, the largest integer {dtype} counts exactly")

    def check_padding(self, location: FleqLocation, value: np.ndarray) -> None:
        """Refuse nonzero entries outside the variable a cell holds (`set cellK` writes the
        whole cell): the blocks read whole cells, so set cell2 [[3, 7], [7, 7]] at x = 3
        made matmul(x, y) give 92 on the transformer while the reference gave 15."""
        held = [v for v in self.program.variables.values() if v.cell == location.cell]
        if not held:
            return
        rows = max(v.shape[0] for v in held)
        columns = max(v.shape[1] for v in held)
        outside = np.array(value, dtype=float)
        outside[:rows, :columns] = 0
        if outside.any():
            names = ", ".join(f"{v.name} ({v.shape[0]}x{v.shape[1]})" for v in held)
            raise InputError(f"{location.name} holds {names}: its entries outside that must "
                             f"stay 0 (the blocks read whole cells); set {held[0].name} instead")

    def check_normal(self, value: np.ndarray) -> None:
        """Refuse a nonzero value below the dtype's smallest normal: float32 held 1e-40 as a
        subnormal until the next pass flushed it to 0, on a cell no instruction wrote."""
        dtype = self.executor.dtype_name
        tiny = float(np.finfo(dtype).tiny)
        small = value[(value != 0) & (np.abs(value) < tiny)]
        if small.size:
            raise InputError(f"{small[0]:g} is below {tiny:.3g}, the smallest normal {dtype}: "
                             "the machine flushes it to 0 (write 0)")

    def check_writable(self, location: FleqLocation) -> None:
        """Refuse the assembler's own read-only cells, as a typed instruction does: `set
        _const_2.0 5` made every literal 2.0 of the program mean 5."""
        for variable in self.program.variables.values():
            if variable.cell == location.cell and (variable.name.startswith("_const_") or
                                                   variable.name in (COMPARE_CELL,
                                                                     DIFFERENCE_CELL)):
                raise InputError(f"'{variable.name}' is the assembler's own read-only cell")

    def set_cell(self, location: FleqLocation, value: np.ndarray) -> None:
        """Store `value` (of the variable's shape) in its cell on both engines."""
        if location.cell in RESERVED:
            raise InputError(f"cell {RESERVED[location.cell]} is reserved")
        self.check_writable(location)
        self.check_counter(location, value)
        self.check_normal(value)
        self.check_padding(location, value)
        new_X = self.X.clone()
        reference = self._reference_copy()
        if location.entry is not None:  # the other entries stay each engine's own
            row, column = location.entry
            start = self.geometry.cell_column(location.cell)
            new_X[0, self.layout["mem"].start + row, start + column] = float(value[0, 0])
            reference.cells[location.cell][row, column] = value[0, 0]
        else:
            cell = padded(value, self.program.d)
            self._write_cell(new_X, location.cell, cell)
            reference.cells[location.cell] = cell
        self.X, self.reference = new_X, reference

    def switch(self, engine: str) -> bool:
        """Make `engine` active, taking over the cells and pc of the one left; True if the
        two held different states."""
        if engine not in ENGINES:
            raise InputError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        if engine == self.active:
            return False
        source, target = self.state(), self.state(engine)
        differed = source.pc != target.pc or not all(
            np.array_equal(mine, other, equal_nan=True)
            for mine, other in zip(source.memory, target.memory))
        if differed and not 0 <= source.pc <= self.program.eof:  # as LockstepMachine: the
            # reference stood at pc -35 and `step` failed with an IndexError
            raise InputError(f"cannot resynchronize: the {self.active}'s pc {source.pc} is "
                             "outside the program (use reset)")
        if differed and engine == "transformer":
            self._check_holdable(source.memory)
            new_X = self.X.clone()
            for cell, value in enumerate(source.memory):
                self._write_cell(new_X, cell, value)
            self._write_pc(new_X, source.pc)
            self.X = new_X
        elif differed:
            reference = self._reference_copy()
            reference.cells, reference.pc = [cell.copy() for cell in source.memory], source.pc
            self.reference = reference
        self.active = engine
        return differed

    def _check_holdable(self, cells: list[np.ndarray]) -> None:
        """Refuse to hand the transformer a cell its dtype cannot hold as a finite number:
        `engine transformer` after the reference's inv(0) wrote inf into X, and every step
        after it failed with 'X must be finite'."""
        dtype = self.executor.dtype_name
        for cell, value in enumerate(cells):
            with np.errstate(over="ignore"):  # 1e300 in float32: inf, as X would take it
                held = np.asarray(value, dtype=dtype)
            if not np.isfinite(held).all():
                shown = value[~np.isfinite(held)][0]
                raise InputError(f"cannot resynchronize: the reference holds {shown:g} in "
                                 f"{self.program.cell_name(cell)}, which the transformer "
                                 f"cannot hold in {dtype} (set it, or reset)")

    def _write_cell(self, X: torch.Tensor, cell: int, value: np.ndarray) -> None:
        start = self.geometry.cell_column(cell)
        X[0, self.layout["mem"], start:start + self.program.d] = torch.as_tensor(
            value, dtype=X.dtype, device=X.device)

    def _write_pc(self, X: torch.Tensor, pc: int) -> None:
        """Every scratch column carries the program counter's code."""
        scratch = self.layout.regions["scratch"]
        code = pm1_code(self.geometry.instruction_column(pc), self.geometry.pos_bits)
        X[0, self.layout["pc"], scratch.start:scratch.stop] = torch.as_tensor(
            code, dtype=X.dtype, device=X.device)[:, None]

    def _reference_copy(self) -> FleqReference:
        reference = copy.copy(self.reference)
        reference.cells = [cell.copy() for cell in self.reference.cells]
        return reference
