"""How many CPU threads a run's passes use: one for small work; for large work, and for the
fused pass's programs, the faster of one thread and the pool, measured on the run itself.

Why measured and not a fixed size threshold: a torch operation (or a fused call) is a
parallel region that waits for its slowest thread, and on a shared machine a thread can lose
its core for a whole scheduler time slice. On the project's 2-core machine with other jobs
running, two threads made passes 4-28x slower than one (`ltvm bench --columns 64 --batch 1024
--evaluation active --threads 1|2`: 31,608 and 45,990 against 7,368 and 1,618 steps/s), while
with the second core free they were 1.8-2x faster (docs/speed.md, "Threads, by measurement").
The count does not change X: a fused program runs all its passes in one thread whatever the
count, and tests/test_threads.py runs the FLEQ calculator's float64 torch passes (full and
active) at one and two threads and compares X bit for bit.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import torch

SINGLE_THREAD_MAX_COLUMNS = 1 << 15
"""Up to this many columns in a batch (batch x n), one CPU thread is used, unmeasured: the
products are too small to split, and idle OpenMP threads spin."""
FIRST_TRY = 2
"""Parts of a run (torch passes or fused calls) before the count not chosen is tried after a
switch. A run starts with each count's first part (not compared: it may compile) and a try,
all short."""
LONGEST_WAIT = 1024
"""Most parts between two tries of the count not chosen: the wait doubles each time that count
loses, so a count 20x slower costs at most about 20 / 1024 = 2 % of a run's time."""
TRY_PASSES = 4
"""Most passes of a fused call in a try (the chosen count's, then the other's): a call of
many programs can take a tenth of a second, and a try should cost little even when the
other count is slower."""


def cpu_thread_count(batch_columns: int, requested: int | None = None) -> int:
    """The torch CPU threads a run of `batch_columns` columns starts with: `requested`, or
    one thread for small work, else torch's setting."""
    return requested or (1 if batch_columns <= SINGLE_THREAD_MAX_COLUMNS
                         else torch.get_num_threads())


@contextmanager
def cpu_threads(batch_columns: int, requested: int | None = None) -> Iterator[None]:
    """Use `requested` torch CPU threads (or a count suited to the work) while the
    machine runs, then restore the caller's setting."""
    previous = torch.get_num_threads()
    torch.set_num_threads(cpu_thread_count(batch_columns, requested))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class MeasuredThreads:
    """The thread count of each part of one run (a torch pass, or a fused call of many
    passes), by measurement.

    With one candidate (a requested count, small work, a single-thread setting or a GPU
    run) every part runs at it. With two, a run starts with a short part at each count
    and a try; then parts run at the chosen count, and the other count is tried again after
    a wait: FIRST_TRY parts after a switch, doubled each time it loses (at most
    LONGEST_WAIT). A try is a pair of short parts (`trying`), the
    chosen count's and then the other's, compared with each other: a short fused call pays
    for reloading every program's working set, so a try measured against the chosen
    count's whole calls lost even where it was twice as fast."""

    def __init__(self, candidates: tuple[int, ...]) -> None:
        self.candidates = candidates
        self.chosen = candidates[0] if candidates else 0
        self.passes: dict[int, int] = dict.fromkeys(candidates, 0)
        """Passes run at each count so far."""
        self._timed: set[int] = set()
        self._wait = FIRST_TRY
        self._until_try = FIRST_TRY
        self._phase = "steady"
        """"baseline": the next part times the chosen count for a try; "try": the next part
        runs the other count; "steady": neither."""
        self._baseline = 0.0

    @classmethod
    def for_torch(cls, batch_columns: int, requested: int | None,
                  on_cpu: bool) -> MeasuredThreads:
        """Torch's candidates for a run: one and torch's setting when neither a requested
        count nor the work's size settles it, else the one count `cpu_thread_count`
        picks (none on a GPU). Make it before entering `cpu_threads`, which changes the
        setting; `torch_pass` sets the count of each pass inside it."""
        if not on_cpu:
            return cls(())
        most = torch.get_num_threads()
        if requested is None and batch_columns > SINGLE_THREAD_MAX_COLUMNS and most > 1:
            return cls((1, most))
        return cls((cpu_thread_count(batch_columns, requested),))

    @property
    def most_used(self) -> int:
        """The count most of the run's passes used (0 when none was set)."""
        return max(self.passes, key=self.passes.get) if self.passes else 0

    @property
    def trying(self) -> bool:
        """Whether the next part should be short: a count's first part (for its compile) or
        a part of a try (the chosen count's timing for it, or the other count)."""
        return len(self.candidates) == 2 and (self._phase != "steady" or len(self._timed) < 2)

    def next(self) -> int:
        """The count the next part runs at."""
        if len(self.candidates) < 2 or self._phase != "try":
            return self.chosen
        return self.candidates[1] if self.chosen == self.candidates[0] else self.candidates[0]

    def try_next(self) -> None:
        """Make the next part run the count not chosen (a run's first: whatever that count
        compiles on first use is then compiled at the start, in a part not compared)."""
        self._phase = "try"

    def learn(self, threads: int, seconds: float, passes: int = 1) -> None:
        """A part of `passes` passes ran at `threads` in `seconds`. A count's first part is
        not compared: it may include a compile."""
        if threads not in self.passes or passes < 1:
            return
        self.passes[threads] += passes
        if len(self.candidates) < 2:
            return
        per_pass = seconds / passes
        if threads not in self._timed:  # its first part: not compared
            self._timed.add(threads)
            both = len(self._timed) == 2
            self._phase = "baseline" if both else "try" if threads == self.chosen else "steady"
        elif self._phase == "baseline" and threads == self.chosen:
            self._phase, self._baseline = "try", per_pass
        elif self._phase == "try" and threads != self.chosen:
            if per_pass < self._baseline:
                self.chosen, self._wait = threads, FIRST_TRY
            else:
                self._wait = min(2 * self._wait, LONGEST_WAIT)
            self._phase, self._until_try = "steady", self._wait
        else:
            self._until_try -= 1
            if self._until_try <= 0:
                self._phase = "baseline"

    @contextmanager
    def torch_pass(self) -> Iterator[None]:
        """One torch pass at the count chosen now, timed (inside `cpu_threads`)."""
        if not self.candidates:
            yield
            return
        threads = self.next()
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        start = time.perf_counter()
        yield
        self.learn(threads, time.perf_counter() - start)
