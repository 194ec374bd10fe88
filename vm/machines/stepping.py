"""The run loop the reference interpreters share: step until halted, a step limit, a stop
the interpreter asks for, or (through `progress`) a wall-time limit."""

from __future__ import annotations

from typing import Any, Callable, Protocol

from vm.common.errors import InputError
from vm.common.limits import check_callback, check_flag, is_whole_number

DEFAULT_MAX_STEPS = 100_000
"""The step limit of a run a library caller starts without one (the command line's is
--max-steps)."""
CLOCK_EVERY = 4096
"""Steps between calls of `progress`: often enough that --max-seconds stops a run within
milliseconds, rarely enough that reading the clock costs nothing next to the steps."""


def check_max_steps(max_steps: int) -> int:
    """`max_steps` as a Python int if it is a whole number of passes, 0 or more, else
    InputError: a float failed deep in slicing or range(), and -1 or NaN ran nothing and
    reported "not halted". Callers count with the int returned: a numpy count made the
    runner's pass count a numpy int, which a later np.uint64 count turned into a float
    (a TypeError in slicing) and a later 10**30 overflowed."""
    if not is_whole_number(max_steps) or max_steps < 0:
        raise InputError(f"max_steps must be a whole number, 0 or more, got {max_steps!r}")
    return int(max_steps)


def check_progress(progress: Callable[[int], None] | None) -> None:
    """Refuse a `progress` that cannot take the step count before a run starts (called
    only every CLOCK_EVERY steps, 5 failed never in a short run, late in a long one)."""
    check_callback(progress, "progress", "the steps made")


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
    max_steps = check_max_steps(max_steps)
    check_progress(progress)
    check_flag(trace, "trace")  # "no" recorded every step
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
