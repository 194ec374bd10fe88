"""Theorem 5.1: sliding-window attention, with or without attention sinks, in O(N/M) calls.

Query i sees the keys i-r+1..i (window r) and, with s sinks, also the keys 0..s-1. The
oracle is causal, so one call gives every query a *prefix* of its rows, and a window is the
difference of two prefixes (the proof of Theorem 5.1):

    window(i) = [c-r+1, i] minus [c-r+1, i-r]     for the queries i of a chunk starting at c.

* First queries: i < g0 = r + s see every key up to i (the window and the sinks cover it),
  so one causal part over positions [0, g0) answers them (2 calls).
* Window chunks: the queries from g0 on are cut into chunks of M - r. Chunk [c, c+len) has
  rows p = 0..len+r-2 for the positions c-r+1+p; the query of a row is its position if it is
  in the chunk. The prefix part's row p holds key c-r+1+p, the shifted part's row p holds
  key c-r+1+p-r (a known-score row while p < r), so query i sees keys [c-r+1, i] in one and
  [c-r+1, i-r] in the other. Step 1 adds the synthetic token: len + r <= M rows. The job
  subtracts the shifted part from the prefix part (4 calls per chunk).
* Sink chunks (s > 0): the queries from g0 on, in chunks of M - s - 1. The rows are the s
  sink keys, then one known-score row per query, so each query sees exactly the sinks plus
  known-score rows (2 calls per chunk). The paper writes the sink sums as a difference of
  prefixes over [1, i], which spans more than M tokens; this direct form stays within M.

Oracle calls per head and layer (causal oracle):
    window:  2 + 4 ceil((N - r) / (M - r))
    sink:    2 + 4 ceil((N - r - s) / (M - r)) + 2 ceil((N - r - s) / (M - s - 1))

The subtraction amplifies rounding errors by A_prefix / A_window (up to about (M - 1) / r
for even scores, unbounded when older keys score much higher than the window). The job
reports the largest factor (`SimulationResult.amplification`); the error grows in proportion
to it, and RunFailure is raised when it would leave less than two correct digits.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import ceil

import torch
from torch import Tensor

from vm.attention.chunked.jobs import Contribution, JobBatch, rows_where
from vm.attention.chunked.model import Mask
from vm.common.errors import RunFailure

CAUSAL_ORACLE = True


def plan_head(n: int, max_length: int, mask: Mask, generator: torch.Generator,
              head: int) -> Iterator[JobBatch]:
    """First queries, then window chunks, then sink chunks."""
    r, s = mask.window, mask.sinks
    first = min(n, r + s)
    everything = torch.arange(first)[None, None]
    yield JobBatch(head=head, keys=everything, queries=everything)
    width = max_length - 1
    row = torch.arange(width)
    starts = torch.arange(first, n, max_length - r)[:, None]
    positions = starts - r + 1 + row
    inside = positions < torch.clamp(starts + max_length - r, max=n)
    queries = rows_where(inside & (positions >= starts), positions)
    prefix = rows_where(inside, positions)
    shifted = rows_where(inside & (row >= r), positions - r)
    yield JobBatch(head=head, keys=torch.stack([prefix, shifted], dim=1),
                   queries=torch.stack([queries, queries], dim=1), combine=subtract)
    if s == 0:
        return
    starts = torch.arange(first, n, max_length - s - 1)[:, None]
    positions = starts + row - s
    asked = (row >= s) & (positions < n)
    yield JobBatch(head=head, keys=rows_where(row < s, row).expand(len(starts), width)[:, None],
                   queries=rows_where(asked, positions)[:, None])


def subtract(queries: Tensor, log_a: Tensor, values: Tensor) -> Contribution:
    """window = prefix - shifted prefix, in log space: A_w = A_p (1 - rho), rho = A_s / A_p."""
    asked = queries >= 0
    ratio = torch.where(asked, log_a[:, 1] - log_a[:, 0], float("-inf"))
    gap = -torch.expm1(ratio)
    amplification = float((1 / gap).max())
    if not bool((gap > 0).all()) or amplification * torch.finfo(gap.dtype).eps > 1e-2:
        raise RunFailure(
            f"sliding-window subtraction cancels: a window holds only 1/{amplification:.3g} of "
            f"its prefix's attention mass, below what {gap.dtype} resolves"
            + ("; use float64" if gap.dtype != torch.float64 else ""))
    rho = ratio.exp().unsqueeze(-1)
    return Contribution(log_normalizer=log_a[:, 0] + gap.log(),
                        values=(values[:, 0] - rho * values[:, 1]) / gap.unsqueeze(-1),
                        amplification=amplification)


def steps_per_head(n: int, max_length: int, mask: Mask) -> int:
    """2 + 4 ceil((N - g0) / (M - r)) [+ 2 ceil((N - g0) / (M - s - 1)) with sinks], g0 = r + s."""
    r, s = mask.window, mask.sinks
    rest = max(0, n - r - s)
    steps = 2 + 4 * ceil(rest / (max_length - r))
    if s:
        steps += 2 * ceil(rest / (max_length - s - 1))
    return steps
