"""Runs standard SUBLEQ images on the looped transformer, pass by pass, decoding the state
the reference keeps (memory, pc, halted, bytes read, output) so both can be compared after
every step."""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from vm.common.errors import NOT_COMPILED, InputError, NotCompiledWarning, counted
from vm.machines.stepping import check_max_steps, check_progress
from vm.machines.vsubleq.checked import Checker
from vm.machines.vsubleq.machine import vsubleq_machine
from vm.machines.vsubleq.punchcard import (SIZING_STEPS, VState, check_max_output,
                                           default_outputs, geometry_for)
from vm.machines.vsubleq.reference import (Image, Reference, Result, Step, check_image,
                                           check_input_bytes)
from vm.transformer.devices import check_device
from vm.transformer.layers import LoopedTransformer, flush_denormals, from_internal, to_internal
from vm.transformer.layout import Layout
from vm.transformer.memory import check_dense_memory
from vm.transformer.modes import ATTENTION_MODES
from vm.transformer.threads import cpu_threads
from vm.transformer.weights import MachineWeights

DTYPES = {"float32": torch.float32, "float64": torch.float64}


Accelerate = Callable[[LoopedTransformer, MachineWeights, Layout, int], Any]
"""Builds a faster evaluation of the machine's passes, or None for the full pass (the
runtime's `evaluator_for`, with the evaluation bound): its `start(X, fused=True)` gives a
run whose `step()` and `fused_steps(...)` change X exactly as the full pass would."""

FUSED_CHUNK = 256
"""Passes a fused call may run before the host looks at the halted flag again."""


