"""Peak memory of a computation, measured as the growth of the process's resident set.

torch allocates CPU tensors outside Python's allocator, so tracemalloc does not see them;
the resident set size (RSS) sees everything the computation touches. Linux keeps a
high-water mark of it (VmHWM in /proc/self/status), and writing "5" to /proc/self/clear_refs
resets that mark to the current RSS. So: reset, note the RSS, run, read the mark; the
difference is the peak extra memory of the run. Where the reset is not allowed, the
lifetime peak (getrusage) is used and the figure may include earlier peaks of the process;
`method` says which one was used.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

Result = TypeVar("Result")


@dataclass(frozen=True)
class Measurement:
    """Wall time in seconds, peak extra resident memory in bytes, and how it was measured."""

    seconds: float
    peak_bytes: int
    method: str


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"{field} missing from /proc/self/status")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        return True
    except OSError:
        return False


def measure(run: Callable[[], Result]) -> tuple[Result, Measurement]:
    """Run `run()` and return its result with its wall time and peak extra RSS."""
    exact = _reset_peak()
    before = _status_kib("VmRSS") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    peak = _status_kib("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    method = "rss-high-water-reset" if exact else "lifetime-maxrss"
    return result, Measurement(seconds=seconds, peak_bytes=max(0, peak - before) * 1024,
                               method=method)
