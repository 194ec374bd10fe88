"""Signals held back for a block that must not stop half-way: a Ctrl-C or SIGTERM raised
between two moves of a set of output files left some files moved and some not, and the
cleanup then deleted the user's old files that had been set aside."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

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

    def hold(signum: int, frame) -> None:
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
