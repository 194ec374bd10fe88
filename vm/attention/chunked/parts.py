"""Small attention problems ("parts") and how two oracle calls answer one (Lemma 3.1, Claim B.6).

A part lists n rows. Row r carries the key of position keys[r] and the query of position
queries[r] of the head's input X_h (N x m): the token is [x_key, x_query, real, known], and the
oracle's W^Q reads x_query, its W^K reads x_key. This is the paper's
phi([X[S_t], X[S_t']]) with W^{Q''} and W^{K''}; the query block and the key block may differ.

keys[r] = -1 makes a *known-score row*: its key is zero, so its score with every query is
exactly 0 and its exponential a0 = e^0 = 1 is known in advance; its value is zero. The
synthetic token of Lemma 3.1 is such a row, and so is every padding row (a short last block,
a call that is longer than this part). queries[r] = -1 is a row whose output is unused.

Each part costs two oracle calls, the two steps of Lemma 3.1:

* normalizer (step 1): the synthetic token first, then the rows; the value matrix reads the
  two flags. Query i's output is (r_i, p_i), the softmax weight on real keys and on
  known-score rows. If query i sees P_i known-score rows (all of them without a mask, those
  on or before its row with the causal mask) and A_i is the sum of exp(<q_i, k_j>) over the
  real keys it sees, then r_i = A_i / (A_i + P_i) and p_i = P_i / (A_i + P_i), hence
      log A_i = log P_i + log r_i - log p_i.
* values (step 2): the rows alone; the value matrix is the head's W^V plus the `real` flag.
  Query i's output is (B_i / (A_i + P_i), r_i) with B_i = sum_j exp(<q_i, k_j>) v_j, so
  B_i / A_i is the first part divided by r_i (P_i = 0 and r_i = 1 when nothing is padded).

Numerical stability: the paper recovers A from r alone, A = a0 r / (1 - r), and 1 - r loses
all its digits once A >> a0. Reading p directly (a second value column) keeps full relative
precision on both sides, and only log A is ever formed, so no normalizer overflows. With
float32 the scores may reach about +-80 (float64: +-700) around the known score 0; beyond
that r or p falls below the smallest normal number and the readout raises RunFailure instead
of returning a wrong number.

All functions work on R problems at once: keys and queries are R x n.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch
from torch import Tensor

from vm.attention.chunked.model import HeadWeights
from vm.common.errors import RunFailure


class Step(enum.IntEnum):
    """Which of the two oracle calls of a part."""

    NORMALIZER = 0
    VALUES = 1


def with_synthetic(keys: Tensor, queries: Tensor) -> tuple[Tensor, Tensor]:
    """Step 1's rows: the synthetic token (a known-score row without query) first."""
    none = torch.full((keys.shape[0], 1), -1, dtype=torch.long)
    return torch.cat([none, keys], dim=1), torch.cat([none, queries], dim=1)


def tokens(x_heads: Tensor, heads: Tensor, keys: Tensor, queries: Tensor) -> Tensor:
    """Oracle input rows [x_key, x_query, real, known] (R x n x (2m + 2)).

    x_heads is H x N x m; problem i reads head heads[i].
    """
    real = (keys >= 0).unsqueeze(-1)
    asked = (queries >= 0).unsqueeze(-1)
    head = heads.unsqueeze(1)
    key_part = torch.where(real, x_heads[head, keys.clamp(min=0)], 0)
    query_part = torch.where(asked, x_heads[head, queries.clamp(min=0)], 0)
    flags = torch.cat([real, ~real], dim=-1).to(x_heads.dtype)
    return torch.cat([key_part, query_part, flags], dim=-1)


@dataclass(frozen=True)
class Projections:
    """A single-head problem's weights on the token layout of `tokens`."""

    query: Tensor
    key: Tensor
    value: Tensor


def projections(head: HeadWeights, step: Step) -> Projections:
    """W^Q on x_query, W^K on x_key; the value reads flags (step 1) or W^V and `real` (step 2).

    Both steps write m + 2 columns: values in [0, m), weight on real keys at m, weight on
    known-score rows at m + 1.
    """
    m = head.query.shape[0]
    dtype = head.query.dtype
    query = torch.zeros(2 * m + 2, m, dtype=dtype)
    key = torch.zeros(2 * m + 2, m, dtype=dtype)
    value = torch.zeros(2 * m + 2, m + 2, dtype=dtype)
    query[m:2 * m] = head.query
    key[:m] = head.key
    value[2 * m, m] = 1
    if step is Step.NORMALIZER:
        value[2 * m + 1, m + 1] = 1
    else:
        value[:m, :m] = head.value
    return Projections(query=query, key=key, value=value)


def _seen(keys: Tensor, causal: bool) -> tuple[Tensor, Tensor]:
    """How many real keys and known-score rows each row's query sees."""
    real = (keys >= 0).to(torch.int64)
    if causal:
        return real.cumsum(1), (1 - real).cumsum(1)
    total = real.sum(dim=1, keepdim=True)
    return total.expand_as(keys), (keys.shape[1] - total).expand_as(keys)


def _check_range(weight: Tensor, what: str) -> None:
    tiny = torch.finfo(weight.dtype).tiny
    if not bool((weight >= tiny).all()):                  # NaN fails this test too
        raise RunFailure(
            f"{what} fell below the smallest normal {weight.dtype} number: the attention "
            "scores are too far from the synthetic token's known score 0 for this precision "
            "(about +-80 in float32, +-700 in float64); use float64 or smaller scores")


def read_normalizer(output: Tensor, keys: Tensor, queries: Tensor, causal: bool) -> Tensor:
    """Step 1 readout: log A per row (R x n); -inf where the row's query sees no real key."""
    m = output.shape[-1] - 2
    real_seen, known_seen = _seen(keys, causal)
    filled = (queries >= 0) & (real_seen > 0)
    on_real, on_known = output[..., m], output[..., m + 1]
    _check_range(on_real[filled], "the weight on real keys")
    _check_range(on_known[filled], "the weight on the synthetic token")
    log_a = known_seen.to(output.dtype).log() + on_real.log() - on_known.log()
    return torch.where(filled, log_a, float("-inf"))


def read_values(output: Tensor, keys: Tensor, queries: Tensor, causal: bool) -> Tensor:
    """Step 2 readout: B / A per row (R x n x m); zero where the query sees no real key."""
    m = output.shape[-1] - 2
    real_seen, _ = _seen(keys, causal)
    filled = (queries >= 0) & (real_seen > 0)
    on_real = output[..., m:m + 1]
    _check_range(on_real[filled], "the weight on real keys")
    return torch.where(filled.unsqueeze(-1), output[..., :m] / on_real, 0)
