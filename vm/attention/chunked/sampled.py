"""Theorem 4.1: average-case attention from N/M blocks with a random permutation of the keys.

The queries are cut into T = ceil(N / (M - 1)) blocks of nearly equal size n_t <= M - 1.
A uniformly random permutation tau of the keys is drawn (directly, with torch.randperm, as
the paper's footnote allows), and query block S_t attends to the keys tau(S_t): a uniform
sample of n_t of the N keys, different blocks getting disjoint samples. One part per block:

* step 1 gives log of sum_{j in S_t} exp(<q_i, k_tau(j)>); scaled by N / n_t it estimates the
  normalizer sum_j exp(<q_i, k_j>) (reported as the log normalizer);
* step 2 gives sum_S b / sum_S a over the sample, the estimate of the attention output.

Oracle calls per head and layer: 2 T = 2 ceil(N / (M - 1))  (non-causal oracle).
The error guarantee and the check of its assumptions are in `average_case`.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import ceil

import torch
from torch import Tensor

from vm.attention.chunked.jobs import Combine, Contribution, JobBatch, rows_where
from vm.attention.chunked.model import Mask

CAUSAL_ORACLE = False


def block_sizes(n: int, max_length: int) -> list[int]:
    """T = ceil(N / (M - 1)) block sizes that differ by at most one and sum to N."""
    count = ceil(n / (max_length - 1))
    return [n // count + (1 if t < n % count else 0) for t in range(count)]


def plan_head(n: int, max_length: int, mask: Mask, generator: torch.Generator,
              head: int) -> Iterator[JobBatch]:
    """One part per query block, its keys a fresh random sample of the same size."""
    permutation = torch.randperm(n, generator=generator)
    sizes = torch.tensor(block_sizes(n, max_length))
    starts = (sizes.cumsum(0) - sizes)[:, None]
    row = torch.arange(int(sizes.max()))
    inside = row < sizes[:, None]
    keys = rows_where(inside, permutation[(starts + row).clamp(max=n - 1)])
    queries = rows_where(inside, starts + row)
    yield JobBatch(head=head, keys=keys[:, None], queries=queries[:, None],
                   combine=_scaled_by((n / sizes.to(torch.float64)).log()))


def _scaled_by(log_factor: Tensor) -> Combine:
    """The combine rule that turns each sample's normalizer into N / n_t times it."""

    def scale(queries: Tensor, log_a: Tensor, values: Tensor) -> Contribution:
        return Contribution(log_normalizer=log_a[:, 0] + log_factor.to(log_a.dtype)[:, None],
                            values=values[:, 0])

    return scale


def steps_per_head(n: int, max_length: int, mask: Mask) -> int:
    """2 T with T = ceil(N / (M - 1))."""
    return 2 * ceil(n / (max_length - 1))