class TransformerRun:
    """One image on the transformer: `step` makes one pass, `state` decodes it.

    `checked` validates every read and the state after every pass (a PrecisionError at the
    first value off its levels); None turns it on exactly when the temperature is below the
    provably safe one. `accelerate` (unchecked runs only) evaluates passes on the columns
    they can change, bit-identical to the full pass and proven so every pass."""

    def __init__(self, image: Image, dtype: str = "float32", attention: str = "masked",
                 temperature: float | None = None, device: str = "cpu",
                 input_bytes: bytes = b"", max_output: int | None = None,
                 checked: bool | None = None, accelerate: Accelerate | None = None) -> None:
        """`max_output` bytes of output tape; None: what the reference writes (see
        `default_outputs`)."""
        input_bytes, max_output = _check_arguments(image, input_bytes, max_output, dtype,
                                                   attention, device, checked)
        if max_output is None:
            max_output = default_outputs(image, input_bytes, SIZING_STEPS)
        self.geometry = geometry_for(image, len(input_bytes), max_output)
        self.machine = vsubleq_machine(self.geometry, temperature)
        self.model = LoopedTransformer(self.machine.weights, DTYPES[dtype], device, attention,
                                       self.geometry.scratch)
        if attention == "dense":
            check_dense_memory(self.geometry.columns, DTYPES[dtype], device, "image or input")
        card = torch.as_tensor(self.machine.encode(image, input_bytes)[None],
                               dtype=DTYPES[dtype], device=device)
        self.X = to_internal(card)
        self._halted_row = self.machine.layout.row("halted")
        if checked is None:
            checked = not self.machine.temperature_is_safe(dtype)
        self.checker = Checker(self.machine, card) if checked else None
        evaluator = (accelerate(self.model, self.machine.weights, self.machine.layout,
                                self.geometry.scratch)
                     if accelerate is not None and self.checker is None else None)
        self.active = evaluator.start(self.X, fused=True) if evaluator is not None else None

    @property
    def evaluation(self) -> str:
        """What runs the passes: fused, active or full."""
        return ("full" if self.active is None
                else "fused" if self.active.fused is not None else "active")

    def load_card(self, card: torch.Tensor) -> None:
        """Go on from the punchcard `card` (1, rows, n) of this geometry: X is overwritten in
        place, so the evaluation bound to it stays valid (its cache is rebuilt)."""
        self.X.copy_(to_internal(card.to(self.X.dtype)))
        if self.active is not None:
            self.active.restart()
        if self.checker is not None:
            self.checker = Checker(self.machine, card)

    def _threads(self):
        return (cpu_threads(self.model.multiply_adds(1)) if self.X.device.type == "cpu"
                else nullcontext())  # small work: one thread, idle ones would spin

    def step(self) -> None:
        with torch.inference_mode(), flush_denormals(), self._threads():
            if self.active is not None:
                self.active.step()
            elif self.checker is None:
                self.model.step_(self.X)
            else:
                self.model.step_(self.X, observer=self.checker.observe)
                self.checker.after_pass(from_internal(self.X))

    def advance(self, count: int) -> int:
        """Up to `count` passes, stopping at the pass that halts; returns the passes made
        while running (a fused call may run a few passes past the halt: a halted machine is
        a fixed point, so they change nothing)."""
        if self.active is None or self.active.fused is None:
            made = 0
            while made < count and not self.halted:
                self.step()
                made += 1
            return made
        record = torch.empty((count, 1, 1), dtype=self.X.dtype, device=self.X.device)
        rows = np.array([self._halted_row])
        made = 0
        with torch.inference_mode(), flush_denormals(), self._threads():
            while made < count and not self.halted:
                fused = self.active.fused
                done = self.active.fused_steps(count - made, record[made:], rows)
                if fused is not None and self.active.fused is None:  # not compiled, and the
                    warnings.warn(NOT_COMPILED, NotCompiledWarning)  # run may not compile it
                if done == 0:
                    record[made].copy_(self.X[rows, :, 0])
                    self.active.step()
                    done = 1
                made += done
        halted_before = (record[:made, 0, 0] > 0.5).nonzero()
        return made if len(halted_before) == 0 else int(halted_before[0])

    @property
    def halted(self) -> bool:
        return bool(self.X[self._halted_row, 0, 0] > 0.5)

    def state(self) -> VState:
        """Memory, pc, halted, bytes read, output and overflow now, decoded from a view of X:
        decoding reads the signs of a few columns, the same in float32, and a float64 copy of
        the whole card was half of each REPL step after a long input (60 ms at 60,000
        columns, the input tape's, which decoding does not read)."""
        return self.machine.decode_state(from_internal(self.X)[0].cpu().numpy())

    def refuse_overflow(self) -> None:
        """An output instruction found the tape full and halted the machine: say so."""
        if self.state().overflow:
            raise InputError(f"the output tape ({counted(self.geometry.outputs, 'byte')}) is "
                             "full; run with a larger --max-output")


def _check_arguments(image: Image, input_bytes: bytes, max_output: int | None, dtype: str,
                     attention: str, device: str, checked: bool | None
                     ) -> tuple[bytes, int | None]:
    """The input as bytes and max_output as an int (a numpy one failed on 'bit_length'),
    after refusing by name, before any work, what a run cannot take: a str input, a
    max_output of 1.5 or True, device 'tpu' (torch's RuntimeError after the sizing run),
    attention 'sparse' (a ValueError), checked 'yes' (taken as True)."""
    check_image(image)
    input_bytes = check_input_bytes(input_bytes)
    max_output = check_max_output(max_output)
    if not isinstance(dtype, str) or dtype not in DTYPES:  # a list failed on hashing
        raise InputError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if attention not in ATTENTION_MODES:
        raise InputError(f"attention must be one of {', '.join(ATTENTION_MODES)}, got "
                         f"{attention!r}")
    if not isinstance(device, str):
        raise InputError(f"device must be a string, got {device!r}")
    check_device(device)
    if checked is not None and not isinstance(checked, bool):
        raise InputError(f"checked must be None, True or False, got {checked!r}")
    return input_bytes, max_output


