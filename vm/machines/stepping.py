"""The run loop the reference interpreters share: step until halted, a step limit, a stop
the interpreter asks for, or (through `progress`) a wall-time limit."""

from __future__ import annotations

from typing import Any, Callable, Protocol

CLOCK_EVERY = 4096
"""Steps between calls of `progress`: often enough that --max-seconds stops a run within
milliseconds, rarely enough that reading the clock costs nothing next to the steps."""


class Stepper(Protocol):
    """A reference interpreter: `step()` executes one instruction and returns its record."""

    halted: bool
    steps: int

    def step(self) -> Any: ...


def step_until_halted(machine: Stepper, max_steps: int, trace: bool = False,
                      progress: Callable[[int], None] | None = None,
                      stop: Callable[[], bool] | None = None) -> list:
    """Step `machine` until it halts, has made `max_steps` steps in all, or `stop()` is true
    after a step; `progress` gets the step count every CLOCK_EVERY steps (it raises to end
    the run: TimeLimitExceeded). The records of the steps made when `trace`, else []."""
    records = []
    while not machine.halted and machine.steps < max_steps:
        record = machine.step()
        if trace:
            records.append(record)
        if stop is not None and stop():
            break
        if progress is not None and machine.steps % CLOCK_EVERY == 0 and not machine.halted:
            progress(machine.steps)  # a run that halted on this step is not out of time
    return records
