"""Theorem 3.5: causal attention over N tokens with a causal oracle of length M.

Blocks as in `exact` (T = ceil(N / (M - 1)) blocks of B = M - 1). Query block t sees:

* its own block, causally: one part whose rows are the block itself (Claim B.6 for step 1,
  the plain block for step 2);
* every earlier block t' < t in full. The causal oracle only shows a query the keys on or
  before its row, so the full block is split as in the proof of Theorem 3.5:
  - lower part: row u holds key u of block t' and query u of block t, so query u sees
    keys 0..u;
  - upper part: the rows in reverse. Row 0 is a known-score row holding query B - 1 (which
    has no key after it), row p >= 1 holds key B - p and query B - 1 - p, so query u sees
    exactly the keys u+1..B-1. (The paper's B^(2)/A^(2) construction lacks this one-row
    shift and would count the diagonal twice.)

Rows are reordered directly ("arranging matrices in memory"), not through the look-up
oracle calls of Lemma A.3. Padding rows go last, where the causal mask hides them.

Oracle calls per head and layer: 2 T (diagonal) + 4 T (T - 1) / 2 (earlier blocks) = 2 T^2.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import ceil

import torch

from vm.attention.chunked.exact import blocks
from vm.attention.chunked.jobs import JobBatch, rows_where
from vm.attention.chunked.model import Mask

CAUSAL_ORACLE = True


def plan_head(n: int, max_length: int, mask: Mask, generator: torch.Generator,
              head: int) -> Iterator[JobBatch]:
    """For each query block, one batch: its diagonal part, then a lower and an upper part
    per earlier block."""
    block = max_length - 1
    starts, lengths = blocks(n, block)
    row = torch.arange(block)
    reverse = block - 1 - row
    for t, (q_start, q_len) in enumerate(zip(starts.tolist(), lengths.tolist())):
        own = rows_where(row < q_len, q_start + row)
        earlier = starts[:t, None]
        lower_keys = earlier + row
        upper_keys = rows_where(row > 0, earlier + block - row)
        upper_queries = rows_where(reverse < q_len, q_start + reverse)
        keys = torch.cat([own[None], lower_keys, upper_keys])
        queries = torch.cat([own[None], own.expand(t, block), upper_queries.expand(t, block)])
        yield JobBatch(head=head, keys=keys.unsqueeze(1), queries=queries.unsqueeze(1))


def steps_per_head(n: int, max_length: int, mask: Mask) -> int:
    """2 T^2 with T = ceil(N / (M - 1))."""
    return 2 * ceil(n / (max_length - 1)) ** 2
