"""How many CPU threads a run may ask for, checked in one place for every entry point."""

from __future__ import annotations

from vm.common.errors import InputError

MAX_THREADS = 256
"""Far above any machine's useful count, and below what makes thread pools fail (torch
crashed with 100,000)."""


def check_threads(threads: int, option: str = "threads") -> int:
    """`threads` when it is 1 to MAX_THREADS, else InputError naming `option`."""
    if not 1 <= threads <= MAX_THREADS:
        raise InputError(f"{option} must be between 1 and {MAX_THREADS}, got {threads}")
    return threads
