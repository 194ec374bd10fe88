"""The FLEQ oracle: the same FleqProgram executed with exact numpy functions.

Each step computes f_m on the operands' true shapes in float64, stores the
result zero-padded in cell c, then branches on mem[flag] <= 0. A written value
outside the machine's domain (not finite, beyond 2^MAGNITUDE_BITS, or a counter
float64 no longer counts exactly) is recorded as `left_domain`, and a run stops
there: every later value would be numpy's overflow, not the machine's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from assembler.fleq_program import FleqProgram, padded
from vm.common.errors import InputError
from vm.common.signatures import MAGNITUDE, MAGNITUDE_BITS
from vm.functions import make_block
from vm.machines.stepping import DEFAULT_MAX_STEPS, step_until_halted

if TYPE_CHECKING:
    from vm.machines.fleq.domains import DomainViolation

EXACT_COUNTER = 2 ** 53
"""The largest magnitude at which float64, the reference's dtype, still holds every integer."""


def machine_domain_problem(value: np.ndarray, counter: bool = False) -> str | None:
    """The machine's domain `value` leaves (its description), or None when inside it."""
    if not (np.isfinite(value).all() and np.abs(value).max(initial=0.0) <= MAGNITUDE):
        return f"every value within |x| <= 2^{MAGNITUDE_BITS}, finite"
    if counter and abs(value[0, 0]) > EXACT_COUNTER:
        return f"counters within |n| <= 2^{EXACT_COUNTER.bit_length() - 1} in float64"
    return None


@dataclass(frozen=True)
class DomainExit:
    """The first step whose written value left the machine's domain."""

    step: int
    pc: int
    domain: str

    def violation(self, program: FleqProgram) -> DomainViolation:
        """As the transformer's domain check reports it (the same `domain:` line)."""
        from vm.machines.fleq.domains import DomainViolation  # it imports this module
        return DomainViolation(self.step, program.instruction_text(self.pc), "the machine",
                               self.domain)


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
    left_domain: DomainExit | None = None


class FleqReference:
    """Executes a FleqProgram one instruction at a time."""

    def __init__(self, program: FleqProgram) -> None:
        if not isinstance(program, FleqProgram):  # None failed on `.functions`, SUBLEQ's too
            raise InputError(f"the FLEQ reference takes a FLEQ program (FleqProgram), got "
                             f"{type(program).__name__}")
        self.program = program
        self.blocks = {name: make_block(name, **dict(params)) for name, params in
                       program.functions}
        self.counters = {v.cell for v in program.variables.values() if v.integer}
        self.reset()

    def reset(self) -> None:
        self.cells = [cell.copy() for cell in self.program.cells]
        self.pc = 0
        self.steps = 0
        self.left_domain: DomainExit | None = None

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
            with np.errstate(all="ignore"):  # overflow is reported as leaving the domain
                result = np.asarray(block.reference(a, b), dtype=float)
            written, old = instruction.c, self.cells[instruction.c].copy()
            new = padded(result, program.d)
            self.cells[written] = new
            problem = machine_domain_problem(new, written in self.counters)
            if problem is not None and self.left_domain is None:
                self.left_domain = DomainExit(self.steps, pc, problem)
        jumped = bool(self.cells[instruction.flag][0, 0] <= 0)
        record = FleqStep(self.steps, pc, written, old, new, jumped,
                          instruction.target if jumped else pc + 1)
        self.pc = record.next_pc
        self.steps += 1
        return record

    def run(self, max_steps: int, trace: bool = False,
            progress: Callable[[int], None] | None = None) -> FleqResult:
        """Run until EOF, `max_steps` steps, or the first step that leaves the machine's
        domain; `progress` (a step count now and then) may end the run by raising."""
        records = step_until_halted(self, max_steps, trace, progress,
                                    stop=lambda: self.left_domain is not None)
        return FleqResult([c.copy() for c in self.cells], self.pc, self.steps, self.halted,
                          records, self.left_domain)


def run_fleq_reference(program: FleqProgram, max_steps: int = DEFAULT_MAX_STEPS,
                       trace: bool = False, progress: Callable[[int], None] | None = None
                       ) -> FleqResult:
    return FleqReference(program).run(max_steps, trace, progress)
