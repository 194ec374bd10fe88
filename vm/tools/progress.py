"""Progress lines on stderr for runs that take more than a second."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from vm.common.errors import RunFailure


class TimeLimitExceeded(RunFailure):
    """A run stopped by its --max-seconds limit before it halted."""


class Progress:
    """Call with a count; prints only after `delay` seconds, then at most every
    `interval` seconds (rewriting one line on a terminal, new lines otherwise).
    The clock starts at the first call, so set-up time is not counted as work."""

    def __init__(self, label: str, total: int | None = None, stream: TextIO | None = None,
                 delay: float = 1.0, max_seconds: float | None = None) -> None:
        self.label, self.total = label, total
        self.max_seconds = max_seconds
        """Wall-time limit from construction; a call past it raises TimeLimitExceeded."""
        self.created = time.monotonic()
        self.stream = stream or sys.stderr
        self.start: float | None = None
        self.delay = delay
        self.tty = self.stream.isatty()
        self.interval = 0.2 if self.tty else 5.0
        self.last = 0.0
        self.shown = False

    def __call__(self, count: int) -> None:
        now = time.monotonic()
        if self.max_seconds is not None and now - self.created >= self.max_seconds:
            self.done()
            raise TimeLimitExceeded(f"stopped by --max-seconds {self.max_seconds:g} after "
                                    f"{count:,} {self.label}, before the program halted")
        if self.start is None:
            self.start, self.first = now, count
            self.last = now + self.delay - self.interval
            return
        if now - self.start < self.delay or now - self.last < self.interval:
            return
        self.last, self.shown = now, True
        rate = (count - self.first) / (now - self.start)
        of = f"/{self.total}" if self.total else ""
        left = ""
        if self.total and rate > 0 and count < self.total:
            left = f", at most {_duration((self.total - count) / rate)} left"
        line = f"{self.label}: {count}{of} ({rate:,.0f}/s{left})"
        self.stream.write(f"\r{line}" if self.tty else f"{line}\n")
        self.stream.flush()

    def done(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()
            self.shown = False


def _duration(seconds: float) -> str:
    """A rough human duration: 40 s, 12 min, 3.5 h, 9 days."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:,.0f} days"
