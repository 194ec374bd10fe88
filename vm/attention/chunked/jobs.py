"""Jobs: the parts a variant plans for one head, and how their answers are combined.

A job is one or more parts whose rows ask the same queries row by row; its combine rule
turns the parts' (log A, B / A) into one contribution per row (most jobs have one part; a
sliding-window chunk subtracts two). A `JobBatch` holds J jobs of the same shape for one
head, so that planning, readout and combining work on whole tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Contribution:
    """Per job and row: log A (-inf: nothing seen), B / A, and the rounding amplification."""

    log_normalizer: Tensor
    values: Tensor
    amplification: float = 1.0


Combine = Callable[[Tensor, Tensor, Tensor], Contribution]
"""(queries J x n, log A J x P x n, B / A J x P x n x m) -> one contribution per row."""


def single(queries: Tensor, log_a: Tensor, values: Tensor) -> Contribution:
    """The combine rule of one-part jobs."""
    return Contribution(log_normalizer=log_a[:, 0], values=values[:, 0])


@dataclass(frozen=True)
class JobBatch:
    """J jobs of P parts with n rows each, for head `head`.

    keys and queries are J x P x n position tensors (-1: known-score row, no query); all
    parts of a job have the same queries.
    """

    head: int
    keys: Tensor
    queries: Tensor
    combine: Combine = single

    @property
    def problems(self) -> int:
        """Oracle problems it needs: two steps per part."""
        return 2 * self.keys.shape[0] * self.keys.shape[1]


def rows_where(condition: Tensor, positions: Tensor) -> Tensor:
    """positions where condition holds, -1 elsewhere (broadcasting)."""
    return torch.where(condition, positions, torch.tensor(-1))
