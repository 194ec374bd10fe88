"""Lockstep comparison: the transformer against the reference interpreter.

SUBLEQ: after every pass the transformer's memory and program counter are
decoded and compared with the reference's state after the same instruction;
the first difference is reported with its step, instruction, field and values.

FLEQ: real values are approximate by construction, so every written value's
error is measured instead (against the reference run, and against the exact
function of the transformer's own operands); a branch that differs fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from assembler.fleq_program import FleqProgram
from assembler.program import Program
from vm.runtime.config import check_config
from vm.runtime.executor import EngineConfig, TransformerExecutor
from vm.common.errors import InputError
from vm.common.geometry import Geometry
from vm.machines.stepping import check_max_steps, check_progress
from vm.machines.subleq.reference import ReferenceMachine

if TYPE_CHECKING:
    from vm.machines.fleq.layout import FleqGeometry


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


def check_exact(config: EngineConfig, runner: str = "a comparison") -> None:
    """Refuse a sampling config: a comparison (or the REPL, `runner`) checks the exact
    machine, and stochastic reads made gcd.sq 'diverge at step 0' as if the weights computed
    it wrong. What is no EngineConfig is refused too (`check_config`)."""
    if check_config(config).sampling is not None:
        raise InputError(f"{runner} runs the exact transformer, not stochastic reads "
                         f"(sampling={config.sampling:g}): sampled runs are `ltvm sample`'s")


def compare_programs(programs: list[Program], geometry: Geometry, max_steps: int,
                     config: EngineConfig = EngineConfig(),
                     progress: Callable[[int], None] | None = None) -> list[Comparison]:
    """Run a batch of programs of one geometry in lockstep with the reference.

    Every program runs until it halts (on both engines), diverges, or reaches
    `max_steps`; the batch keeps stepping while any program is still running.
    """
    max_steps = check_max_steps(max_steps)
    check_progress(progress)
    if not isinstance(geometry, Geometry):  # FLEQ failed in the SUBLEQ reference: no `memory`
        raise InputError(f"compare_programs compares SUBLEQ programs on a SUBLEQ Geometry, "
                         f"got {type(geometry).__name__}: FLEQ programs compare with "
                         "compare_fleq, standard SUBLEQ images with "
                         "vm.machines.vsubleq.run.compare")
    check_exact(config)
    executor = TransformerExecutor(geometry, config)
    runner = executor.runner(executor.load(programs))
    references = [ReferenceMachine(program) for program in programs]
    outcome: list[Comparison | None] = [None] * len(programs)
    for step in range(max_steps):
        if all(result is not None for result in outcome):
            break
        pcs = [reference.pc for reference in references]
        for reference in references:
            reference.step()
        runner.advance(1)
        for index, (memory, pc) in enumerate(executor.decode(runner.state())):
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


@dataclass(frozen=True)
class FleqStepError:
    """One FLEQ step: the written value's error against the reference run (accumulated)
    and against the exact function of the transformer's own operands (the block alone)."""

    step: int
    pc: int
    instruction: str
    cell: str
    absolute: float
    relative: float
    local_absolute: float
    transformer: np.ndarray
    reference: np.ndarray

    @property
    def exact_zero(self) -> bool:
        """A non-zero value written where the exact one is 0 (its relative error is inf)."""
        return self.absolute > 0 and not np.any(self.reference)


@dataclass(frozen=True)
class FleqComparison:
    steps: int
    halted: bool
    errors: list[FleqStepError]
    branch: Divergence | None
    domain: str | None = None
    """The first step at which either side wrote a value outside the machine's domain
    (its `domain:` line); errors measured past it would be overflow, not the machine's."""

    @property
    def ok(self) -> bool:
        return self.branch is None and self.domain is None

    @property
    def max_absolute(self) -> float:
        return max((e.absolute for e in self.errors), default=0.0)

    @property
    def max_relative(self) -> float:
        """Over the writes whose exact value is not 0 (`exact_zero_writes` have none)."""
        return max((e.relative for e in self.errors if not e.exact_zero), default=0.0)

    @property
    def exact_zero_writes(self) -> list[FleqStepError]:
        """Writes of a non-zero value where the exact one is 0: no error is relative to it
        (one such write made the maximum infinite)."""
        return [e for e in self.errors if e.exact_zero]


def _damaged_cell(program, before: list[np.ndarray], after: list[np.ndarray],
                  written: int | None, exact: list[np.ndarray]) -> tuple | None:
    """A cell the step changed although its instruction does not write it (moves are exact,
    so nothing else may change), or a written value that is not finite: (field, the
    reference's value, the transformer's value), else None."""
    for index, (old, new) in enumerate(zip(before, after)):
        changed = index != written and not np.array_equal(old, new)
        if changed or not np.isfinite(new).all():
            kind = "not written by this instruction" if changed else "not finite"
            return (f"cell {program.cell_name(index)} ({kind})", _shown(exact[index]),
                    _shown(new))
    return None


