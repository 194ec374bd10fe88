"""Lemma 3.1 / Theorem 3.4: full (unmasked) attention over N tokens from (N/M)^2 blocks.

The N positions are cut into T = ceil(N / (M - 1)) blocks of B = M - 1 (the last one may be
shorter): a step-1 call holds a block plus the synthetic token, so M - 1 is the longest block
an oracle of length M accepts. Every (query block, key block) pair is one part: row u holds
key u of the key block and query u of the query block. When the key block is the shorter
last block, its missing rows are known-score rows, which the readout accounts for.

Oracle calls per head and layer: 2 T^2 = 2 ceil(N / (M - 1))^2  (non-causal oracle).
"""

from __future__ import annotations

from collections.abc import Iterator
from math import ceil

import torch

from vm.attention.chunked.jobs import JobBatch, rows_where
from vm.attention.chunked.model import Mask

CAUSAL_ORACLE = False


def blocks(n: int, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Starts and lengths of the consecutive blocks of `block` positions covering [0, n)."""
    starts = torch.arange(0, n, block)
    return starts, (n - starts).clamp(max=block)


def plan_head(n: int, max_length: int, mask: Mask, generator: torch.Generator,
              head: int) -> Iterator[JobBatch]:
    """For each query block, one batch with a part per key block."""
    block = max_length - 1
    starts, lengths = blocks(n, block)
    row = torch.arange(block)
    keys = rows_where(row < lengths[:, None], starts[:, None] + row)
    for q_start, q_len in zip(starts.tolist(), lengths.tolist()):
        queries = rows_where(row < q_len, q_start + row).expand_as(keys)
        yield JobBatch(head=head, keys=keys.unsqueeze(1), queries=queries.unsqueeze(1))


def steps_per_head(n: int, max_length: int, mask: Mask) -> int:
    """2 T^2 with T = ceil(N / (M - 1))."""
    return 2 * ceil(n / (max_length - 1)) ** 2