def run_transformer(image: Image, max_steps: int, dtype: str = "float32",
                    attention: str = "masked", progress: Callable[[int], None] | None = None,
                    trace: bool = False, temperature: float | None = None,
                    device: str = "cpu", input_bytes: bytes = b"",
                    max_output: int | None = None, checked: bool | None = None,
                    accelerate: Accelerate | None = None) -> Result:
    """Run until halted or `max_steps` passes; a full output tape is an InputError (by
    default the tape holds what the reference writes in `max_steps` steps). With `trace`,
    every pass is decoded and recorded as the reference records it. `progress` hears of the
    sizing run's steps too (the reference's, millions a second: 30 seconds for 3 x 10^7)."""
    max_steps = check_max_steps(max_steps)  # 1.5 ran two steps; None failed in a comparison
    check_progress(progress)  # 5 failed after the first chunk: "'int' object is not callable"
    input_bytes, max_output = _check_arguments(image, input_bytes, max_output, dtype,
                                               attention, device, checked)
    if max_output is None:
        max_output = default_outputs(image, input_bytes, max_steps, progress)
    run = TransformerRun(image, dtype, attention, temperature, device, input_bytes, max_output,
                         checked, accelerate)
    records: list[Step] = []
    before = run.state() if trace else None
    steps = 0
    while steps < max_steps and not run.halted:
        if trace:
            run.step()
            after = run.state()
            records.append(_record(steps, before, after))
            before, made = after, 1
        else:
            made = run.advance(min(FUSED_CHUNK, max_steps - steps))
        steps += made
        if run.halted:
            run.refuse_overflow()
        elif progress is not None:  # it may raise --max-seconds: not for a run that halted
            progress(steps)
    state = run.state()
    return Result(state.memory, state.pc, steps, state.halted, state.output, trace=records)


def _record(step: int, before: VState, after: VState) -> Step:
    """What one decoded pass did, in the reference's trace format."""
    memory, pc, size = before.memory, before.pc, len(before.memory)
    a, b, c = memory[pc], memory[(pc + 1) % size], memory[(pc + 2) % size]
    io = "in" if a == -1 else "out" if b == -1 else None
    if io == "out":
        old = new = memory[a % size]
    else:
        old, new = memory[b % size], after.memory[b % size]
    jumped = io is None and new <= 0
    return Step(step, pc, a, b, c, old, new, jumped, after.pc, after.halted, io)


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
            device: str = "cpu", input_bytes: bytes = b"",
            max_output: int | None = None, checked: bool | None = None,
            accelerate: Accelerate | None = None) -> Comparison:
    """After every step, memory, pc, halted, bytes read and output must be equal on both
    engines (until the output tape is full: then an InputError; by default the tape holds
    what the reference writes in `max_steps` steps; `progress` hears of that sizing run
    too)."""
    # -1 compared nothing and said OK; 1.5 failed in range()
    max_steps = check_max_steps(max_steps)
    check_progress(progress)
    input_bytes, max_output = _check_arguments(image, input_bytes, max_output, dtype,
                                               attention, device, checked)
    if max_output is None:
        max_output = default_outputs(image, input_bytes, max_steps, progress)
    run = TransformerRun(image, dtype, attention, temperature, device, input_bytes, max_output,
                         checked, accelerate)
    reference = Reference(image, input_bytes)
    for step in range(max_steps):
        pc = reference.pc
        reference.step()
        run.advance(1)
        if run.halted:
            run.refuse_overflow()
        difference = _difference(reference, run.state())
        if difference is not None:
            return Comparison(step + 1, False, f"divergence at step {step} (pc {pc}): "
                                               f"{difference}")
        if reference.halted:
            return Comparison(step + 1, True)
        if progress is not None:  # it may raise --max-seconds: after the step is compared
            progress(step + 1)
    return Comparison(reference.steps, False)


def _difference(reference: Reference, state: VState) -> str | None:
    for address, (expected, got) in enumerate(zip(reference.memory, state.memory)):
        if expected != got:
            return (f"mem[{address}] is {expected} on the reference, {got} on the "
                    f"transformer")
    for name, expected, got in (("pc", reference.pc, state.pc),
                                ("halted", reference.halted, state.halted),
                                ("bytes read", reference.read, state.read),
                                ("output", bytes(reference.output), state.output)):
        if expected != got:
            return f"{name} is {expected!r} on the reference, {got!r} on the transformer"
    return None
