"""The FLEQ oracle: the same FleqProgram executed with exact numpy functions.

Each step computes f_m on the operands' true shapes in float64, stores the
result zero-padded in cell c, then branches on mem[flag] <= 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from assembler.fleq_program import FleqProgram, padded
from vm.functions import make_block
from vm.machines.stepping import step_until_halted


@dataclass(frozen=True)
class FleqStep:
    step: int
    pc: int
    written: int | None
    old: np.ndarray | None
    new: np.ndarray | None
    jumped: bool
    next_pc: int


@dataclass
class FleqResult:
    cells: list[np.ndarray]
    pc: int
    steps: int
    halted: bool
    trace: list[FleqStep] = field(default_factory=list)


class FleqReference:
    """Executes a FleqProgram one instruction at a time."""

    def __init__(self, program: FleqProgram) -> None:
        self.program = program
        self.blocks = {name: make_block(name, **dict(params)) for name, params in
                       program.functions}
        self.reset()

    def reset(self) -> None:
        self.cells = [cell.copy() for cell in self.program.cells]
        self.pc = 0
        self.steps = 0

    @property
    def halted(self) -> bool:
        return self.pc == self.program.eof

    def step(self) -> FleqStep:
        program, pc = self.program, self.pc
        if self.halted:
            record = FleqStep(self.steps, pc, None, None, None, True, pc)
            self.steps += 1
            return record
        instruction = program.instructions[pc]
        written = old = new = None
        if instruction.function is not None:
            block = self.blocks[instruction.function]
            (ha, wa), (hb, wb) = instruction.a_shape, instruction.b_shape
            a = self.cells[instruction.a][:ha, :wa]
            b = self.cells[instruction.b][:hb, :wb] if block.arity == 2 else None
            result = np.asarray(block.reference(a, b), dtype=float)
            written, old = instruction.c, self.cells[instruction.c].copy()
            new = padded(result, program.d)
            self.cells[written] = new
        jumped = bool(self.cells[instruction.flag][0, 0] <= 0)
        record = FleqStep(self.steps, pc, written, old, new, jumped,
                          instruction.target if jumped else pc + 1)
        self.pc = record.next_pc
        self.steps += 1
        return record

    def run(self, max_steps: int, trace: bool = False) -> FleqResult:
        records = step_until_halted(self, max_steps, trace)
        return FleqResult([c.copy() for c in self.cells], self.pc, self.steps, self.halted,
                          records)


def run_fleq_reference(program: FleqProgram, max_steps: int = 100_000,
                       trace: bool = False) -> FleqResult:
    return FleqReference(program).run(max_steps, trace)
