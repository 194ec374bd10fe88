"""Progress of long work on stderr, through tqdm, and a wall-time limit."""

from __future__ import annotations

import re
import sys
import time
from typing import TextIO

from tqdm import tqdm

from vm.common.errors import RunFailure

TERMINAL_INTERVAL = 0.2
LOG_INTERVAL = 5.0
"""Seconds between updates on a terminal (one rewritten line) and in a log (one line each)."""
LARGEST_SHOWN_TOTAL = 2 ** 63
"""The largest total shown with a percentage and time left; tqdm takes the total as a float,
so --max-steps 10**400 stopped with an OverflowError at the first update. A larger total
(a bound no run reaches) shows the count and rate alone."""


PLURAL = re.compile(r"\b(step|pass|call|row|line|layer)(e?s)\b")
"""The counted noun of a label ('reference steps sizing the output tape'), for one of it."""


def _counted_label(count: int, label: str) -> str:
    """'1 step', '2 steps', '1 line assembled': a count and its label, singular for one
    (--max-seconds said 'stopped ... after 1 steps')."""
    return f"{count:,} {PLURAL.sub(lambda noun: noun[1], label, 1) if count == 1 else label}"


_SHOWN: set[Progress] = set()
"""The progress objects whose line is drawn and not yet ended (see `end_progress_lines`)."""


class _Unfailing:
    """The progress line's stream, whose failures end the line and not the work: written
    to a full disk (`ltvm run p.sq 2>/dev/full`) or a closed pipe, the first progress
    report raised OSError and the run stopped with no result."""

    def __init__(self, stream: TextIO) -> None:
        self._stream, self._failed = stream, False

    def write(self, text: str) -> None:
        self._attempt(self._stream.write, text)

    def flush(self) -> None:
        self._attempt(self._stream.flush)

    def _attempt(self, action, *arguments) -> None:
        if not self._failed:
            try:
                action(*arguments)
            except OSError:
                self._failed = True

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class TimeLimitExceeded(RunFailure):
    """A run stopped by its --max-seconds limit before it halted."""


class Progress:
    """Called with a running count. Shows nothing during the first `delay` seconds of work,
    then tqdm's count, rate and time left; the clock starts at the first call, so set-up is
    not counted as work. `max_seconds` limits wall time from construction, or from the
    `time.monotonic()` value `since` (a command's start, when its work has several parts):
    a call past it raises TimeLimitExceeded, saying the work stopped before `unfinished`."""

    def __init__(self, label: str, total: int | None = None, stream: TextIO | None = None,
                 delay: float = 1.0, max_seconds: float | None = None,
                 unfinished: str = "the program halted", since: float | None = None) -> None:
        self.label, self.total, self.unfinished = label, total, unfinished
        self.stream = stream or sys.stderr
        self.delay, self.max_seconds = delay, max_seconds
        self.created = time.monotonic() if since is None else since
        self.bar: tqdm | None = None

    def __call__(self, count: int) -> None:
        if self.max_seconds is not None and time.monotonic() - self.created >= self.max_seconds:
            self.done()
            raise TimeLimitExceeded(f"stopped by --max-seconds {self.max_seconds:g} after "
                                    f"{_counted_label(count, self.label)}, before "
                                    f"{self.unfinished}")
        if self.bar is None:
            shown = self.total if self.total is None or self.total <= LARGEST_SHOWN_TOTAL else None
            self.bar = tqdm(total=shown, initial=count, desc=self.label, unit="",
                            file=_Unfailing(self.stream), delay=self.delay, leave=True,
                            mininterval=TERMINAL_INTERVAL if self.stream.isatty()
                            else LOG_INTERVAL)
            _SHOWN.add(self)
            return
        self.bar.update(count - self.bar.n)

    def done(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        _SHOWN.discard(self)


def end_progress_lines() -> None:
    """End every progress line still drawn, as a command stops on an error or Ctrl-C before
    its `done()`: the half-drawn line stayed, and `ltvm: interrupted` or the error message
    was printed on the end of it."""
    for progress in list(_SHOWN):
        progress.done()
