"""Limits on what a user may ask of a run, checked in one place for every entry point."""

from __future__ import annotations

import inspect
import numbers

import numpy as np

from vm.common.errors import InputError

MAX_THREADS = 256
"""Far above any machine's useful count, and below what makes thread pools fail (torch
crashed with 100,000)."""
MAX_TEMPERATURE = 1e6
"""The largest softmax temperature lam: far sharper than any read needs (the defaults are
about 20 for SUBLEQ and 800 for FLEQ); an infinite or huge lam turns scores into inf - inf,
a NaN that no run should compute on. Also the most noise a sampled read takes: its scale
lam * T overflowed float32 from T = 1e37, and every sample read NaN."""

MAX_EPOCHS = 100_000
"""Most epochs of SGD one training run may ask for (each is thousands of passes for a few
samples; far below 2^24, where a float32 epoch counter stops counting)."""


def is_whole_number(value: object) -> bool:
    """An integer, Python's or numpy's, and not a bool: True is no count (it ran as 1)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_flag(value: object, name: str) -> bool:
    """`value` as a bool when it is True or False (numpy's too), else InputError naming it:
    any truthy value ("no", 5) was taken as True."""
    if not isinstance(value, (bool, np.bool_)):
        raise InputError(f"{name} must be True or False, got {value!r:.40}")
    return bool(value)


def check_callback(callback: object, name: str, argument: str) -> None:
    """Refuse a `callback` that is neither None nor callable, or that cannot take one
    positional argument (`argument` says what it gets), before the work that calls it:
    5 failed with "'int' object is not callable" at its first call, `lambda: None` with a
    TypeError mid-run. A callable whose signature cannot be read (some builtins) is taken."""
    if callback is None:
        return
    if not callable(callback):
        raise InputError(f"{name} must be a function of {argument}, or None, got "
                         f"{callback!r:.80}")
    try:
        signature = inspect.signature(callback)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(0)
    except TypeError:
        raise InputError(f"{name} must take one argument, {argument}, got {callback!r:.80} "
                         f"of signature {signature}") from None


def check_threads(threads: int, option: str = "threads") -> int:
    """`threads` when it is 1 to MAX_THREADS, else InputError naming `option`."""
    if not 1 <= threads <= MAX_THREADS:
        raise InputError(f"{option} must be between 1 and {MAX_THREADS}, got {threads}")
    return threads


def check_temperature(temperature: float, option: str = "temperature") -> float:
    """`temperature` when it is above 0 and at most MAX_TEMPERATURE, else InputError (a
    string or a bool too: True built a machine at lam = 1)."""
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise InputError(f"{option} must be a number, got {temperature!r}")
    if not (0 < temperature <= MAX_TEMPERATURE):  # NaN fails too; 10**400 is no float
        raise InputError(f"{option} must be above 0 and at most {MAX_TEMPERATURE:g}, got "
                         f"{temperature!r:.40}")
    return temperature
