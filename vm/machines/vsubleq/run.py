"""Runs standard SUBLEQ images on the looped transformer, pass by pass, decoding the state
the reference keeps (memory, pc, halted) so both can be compared after every step."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from vm.common.errors import InputError
from vm.machines.vsubleq.layout import VGeometry
from vm.machines.vsubleq.machine import vsubleq_machine
from vm.machines.vsubleq.reference import Image, Reference, Result, Step
from vm.transformer.layers import (LoopedTransformer, cpu_threads, flush_denormals,
                                   from_internal, to_internal)

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def is_io(memory: list[int], pc: int) -> bool:
    """Whether the instruction at pc reads or writes a byte (a = -1 or b = -1)."""
    return memory[pc] == -1 or memory[(pc + 1) % len(memory)] == -1


class TransformerRun:
    """One image on the transformer: `step` makes one pass, `state` decodes it."""

    def __init__(self, image: Image, dtype: str = "float32", attention: str = "masked",
                 temperature: float | None = None, device: str = "cpu") -> None:
        if dtype not in DTYPES:
            raise InputError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        self.geometry = VGeometry(image.size, image.bits)
        self.machine = vsubleq_machine(self.geometry, temperature)
        self.model = LoopedTransformer(self.machine.weights, DTYPES[dtype], device, attention,
                                       self.geometry.scratch)
        card = torch.as_tensor(self.machine.encode(image)[None], dtype=DTYPES[dtype],
                               device=device)
        self.X = to_internal(card)
        self._halted_row = self.machine.layout.row("halted")

    def step(self) -> None:
        threads = (cpu_threads(self.X.shape[1] * self.X.shape[2]) if self.X.device.type == "cpu"
                   else nullcontext())  # small work: one thread, idle ones would spin
        with torch.inference_mode(), flush_denormals(), threads:
            self.model.step_(self.X)

    @property
    def halted(self) -> bool:
        return bool(self.X[self._halted_row, 0, 0] > 0.5)

    def state(self) -> tuple[list[int], int, bool]:
        """(memory, pc, halted) now."""
        card = from_internal(self.X)[0].double().cpu().numpy()
        return self.machine.decode(np.asarray(card))

    def refuse_io(self) -> None:
        """An I/O instruction stopped the machine: say so (this machine does no I/O)."""
        memory, pc, _ = self.state()
        if is_io(memory, pc):
            raise InputError(f"the instruction at {pc} does input or output (a or b is -1): "
                             f"the transformer does no I/O yet; run with --engine reference")


def run_transformer(image: Image, max_steps: int, dtype: str = "float32",
                    attention: str = "masked", progress: Callable[[int], None] | None = None,
                    trace: bool = False, temperature: float | None = None,
                    device: str = "cpu") -> Result:
    """Run until halted or `max_steps` passes; an I/O instruction is an InputError. With
    `trace`, every pass is decoded and recorded as the reference records it."""
    run = TransformerRun(image, dtype, attention, temperature, device)
    records: list[Step] = []
    memory, pc, _ = run.state() if trace else (None, 0, False)
    steps = 0
    while steps < max_steps:
        run.step()
        if run.halted:
            run.refuse_io()
        if trace:
            new_memory, next_pc, halted = run.state()
            records.append(_record(steps, memory, pc, new_memory, next_pc, halted))
            memory, pc = new_memory, next_pc
        steps += 1
        if progress is not None:
            progress(steps)
        if run.halted:
            break
    memory, pc, halted = run.state()
    return Result(memory, pc, steps, halted, trace=records)


def _record(step: int, memory: list[int], pc: int, new_memory: list[int], next_pc: int,
            halted: bool) -> Step:
    """What one decoded pass did, in the reference's trace format."""
    size = len(memory)
    a, b, c = memory[pc], memory[(pc + 1) % size], memory[(pc + 2) % size]
    new = new_memory[b % size]
    return Step(step, pc, a, b, c, memory[b % size], new, new <= 0, next_pc, halted)


@dataclass(frozen=True)
class Comparison:
    """Transformer and reference in lockstep: steps run, halted, the first difference."""

    steps: int
    halted: bool
    divergence: str | None = None

    @property
    def ok(self) -> bool:
        return self.divergence is None


def compare(image: Image, max_steps: int, dtype: str = "float32", attention: str = "masked",
            progress: Callable[[int], None] | None = None, temperature: float | None = None,
            device: str = "cpu") -> Comparison:
    """After every step, memory, pc and halted must be equal on both engines."""
    run = TransformerRun(image, dtype, attention, temperature, device)
    reference = Reference(image)
    for step in range(max_steps):
        pc = reference.pc
        if is_io(reference.memory, pc):
            raise InputError(f"step {step}: the instruction at {pc} does input or output; the "
                             f"transformer does no I/O yet, so compare stops there")
        reference.step()
        run.step()
        if progress is not None:
            progress(step + 1)
        memory, got_pc, halted = run.state()
        difference = _difference(reference, memory, got_pc, halted)
        if difference is not None:
            return Comparison(step + 1, False, f"divergence at step {step} (pc {pc}): "
                                               f"{difference}")
        if reference.halted:
            return Comparison(step + 1, True)
    return Comparison(reference.steps, False)


def _difference(reference: Reference, memory: list[int], pc: int, halted: bool) -> str | None:
    for address, (expected, got) in enumerate(zip(reference.memory, memory)):
        if expected != got:
            return (f"mem[{address}] is {expected} on the reference, {got} on the "
                    f"transformer")
    if pc != reference.pc:
        return f"pc is {reference.pc} on the reference, {pc} on the transformer"
    if halted != reference.halted:
        return f"halted is {reference.halted} on the reference, {halted} on the transformer"
    return None
