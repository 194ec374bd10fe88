"""Checked mode of the standard SUBLEQ machine: every read validated during a pass, the whole
state after it, a `PrecisionError` at the first value off its levels.

The pass never depends on the checks (they only look at X), so a checked run computes the
same numbers as an unchecked one; it stops instead of going on with a value that a too low
temperature or too narrow dtype pushed off its level, which is how a wrong number would
otherwise be returned.
"""

from __future__ import annotations

import torch

from vm.common.errors import PrecisionError
from vm.machines.subleq.machine import STATE_TOLERANCE
from vm.machines.vsubleq.machine import VsubleqMachine

_STATE_LEVELS = {"pc0": (-1.0, 1.0), "pc1": (-1.0, 1.0), "pc2": (-1.0, 1.0),
                 "inp": (-1.0, 1.0), "outp": (-1.0, 1.0), "halted": (0.0, 1.0),
                 "overflow": (0.0, 1.0)}
"""Levels of the cpu column's state fields; every other column holds 0 there."""
_MEMORY_LEVELS = {"scratch": (0.0,), "memory": (-1.0, 1.0), "input": (-1.0, 1.0),
                  "output": (-1.0, 0.0, 1.0)}
"""Levels of the mem row in each region (unwritten output slots hold 0)."""
_FIXED = ("pos", "scratch", "cpu")
"""State that no pass changes."""


class Checker:
    """Validates one run's punchcards (batch, rows, n) against the machine's levels."""

    def __init__(self, machine: VsubleqMachine, initial: torch.Tensor) -> None:
        self.machine, self.layout = machine, machine.layout
        self.initial = initial.clone()
        self.step = 0

    def observe(self, layer: int, stage: str, X: torch.Tensor) -> None:
        """The `vm.transformer` observer: the reads of sublayer (layer, stage)."""
        for check in self.machine.checks:
            if (check.layer, check.stage) != (layer, stage):
                continue
            columns = self.layout.regions[check.columns]
            values = X[:, self.layout[check.field], columns.start:columns.stop]
            self._raise_if_off(layer, check.field, values, check.levels, columns.start,
                               check.tolerance)

    def after_pass(self, X: torch.Tensor) -> None:
        """The state after pass `step`: every field on its levels, fixed fields unchanged,
        working fields 0; then the step count moves on."""
        last = len(self.machine.weights.layers) - 1
        layout = self.layout
        for name in (*layout.persistent, *layout.working()):
            if name in layout.groups:
                continue
            rows = layout[name]
            if name in _FIXED:
                values = X[:, rows]
                self._raise_if_far(last, name, values, (values - self.initial[:, rows]).abs(),
                                   0, STATE_TOLERANCE, "its value on the punchcard")
            elif name == "mem":
                for region, levels in _MEMORY_LEVELS.items():
                    span = layout.regions[region]
                    self._raise_if_off(last, name, X[:, rows, span.start:span.stop], levels,
                                       span.start, STATE_TOLERANCE)
            else:
                self._raise_if_off(last, name, X[:, rows, :1], _STATE_LEVELS.get(name, (0.0,)),
                                   0, STATE_TOLERANCE)
                self._raise_if_off(last, name, X[:, rows, 1:], (0.0,), 1, STATE_TOLERANCE)
        self.step += 1

    def _raise_if_off(self, layer: int, field: str, values: torch.Tensor,
                      levels: tuple[float, ...], first_column: int, tolerance: float) -> None:
        targets = torch.as_tensor(levels, dtype=values.dtype, device=values.device)
        distance = (values[..., None] - targets).abs().min(dim=-1).values
        self._raise_if_far(layer, field, values, distance, first_column, tolerance,
                           f"within {tolerance} of {sorted(set(levels))}")

    def _raise_if_far(self, layer: int, field: str, values: torch.Tensor,
                      distance: torch.Tensor, first_column: int, tolerance: float,
                      expected: str) -> None:
        if distance.numel() == 0:  # a region without columns (an image that writes nothing)
            return
        worst = int(distance.argmax())
        if float(distance.flatten()[worst]) <= tolerance:
            return
        column = first_column + worst % values.shape[-1]
        raise PrecisionError(self.step, layer, column, field, float(values.flatten()[worst]),
                             expected)