def _shown(cell: np.ndarray) -> float | list:
    """A cell's value for a message: its scalar, or its entries when it holds more."""
    return float(cell[0, 0]) if not np.any(cell.ravel()[1:]) else cell.tolist()


def _relative(error: np.ndarray, exact: np.ndarray) -> float:
    """Normwise: max |error| / max |exact| over the written value, so the exact zeros of a
    matrix do not make every small error infinitely relative (inf only for an all-zero
    exact value that was not written as zero)."""
    largest, scale = float(np.max(error, initial=0.0)), float(np.max(np.abs(exact), initial=0.0))
    if scale == 0.0:
        return np.inf if largest > 0 else 0.0
    return largest / scale


def compare_fleq(program: FleqProgram, geometry: FleqGeometry, max_steps: int,
                 config: EngineConfig = EngineConfig(),
                 progress: Callable[[int], None] | None = None) -> FleqComparison:
    """Run a FLEQ program on the transformer and the reference side by side; stop at a
    branch that differs, a damaged cell, a value either side writes outside the machine's
    domain, or a block call outside the domain its error bound covers (found by the exact
    replay `run` checks with: past it the errors measure nothing the block promises)."""
    from vm.machines.fleq.domains import domain_watch
    from vm.machines.fleq.layout import FleqGeometry
    from vm.machines.fleq.reference import FleqReference, machine_domain_problem
    max_steps = check_max_steps(max_steps)
    check_progress(progress)
    if not isinstance(geometry, FleqGeometry):  # a SUBLEQ program and geometry loaded, then
        # failed in the FLEQ reference: "'Program' object has no attribute 'functions'"
        raise InputError(f"compare_fleq compares FLEQ programs on a FLEQ geometry, got "
                         f"{type(geometry).__name__}: SUBLEQ programs compare with "
                         "compare_programs")
    check_exact(config)
    executor = TransformerExecutor(geometry, config)
    X = executor.load([program])  # first: it refuses another instruction set's program
    runner = executor.runner(X)  # the evaluation the config asks for, as run uses
    watch = domain_watch(program, executor.dtype_name)
    reference = FleqReference(program)
    cells, _ = executor.decode(X)[0]
    errors: list[FleqStepError] = []
    for step in range(max_steps):
        if reference.halted:
            break
        pc = reference.pc
        instruction = program.instructions[pc]
        record = reference.step()
        runner.advance(1)
        new_cells, new_pc = executor.decode(runner.state())[0]
        if record.written is not None:
            rows, columns = instruction.shape
            got = new_cells[record.written][:rows, :columns]
            exact = record.new[:rows, :columns]
            block = reference.blocks[instruction.function]
            (ha, wa), (hb, wb) = instruction.a_shape, instruction.b_shape
            operand_b = cells[instruction.b][:hb, :wb] if block.arity == 2 else None
            with np.errstate(all="ignore"):  # inv(0) is inf here as on the reference
                local = np.asarray(block.reference(cells[instruction.a][:ha, :wa], operand_b))
            difference = np.abs(got - exact)
            errors.append(FleqStepError(step, pc, program.instruction_text(pc),
                                        program.cell_name(record.written),
                                        float(difference.max()), _relative(difference, exact),
                                        float(np.abs(got - local).max()), got, exact))
            if reference.left_domain is not None:
                domain = reference.left_domain.violation(program).describe()
                return FleqComparison(step + 1, False, errors, None, f"{domain} (on the reference)")
            problem = machine_domain_problem(got)
            if problem is not None:
                text = program.instruction_text(pc)
                return FleqComparison(step + 1, False, errors, None,
                                      f"step {step}: {text} leaves the machine's domain "
                                      f"({problem}) on the transformer, which wrote "
                                      f"{_shown(got)}")
        violation = next(watch, None)
        if violation is not None:
            return FleqComparison(step + 1, False, errors, None, violation.describe())
        if new_pc != reference.pc:
            divergence = Divergence(step, pc, program.instruction_text(pc), "pc", reference.pc,
                                    new_pc)
            return FleqComparison(step + 1, False, errors, divergence)
        damaged = _damaged_cell(program, cells, new_cells, record.written, reference.cells)
        if damaged is not None:
            return FleqComparison(step + 1, False, errors,
                                  Divergence(step, pc, program.instruction_text(pc), *damaged))
        cells = new_cells
        if progress is not None:
            progress(step + 1)
    return FleqComparison(reference.steps, reference.halted, errors, None)
