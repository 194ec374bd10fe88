"""The largest sizes `ltvm attention` and `ltvm bench attention` accept, checked before work.

Torch-free, like the package's `__init__`: the command line imports it to check options
before it loads torch. A simulation's cost has four parts, each bounded here:

* the oracle calls: 2 T^2 (exact, causal), 2 T (sampled) or about 4 N / (M - r) (window,
  sink) a head and layer, at roughly 40,000 small calls a second; MAX_CALLS keeps that
  under about a minute (M = 2 at N = 65536 asked for 8.6 billion exact calls);
* the N x N work of the exact and causal simulations and of the check against direct
  attention (all modes but window and sink, whose check scores only a band): MAX_N;
* one oracle call's M x M score matrix (and its softmax beside it): MAX_M;
* the instance's activations and weights: MAX_MEMORY.
"""

from __future__ import annotations

import math

from vm.common.errors import InputError

MAX_N = 1 << 16
"""Largest N where the work grows as N^2: 65536 already takes minutes."""
BANDED_MODES = ("window", "sink")
BANDED_MAX_N = 1 << 20
"""Window and sink simulations and their checks are linear in N."""
MAX_M = 1 << 14
"""One oracle call holds M x M scores and their softmax: 2 GiB in float32 at 2^14."""
SIZE_LIMITS = {"heads": 64, "layers": 64, "head_dim": 1024, "oracle_heads": 64,
               "oracle_layers": 64}
"""The other sizes of one instance."""
MAX_CALLS = 1 << 21
"""Oracle calls of one simulation: about a minute of calls of M = 16."""
MAX_SCORE_SCALE = {"float32": 126 * math.log(2), "float64": 1022 * math.log(2)}
"""-ln of the dtype's smallest normal number (87.3, 708.4): the simulation reads every score
through its weight against the synthetic token's known score 0 (`parts`), and a score of
that size makes one of the two weights leave the normal range. First-layer scores have
standard deviation --score-scale, so a larger scale puts typical scores out of reach (and
from about 1e38 in float32 they overflow to inf, which made NaN errors)."""


def max_n(mode: str) -> int:
    """The largest N a simulation in `mode` may ask for."""
    return BANDED_MAX_N if mode in BANDED_MODES else MAX_N


def n_reason(mode: str) -> str:
    """Why N is capped in `mode`, for the error message."""
    if mode in BANDED_MODES:
        return " (the window simulation and its check are linear in N)"
    return (" (the check against direct attention costs N^2 in this mode: 65536 takes "
            "minutes; window and sink go to 2^20)")


def check_limits(mode: str, n: int, m: int, **sizes: int) -> None:
    """InputError unless N, M and the named sizes (heads, layers, ...) are within limits;
    an option is named as on the command line (--head-dim for head_dim)."""
    if n > max_n(mode):
        raise InputError(f"--n {n} exceeds the limit of {max_n(mode)}{n_reason(mode)}")
    if m > MAX_M:
        raise InputError(f"--m {m} exceeds the limit of {MAX_M} (one oracle call holds M x M "
                         "scores and their softmax: 2 GiB in float32 at the limit)")
    for name, value in sizes.items():
        if value > SIZE_LIMITS[name]:
            raise InputError(f"--{name.replace('_', '-')} {value} exceeds the limit of "
                             f"{SIZE_LIMITS[name]}")


def check_score_scale(scale: float, dtype: str) -> None:
    """InputError when first-layer scores of standard deviation `scale` are beyond `dtype`."""
    if scale > MAX_SCORE_SCALE[dtype]:
        others = ", ".join(f"{limit:.1f} in {name}" for name, limit in MAX_SCORE_SCALE.items()
                           if name != dtype)
        raise InputError(f"--score-scale {scale:g} exceeds the limit of "
                         f"{MAX_SCORE_SCALE[dtype]:.1f} in {dtype} ({others}): scores of that "
                         "size send their weight against the synthetic token's known score 0 "
                         f"outside {dtype}'s normal range")


MAX_MEMORY = 4 * 2 ** 30
"""The most an instance's activations and weights may take (`instance_bytes`)."""


def instance_bytes(n: int, heads: int, layers: int, head_dim: int) -> int:
    """About the memory of one instance that grows with its sizes (a few hundred MiB of
    oracle and reference buffers come on top): the N x H*m input and every layer's output,
    drawn and checked in float64 (measured at up to 7 + L float64 copies of the input), and
    each head's three m x m weights in three copies (drawn, cast, float64)."""
    return 8 * (n * heads * head_dim * (7 + layers) + 9 * layers * heads * head_dim ** 2)


def check_memory(n: int, heads: int, layers: int, head_dim: int) -> None:
    """InputError when an instance would take more than MAX_MEMORY: refused up front, not
    allocated until the machine runs out (N = 2^20 with 64 heads of 1024 asked for 512 GiB)."""
    needed = instance_bytes(n, heads, layers, head_dim)
    if needed > MAX_MEMORY:
        raise InputError(f"an instance of N={n} with {heads} heads of dimension {head_dim} "
                         f"in {layers} layers takes about {needed / 2 ** 30:.1f} GiB, more than "
                         f"the limit of {MAX_MEMORY // 2 ** 30} GiB: lower --n, --heads, "
                         "--head-dim or --layers")


def check_calls(what: str, calls: int, remedy: str) -> None:
    """InputError when a simulation would make more than MAX_CALLS oracle calls; `what`
    names it (mode and sizes) and `remedy` says which options lower the count."""
    if calls > MAX_CALLS:
        raise InputError(f"{what} makes {calls:,} oracle calls, more than the limit of "
                         f"{MAX_CALLS:,} (about a minute of calls at M = 16): {remedy}")
