"""Lockstep comparison: the transformer against the reference interpreter.

After every pass the transformer's memory and program counter are decoded
and compared with the reference's state after the same instruction; the
first difference is reported with its step, instruction, field and values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from assembler.program import Program
from vm.executor import EngineConfig, TransformerExecutor
from vm.geometry import Geometry
from vm.reference import ReferenceMachine


@dataclass(frozen=True)
class Divergence:
    """The first point where the two engines disagree."""

    step: int
    pc: int
    instruction: str
    field: str
    reference: int
    transformer: int

    def describe(self) -> str:
        return (f"divergence at step {self.step} (pc {self.pc}: {self.instruction}): "
                f"{self.field} is {self.reference} on the reference, "
                f"{self.transformer} on the transformer")


@dataclass(frozen=True)
class Comparison:
    steps: int
    halted: bool
    divergence: Divergence | None

    @property
    def ok(self) -> bool:
        return self.divergence is None


def _instruction_text(program: Program, pc: int) -> str:
    if pc == program.eof:
        return "EOF"
    instruction = program.instructions[pc]
    return instruction.text or (f"subleq {program.address_name(instruction.a)}, "
                                f"{program.address_name(instruction.b)}, {instruction.c}")


def _first_difference(program: Program, reference: ReferenceMachine, memory: list[int],
                      pc: int) -> tuple[str, int, int] | None:
    for address, (expected, got) in enumerate(zip(reference.memory, memory)):
        if expected != got:
            return program.address_name(address), expected, got
    if pc != reference.pc:
        return "pc", reference.pc, pc
    return None


def compare_programs(programs: list[Program], geometry: Geometry, max_steps: int,
                     config: EngineConfig = EngineConfig(),
                     progress: Callable[[int], None] | None = None) -> list[Comparison]:
    """Run a batch of programs of one geometry in lockstep with the reference.

    Every program runs until it halts (on both engines), diverges, or reaches
    `max_steps`; the batch keeps stepping while any program is still running.
    """
    executor = TransformerExecutor(geometry, config)
    X = executor.load(programs)
    references = [ReferenceMachine(program) for program in programs]
    outcome: list[Comparison | None] = [None] * len(programs)
    for step in range(max_steps):
        if all(result is not None for result in outcome):
            break
        pcs = [reference.pc for reference in references]
        for reference in references:
            reference.step()
        X = executor.step(X, step)
        for index, (memory, pc) in enumerate(executor.decode(X)):
            if outcome[index] is not None:
                continue
            program, reference = programs[index], references[index]
            difference = _first_difference(program, reference, memory, pc)
            if difference is not None:
                field, expected, got = difference
                divergence = Divergence(step, pcs[index], _instruction_text(program, pcs[index]),
                                        field, expected, got)
                outcome[index] = Comparison(step + 1, False, divergence)
            elif reference.halted:
                outcome[index] = Comparison(reference.steps, True, None)
        if progress is not None:
            progress(step + 1)
    return [result or Comparison(references[i].steps, references[i].halted, None)
            for i, result in enumerate(outcome)]


def compare_program(program: Program, geometry: Geometry, max_steps: int,
                    config: EngineConfig = EngineConfig(),
                    progress: Callable[[int], None] | None = None) -> Comparison:
    """Lockstep comparison of one program."""
    return compare_programs([program], geometry, max_steps, config, progress)[0]
