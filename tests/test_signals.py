"""vm/common/signals.py: a block that must not stop half-way gets the signals that came
during it only once it has ended."""

from __future__ import annotations

import signal
import threading

import pytest

from vm.common.signals import signals_held_back


def test_a_signal_during_the_block_is_handled_once_after_it():
    handled: list[str] = []

    def stop(signum: int, frame) -> None:
        handled.append(signal.Signals(signum).name)
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals_held_back():
                signal.raise_signal(signal.SIGTERM)
                handled.append("block ended")
        assert handled == ["block ended", "SIGTERM"]
        assert signal.getsignal(signal.SIGTERM) is stop
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_block_outside_the_main_thread_runs_as_it_is():
    """Only the main thread may set a handler (signal.signal raised ValueError elsewhere)."""
    ran: list[BaseException | str] = []

    def block() -> None:
        try:
            with signals_held_back():
                ran.append("ran")
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            ran.append(error)
    worker = threading.Thread(target=block)
    worker.start()
    worker.join()
    assert ran == ["ran"]


def test_only_the_stops_python_drops_are_kept_back_for_raising(monkeypatch):
    """A stop dropped in a `__del__` is raised by raise_dropped_stop, once; any other
    exception dropped there still reaches the hook that was in place (it prints it)."""
    import sys

    from vm.common.signals import raise_dropped_stop, stops_dropped_noticed

    class Raising:
        def __init__(self, error: BaseException) -> None:
            self.error = error

        def __del__(self) -> None:
            raise self.error
    printed: list[BaseException] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: printed.append(
        unraisable.exc_value))
    with stops_dropped_noticed((KeyboardInterrupt,)):
        Raising(KeyboardInterrupt())
        Raising(ValueError("printed"))
        with pytest.raises(KeyboardInterrupt):
            raise_dropped_stop()
        raise_dropped_stop()  # raised once: nothing left
    assert [str(error) for error in printed] == ["printed"]
