"""How many CPU threads a run's passes use: one for small work; for large work, and for the
fused pass's programs, the faster of one thread and the pool, measured on the run itself.

Why measured and not a fixed size threshold: a torch operation (or a fused call) is a
parallel region that waits for its slowest thread, and on a shared machine a thread can lose
its core for a whole scheduler time slice. On the project's 2-core machine with other jobs
running, two threads made passes 4-28x slower than one (`ltvm bench --columns 64 --batch 1024
--evaluation active --threads 1|2`: 31,608 and 45,990 against 7,368 and 1,618 steps/s), while
with the second core free they were 1.8-2x faster (docs/speed.md, "Threads, by measurement").
The count does not change X: a fused program runs all its passes in one thread whatever the
count, and tests/test_threads.py runs FLEQ's float64 torch passes (full and active) at one
and two threads and compares X bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager

import torch

SINGLE_THREAD_MAX_WORK = 1 << 29
"""Up to this many multiply-adds in a pass over the batch (the model's
`multiply_adds_per_column` x batch x n), one CPU thread is used, unmeasured: the products
are too small to split, and idle OpenMP threads spin. The bound was 32K columns (batch x n)
until the FLEQ machines, whose columns cost 5-250x a SUBLEQ column, showed it wrong:
inverse-d8 (n = 473, 1.07e9 multiply-adds a pass) ran at one thread and was 1.35-1.7x
faster at two on an idle 2-core machine. SUBLEQ's 32K columns are 3-6e8 (n = 1024 and
64), so its runs switch about where they did; the FLEQ calculator (4.2e6) stays at one."""
FIRST_TRY = 2
"""Parts of a run (torch passes or fused calls) before the count not chosen is tried after a
switch. A run starts with each count's first part (not compared: it may compile) and a try,
all short."""
LONGEST_WAIT = 1024
"""Most parts between two tries of the count not chosen: the wait doubles each time that count
loses, so a count 20x slower costs at most about 20 / 1024 = 2 % of a run's time."""
MAX_KINDS = 1024
"""Most kinds of parts (`learn`'s `kind`) whose latest time a run keeps: a batch of
different FLEQ programs may make every pass a new kind."""
TRY_PASSES = 4
"""Most passes of a fused call in a try (the chosen count's, then the other's): a call of
many programs can take a tenth of a second, and a try should cost little even when the
other count is slower."""


def cpu_thread_count(work: int, requested: int | None = None) -> int:
    """The torch CPU threads a run of passes of `work` multiply-adds starts with:
    `requested`, or one thread for small work, else torch's setting."""
    return requested or (1 if work <= SINGLE_THREAD_MAX_WORK else torch.get_num_threads())


@contextmanager
def cpu_threads(work: int, requested: int | None = None) -> Iterator[None]:
    """Use `requested` torch CPU threads (or a count suited to the work) while the
    machine runs, then restore the caller's setting."""
    previous = torch.get_num_threads()
    torch.set_num_threads(cpu_thread_count(work, requested))
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
    count's whole calls lost even where it was twice as fast. Where parts differ in cost
    by what they compute (`kind`), the other count's part is compared with the chosen
    count's latest part of the same kind instead."""

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
        self._latest: dict[Hashable, float] = {}
        """The chosen count's latest seconds a pass, by kind of part."""

    @classmethod
    def for_torch(cls, work: int, requested: int | None, on_cpu: bool) -> MeasuredThreads:
        """Torch's candidates for a run of passes of `work` multiply-adds: one and torch's
        setting when neither a requested count nor the work's size settles it, else the one
        count `cpu_thread_count` picks (none on a GPU). Make it before entering
        `cpu_threads`, which changes the setting; `torch_pass` sets the count of each pass
        inside it."""
        if not on_cpu:
            return cls(())
        most = torch.get_num_threads()
        if requested is None and work > SINGLE_THREAD_MAX_WORK and most > 1:
            return cls((1, most))
        return cls((cpu_thread_count(work, requested),))

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

    def learn(self, threads: int, seconds: float, passes: int = 1,
              kind: Hashable | None = None) -> None:
        """A part of `passes` passes ran at `threads` in `seconds`. A count's first part is
        not compared: it may include a compile. `kind`: what the part computed, where that
        sets its cost (a FLEQ active pass runs only the blocks its instructions select, so
        consecutive passes differ up to 20-fold, and a try compared with the pass before
        it was decided by the instructions, not the thread count)."""
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
        elif kind is not None:
            self._learn_kind(threads, per_pass, kind)
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

    def _learn_kind(self, threads: int, per_pass: float, kind: Hashable) -> None:
        """`learn` for parts of a kind: the chosen count's parts keep their kind's latest
        time; the other count's part (a try) is compared with the time of its kind, and
        where its kind has none yet the try is made again after the same wait."""
        if threads == self.chosen:
            if len(self._latest) >= MAX_KINDS:
                self._latest.clear()
            self._latest[kind] = per_pass
            if self._phase == "baseline":
                self._phase = "try"
                return
            self._until_try -= 1
            if self._until_try <= 0:
                self._phase = "baseline"
            return
        chosen = self._latest.get(kind)
        if chosen is not None and per_pass < chosen:
            self.chosen, self._wait, self._latest = threads, FIRST_TRY, {kind: per_pass}
        elif chosen is not None:
            self._wait = min(2 * self._wait, LONGEST_WAIT)
        self._phase, self._until_try = "steady", self._wait

    @contextmanager
    def torch_pass(self, kind: Hashable | None = None) -> Iterator[None]:
        """One torch pass at the count chosen now, timed (inside `cpu_threads`); `kind` as
        in `learn`."""
        if not self.candidates:
            yield
            return
        threads = self.next()
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        start = time.perf_counter()
        yield
        self.learn(threads, time.perf_counter() - start, kind=kind)
