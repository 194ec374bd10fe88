"""Stopping signals (Ctrl-C, SIGTERM, SIGHUP) acted on where the command can act on them:
held back for a block that must not stop half-way (a Ctrl-C between two moves of a set of
output files left some moved and some not, and the cleanup then deleted the user's old files
that had been set aside), and raised again when Python dropped the exception of one."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

HELD_BACK = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                  if hasattr(signal, name))
"""The signals that stop a command (Ctrl-C, `kill`/`timeout`, a closed terminal)."""


@contextmanager
def signals_held_back() -> Iterator[None]:
    """Run the block to its end whatever signal comes: a signal Python handles (Ctrl-C's
    KeyboardInterrupt, the command line's Terminated) is noted, and its handler runs once the
    block has ended, so the interruption still happens, only later. Python runs handlers in
    the main thread alone: elsewhere nothing can interrupt the block and it runs as it is.
    A handler found running after the block (the restore itself interrupted) passes each
    signal straight on, so no signal is ever noted and forgotten."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {number: signal.getsignal(number) for number in HELD_BACK}
    handlers = {number: handler for number, handler in handlers.items() if callable(handler)}
    noted: list[int] = []
    holding = True

    def hold(signum: int, frame: FrameType | None) -> None:
        if holding:
            noted.append(signum)
        else:
            handlers[signum](signum, frame)

    try:
        for number in handlers:
            signal.signal(number, hold)
        yield
    finally:
        holding = False
        for number, handler in handlers.items():
            signal.signal(number, handler)
        for number in noted:
            handlers[number](number, None)


_dropped: list[BaseException] = []
"""Stops that Python dropped while `stops_dropped_noticed` watched, first first."""


@contextmanager
def stops_dropped_noticed(stops: tuple[type[BaseException], ...]) -> Iterator[None]:
    """Note each exception of the types `stops` that Python drops in the block: one raised
    where it cannot propagate (a `__del__`, a weakref callback) was printed as a traceback and
    dropped, and a Ctrl-C or SIGTERM that landed there let the command finish with exit 0 as
    if never stopped. `raise_dropped_stop` raises the noted one where the command can act."""
    previous = sys.unraisablehook

    def notice(unraisable: sys.UnraisableHookArgs) -> None:
        if isinstance(unraisable.exc_value, stops):
            _dropped.append(unraisable.exc_value)
        else:
            previous(unraisable)
    sys.unraisablehook = notice
    try:
        yield
    finally:
        sys.unraisablehook = previous
        _dropped.clear()


def raise_dropped_stop() -> None:
    """Raise the first stop Python dropped since the last call (see `stops_dropped_noticed`),
    if one was: the command ends, or the REPL's command is interrupted, as the signal meant."""
    if _dropped:
        stop = _dropped[0]
        _dropped.clear()
        raise stop
