"""The oracle: exact Harvard SUBLEQ with N-bit two's-complement wraparound.

`mem[b] = wrap(mem[b] - mem[a]); if mem[b] <= 0 goto c else next`, halting
when the program counter reaches the EOF instruction. Wraparound is what a
binary adder does, so the transformer must agree with it bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from assembler.program import Program, wrap
from vm.common.errors import InputError
from vm.machines.stepping import DEFAULT_MAX_STEPS, step_until_halted


@dataclass(frozen=True)
class TraceStep:
    """One executed instruction: where it was, what it wrote, where it went."""

    step: int
    pc: int
    a: int
    b: int
    c: int
    old: int
    new: int
    jumped: bool
    next_pc: int


@dataclass
class RunResult:
    """Final state of a run (the same shape for every engine)."""

    memory: list[int]
    pc: int
    steps: int
    halted: bool
    trace: list[TraceStep] = field(default_factory=list)


class ReferenceMachine:
    """Executes a `Program` one instruction at a time."""

    def __init__(self, program: Program) -> None:
        if not isinstance(program, Program):  # None failed on `.memory`, a FLEQ one too
            raise InputError(f"the SUBLEQ reference takes a SUBLEQ program (Program), got "
                             f"{type(program).__name__}")
        self.program = program
        self.reset()

    def reset(self) -> None:
        self.memory = list(self.program.memory)
        self.pc = 0
        self.steps = 0

    @property
    def halted(self) -> bool:
        return self.pc == self.program.eof

    def step(self) -> TraceStep:
        """Execute the instruction at pc (EOF included: it changes nothing)."""
        program = self.program
        if self.halted:
            a, b = program.eof_operands
            c = program.eof
        else:
            instruction = program.instructions[self.pc]
            a, b, c = instruction.a, instruction.b, instruction.c
        old = self.memory[b]
        new = wrap(old - self.memory[a], program.bits)
        self.memory[b] = new
        jumped = new <= 0
        record = TraceStep(self.steps, self.pc, a, b, c, old, new, jumped,
                           c if jumped else self.pc + 1)
        self.pc = record.next_pc
        self.steps += 1
        return record

    def run(self, max_steps: int, trace: bool = False,
            progress: Callable[[int], None] | None = None) -> RunResult:
        """Run until EOF or `max_steps` instructions; steps count executed instructions.
        `progress` (a step count now and then) may end the run by raising."""
        records = step_until_halted(self, max_steps, trace, progress)
        return RunResult(list(self.memory), self.pc, self.steps, self.halted, records)


def run_reference(program: Program, max_steps: int = DEFAULT_MAX_STEPS, trace: bool = False,
                  progress: Callable[[int], None] | None = None) -> RunResult:
    """Run `program` from its initial state on the reference interpreter."""
    return ReferenceMachine(program).run(max_steps, trace, progress)
