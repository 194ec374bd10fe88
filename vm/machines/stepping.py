"""The run loop the reference interpreters share: step until halted or a step limit."""

from __future__ import annotations

from typing import Any, Protocol


class Stepper(Protocol):
    """A reference interpreter: `step()` executes one instruction and returns its record."""

    halted: bool
    steps: int

    def step(self) -> Any: ...


def step_until_halted(machine: Stepper, max_steps: int, trace: bool = False) -> list:
    """Step `machine` until it halts or has made `max_steps` steps in all; the records of
    the steps made when `trace`, else an empty list."""
    records = []
    while not machine.halted and machine.steps < max_steps:
        record = machine.step()
        if trace:
            records.append(record)
    return records
