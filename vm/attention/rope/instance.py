"""Random instances whose scores lie in [-B, B], the paper's bounded-entry regime.

The paper bounds the entries of Q, K, V by B (so scores lie in [-B^2, B^2] after the 1/d).
Here B bounds the scores themselves, as the issue's "B = 1: scores in [-1, 1]" does: the
rows of A1 and A2 have norm sqrt(d B), X1 and X2 are orthogonal and every W_delta has
spectral norm at most 1, so |Q[i] W K[j]^T / d| <= |Q[i]| |K[j]| / d = B.
"""

from __future__ import annotations

import math
import numbers

import torch

from vm.attention.rope.forward import rotary_offsets
from vm.attention.rope.gradient import Instance

FORMS = ("rotary", "general")


def _rows_of_norm(n: int, d: int, norm: float, gen: torch.Generator) -> torch.Tensor:
    rows = torch.randn(n, d, dtype=torch.float64, generator=gen)
    return rows / rows.norm(dim=1, keepdim=True) * norm


def _orthogonal(d: int, gen: torch.Generator) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64, generator=gen))
    return q


def general_offsets(n: int, d: int, gen: torch.Generator) -> torch.Tensor:
    """Random W_delta on the support S = {(r, r), (r, r+1 mod d)} (|S| = 2d, O(d)).

    Entries are uniform in [-1/2, 1/2]: with at most two per row and column the spectral
    norm is at most 1, and ||W||_inf <= 1 as Definition 3.1 asks.
    """
    offsets = torch.zeros(2 * n - 1, d, d, dtype=torch.float64)
    rows = torch.arange(d)
    for cols in (rows, (rows + 1) % d):
        offsets[:, rows, cols] = torch.rand(2 * n - 1, d, dtype=torch.float64,
                                            generator=gen) - 0.5
    return offsets


def random_instance(n: int, d: int, bound: float, form: str, seed: int) -> Instance:
    """An instance with scores in [-bound, bound]; `form` is rotary or general."""
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}")
    if not (isinstance(n, numbers.Integral) and isinstance(d, numbers.Integral)
            and n >= 1 and d >= 1):
        raise ValueError(f"n and d must be whole numbers, at least 1, got {n!r} and {d!r}")
    if not (math.isfinite(bound) and bound > 0):  # -1 made complex rows, NaN NaN rows
        raise ValueError(f"the bound must be positive and finite, got {bound}")
    gen = torch.Generator().manual_seed(seed)
    norm = (d * bound) ** 0.5
    a1, a2 = _rows_of_norm(n, d, norm, gen), _rows_of_norm(n, d, norm, gen)
    x1, x2, y = _orthogonal(d, gen), _orthogonal(d, gen), _orthogonal(d, gen)
    a3 = torch.rand(n, d, dtype=torch.float64, generator=gen) * 2 - 1
    e = torch.rand(n, d, dtype=torch.float64, generator=gen) * 2 - 1
    offsets = rotary_offsets(n, d) if form == "rotary" else general_offsets(n, d, gen)
    return Instance(a1, a2, a3, e, x1, x2, y, offsets)
