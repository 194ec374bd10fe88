"""The shared reference run loop: stops at the halt or the step limit, records on request."""

from __future__ import annotations

from vm.machines.stepping import step_until_halted


class Countdown:
    """Halts after `left` steps; each step's record is its step number."""

    def __init__(self, left: int) -> None:
        self.left, self.steps, self.halted = left, 0, False

    def step(self) -> int:
        self.steps += 1
        self.left -= 1
        self.halted = self.left == 0
        return self.steps - 1


def test_stops_at_the_halt_and_records_every_step_when_tracing() -> None:
    machine = Countdown(3)
    assert step_until_halted(machine, 10, trace=True) == [0, 1, 2]
    assert machine.halted and machine.steps == 3


def test_the_limit_counts_steps_made_before_and_records_nothing_untraced() -> None:
    machine = Countdown(10)
    assert step_until_halted(machine, 4) == []
    assert step_until_halted(machine, 6, trace=True) == [4, 5]
    assert not machine.halted and machine.steps == 6


def test_progress_sees_the_count_every_clock_every_steps_and_may_end_the_run() -> None:
    from vm.machines.stepping import CLOCK_EVERY

    class Late(Exception):
        pass

    seen = []

    def progress(count: int) -> None:
        seen.append(count)
        if len(seen) == 2:
            raise Late

    machine = Countdown(10 * CLOCK_EVERY)
    try:
        step_until_halted(machine, 10 * CLOCK_EVERY, progress=progress)
    except Late:
        pass
    assert seen == [CLOCK_EVERY, 2 * CLOCK_EVERY] and machine.steps == 2 * CLOCK_EVERY


def test_stop_ends_the_run_after_the_step_that_asked_for_it() -> None:
    machine = Countdown(10)
    assert step_until_halted(machine, 10, trace=True, stop=lambda: machine.steps == 3) \
        == [0, 1, 2]
    assert not machine.halted


def test_a_run_that_halts_on_a_clock_step_is_not_stopped_by_the_clock() -> None:
    """A program halting at step 4,096 was reported 'stopped by --max-seconds ... before the
    program halted' when the limit had passed."""
    from vm.machines.stepping import CLOCK_EVERY

    def out_of_time(count: int) -> None:
        raise TimeoutError(count)

    machine = Countdown(CLOCK_EVERY)
    step_until_halted(machine, 10 * CLOCK_EVERY, progress=out_of_time)
    assert machine.halted and machine.steps == CLOCK_EVERY


def test_a_step_limit_or_progress_of_the_wrong_kind_is_refused_before_any_step() -> None:
    """The reference runs took max_steps=None to a TypeError in `<`, NaN and -1 to "not
    halted" after 0 steps, 1.5 to 2 steps; progress=3 failed only after 4,096 steps."""
    import pytest
    from vm.common.errors import InputError

    for max_steps in (None, float("nan"), -1, 1.5, True):
        machine = Countdown(3)
        with pytest.raises(InputError, match="max_steps"):
            step_until_halted(machine, max_steps)
        assert machine.steps == 0
    with pytest.raises(InputError, match="progress"):
        step_until_halted(Countdown(3), 10, progress=3)


def test_a_progress_that_cannot_take_the_step_count_is_refused_before_any_step() -> None:
    """`lambda: None` was taken and failed with a TypeError at its first call, mid-run;
    callables that can take one positional argument, and builtins whose signature cannot
    be read, are taken."""
    import pytest
    from vm.common.errors import InputError

    for progress in (lambda: None, lambda a, b: None, lambda *, steps: None):
        machine = Countdown(3)
        with pytest.raises(InputError, match="progress must take one argument"):
            step_until_halted(machine, 10, progress=progress)
        assert machine.steps == 0
    for progress in (lambda steps: None, lambda *args: None, lambda a, b=1: None, print, max):
        assert step_until_halted(Countdown(3), 10, progress=progress) == []
