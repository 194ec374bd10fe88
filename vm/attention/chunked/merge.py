"""Combining the parts of a query's attention with their recovered normalizers.

The paper's last step is  out_i = sum_t (B_t / A_t) A_t / sum_t A_t  over the parts t that
query i attends to. Here A_t arrives as log A_t and the sums are kept max-shifted, like a
streaming log-sum-exp: peak_i = max_t log A_t, total_i = sum_t exp(log A_t - peak_i) and
weighted_i = sum_t (B_t / A_t) exp(log A_t - peak_i). Nothing overflows whatever the size
of the scores, and only one N-long state per head is kept while parts stream by.
"""

from __future__ import annotations

import torch
from torch import Tensor


class PartCombiner:
    """The running, max-shifted sums of one head's parts over its N queries."""

    def __init__(self, n: int, width: int, dtype: torch.dtype) -> None:
        self.peak = torch.full((n,), float("-inf"), dtype=dtype)
        self.total = torch.zeros(n, dtype=dtype)
        self.weighted = torch.zeros(n, width, dtype=dtype)

    def add(self, positions: Tensor, log_a: Tensor, values: Tensor) -> None:
        """Fold parts into the sums: entry k adds (log A, B / A) = (log_a[k], values[k]) to
        query positions[k]; a position may occur several times."""
        peak = self.peak.scatter_reduce(0, positions, log_a, reduce="amax")
        shift = torch.where(torch.isinf(peak), 0, peak)
        keep = (self.peak - shift).exp()
        gain = (log_a - shift[positions]).exp()
        self.total.mul_(keep).index_add_(0, positions, gain)
        self.weighted.mul_(keep.unsqueeze(1)).index_add_(0, positions, values * gain.unsqueeze(1))
        self.peak = peak

    def result(self) -> tuple[Tensor, Tensor]:
        """The attention output (N x m) and log normalizer (N) of every query."""
        if bool((self.total <= 0).any()):
            raise AssertionError("a query received no attention: a part is missing")
        return self.weighted / self.total.unsqueeze(1), self.peak + self.total.log()
