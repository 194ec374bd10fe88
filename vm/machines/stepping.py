"""The run loop the reference interpreters share: step until halted, a step limit, a stop
the interpreter asks for, or (through `progress`) a wall-time limit."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Protocol

import numpy as np

from vm.common.errors import InputError
from vm.common.limits import is_whole_number

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
    """Refuse a `progress` that is neither None nor callable before a run starts: it failed
    with "'int' object is not callable" after the first step (or, called only every
    CLOCK_EVERY steps, never in a short run), and one that cannot take the step count
    (`lambda: None`) with a TypeError mid-run. A callable whose signature cannot be read
    (some builtins) is taken."""
    if progress is None:
        return
    if not callable(progress):
        raise InputError(f"progress must be a function of the steps made, or None, got "
                         f"{progress!r:.80}")
    try:
        signature = inspect.signature(progress)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(0)
    except TypeError:
        raise InputError(f"progress must take one argument, the steps made, got "
                         f"{progress!r:.80} of signature {signature}") from None


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
    if not isinstance(trace, (bool, np.bool_)):  # "no" recorded every step
        raise InputError(f"trace must be True or False, got {trace!r:.40}")
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
