"""Where a FLEQ run leaves the domains on which its blocks' error bounds hold.

A block's documented bound (`FunctionBlock.bound_at`) holds only on its
`domain()`. The transformer cannot test that itself without Python logic
between layers, so the check replays the program exactly on the reference
interpreter and names the first block call whose operands (or, for blocks
whose domain bounds the result, its result) leave the domain: from there on the
transformer's numbers carry no bound, and the commands say so instead of
returning them as if they did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from assembler.fleq_program import FleqProgram
from vm.common.errors import InputError
from vm.common.signatures import MAGNITUDE
from vm.functions.base import Domain, FunctionBlock
from vm.machines.fleq.reference import EXACT_COUNTER, FleqReference, machine_domain_problem
from vm.machines.stepping import check_max_steps


@dataclass(frozen=True)
class DomainViolation:
    """The first block call whose exact operands (or result) leave the block's domain."""

    step: int
    instruction: str
    function: str
    domain: str
    widen: str | None = None
    """The `--param` setting that widens the domain, if one does."""
    stops: bool = False
    """A written value the machine cannot hold at all (not finite, past its magnitude): the
    reference interpreter stops there, and a transformer run past it means nothing."""

    def describe(self) -> str:
        owner = "the machine's" if self.function == "the machine" else f"{self.function}'s"
        hint = f" (widen it with {self.widen})" if self.widen else ""
        return (f"step {self.step}: {self.instruction} leaves {owner} domain "
                f"({self.domain}){hint}, where its error bound does not hold")


EXACT_INTEGERS = {"float32": 2 ** 24, "float64": EXACT_COUNTER}
"""Above these magnitudes a dtype no longer holds every integer, so a counter stops counting."""


def first_domain_violation(program: FleqProgram, max_steps: int,
                           dtype: str = "float64") -> DomainViolation | None:
    """The first of `domain_watch`'s findings within `max_steps` steps, or None (-1 replayed
    nothing and found nothing, 1.5 failed in range())."""
    max_steps = check_max_steps(max_steps)
    for _, found in zip(range(max_steps), domain_watch(program, dtype)):
        if found is not None:
            return found
    return None


def domain_watch(program: FleqProgram, dtype: str = "float64"
                 ) -> Iterator[DomainViolation | None]:
    """Run the program exactly (the reference interpreter), one item a step: None while the
    step is inside every domain, else the violation, as the last item. Checked: every block
    call's operands, or its result for blocks whose domain bounds the result; every written
    value against the machine's magnitude domain, and every counter against the largest
    integer `dtype` holds exactly; operands and results that `dtype` holds only as
    subnormals, which the machine flushes to 0. A generator, so that a comparison replays
    only the steps it compares (it replayed all of --max-steps first, past --max-seconds).
    Another ISA's program or None failed on a missing attribute, dtype 'float16' with a
    KeyError."""
    if not isinstance(program, FleqProgram):
        raise InputError(f"the domain replay takes a FLEQ program, got {type(program).__name__}")
    if dtype not in EXACT_INTEGERS:
        raise InputError(f"dtype must be one of {', '.join(EXACT_INTEGERS)}, got {dtype!r:.40}")
    counters = {v.cell for v in program.variables.values() if v.integer}
    exact_integers = EXACT_INTEGERS[dtype]
    tiny = float(np.finfo(dtype).tiny)
    reference = FleqReference(program)
    promises: dict[str, tuple[str | None, Domain]] = {}  # a block's, asked once, not a step
    while not reference.halted:
        step, pc = reference.steps, reference.pc
        instruction = program.instructions[pc]
        if instruction.function is None:
            reference.step()
            yield None
            continue
        block = reference.blocks[instruction.function]
        if instruction.function not in promises:
            promises[instruction.function] = (unbounded_problem(block, dtype), block.domain())
        unbounded, domain = promises[instruction.function]
        if unbounded is not None:
            yield DomainViolation(step, program.instruction_text(pc), instruction.function,
                                  unbounded)
            return
        (ha, wa), (hb, wb) = instruction.a_shape, instruction.b_shape
        values = [reference.cells[instruction.a][:ha, :wa]]
        if block.arity == 2:
            values.append(reference.cells[instruction.b][:hb, :wb])
        record = reference.step()
        text = program.instruction_text(pc)
        problem = None if record.new is None else machine_domain_problem(record.new)
        if domain.applies_to == "result":
            rows, columns = instruction.shape
            checked = [record.new[:rows, :columns]]
        else:
            checked = values
        found = None
        if problem is not None:
            found = DomainViolation(step, text, "the machine", problem, stops=True)
        elif any(((v != 0) & (np.abs(v) < tiny)).any() for v in [*values, record.new]
                 if v is not None):  # the passes flush subnormals: 1e-40 + 1e-40 gave 0
            found = DomainViolation(step, text, "the machine", f"nonzero |x| >= {tiny:.3g} in "
                                    f"{dtype}; smaller values flush to 0")
        elif record.written in counters and abs(record.new[0, 0]) > exact_integers:
            found = DomainViolation(step, text, "the machine", f"counters within |n| <= "
                                    f"2^{exact_integers.bit_length() - 1} in {dtype}")
        elif not all(domain.contains(v) for v in checked):
            found = DomainViolation(step, text, instruction.function, domain.description,
                                    domain.widen)
        yield found
        if found is not None:
            return


def unbounded_problem(block: FunctionBlock, dtype: str) -> str | None:
    """Why `block` promises nothing in `dtype`, or None: parameters that leave its error
    bound infinite or wider than the machine's magnitude domain (inv.sharpness=1e-300 gave
    5e-16 for 1/2, mul.scale=1e-50 NaN) make every call leave its domain."""
    absolute, relative = block.error_bound(dtype), block.relative_error_bound(dtype)
    if math.isfinite(relative) and absolute <= MAGNITUDE:
        return None
    shown = ", ".join(f"{key}={value:g}" for key, value in block.values.items())
    return f"none at {shown}: its error bound is {absolute:.3g} + {relative:.3g} |f| in {dtype}"
