"""The assumptions and the guarantee of Theorem 4.1, checked on a given input.

Theorem 4.1 assumes constants C, D > 0 with, for every query i and key j of every head,
    1/C <= a_ij = exp(<q_i, k_j>) <= C   and   D N max_j ||b_ij|| <= ||sum_j b_ij||,
where b_ij = a_ij v_j. `head_constants` returns the smallest such C and the largest such D
of one head. It looks at all N^2 pairs (in row chunks, in float64): it is a check of the
hypothesis for reporting, run outside the simulation, and makes no oracle calls.

The proof (Appendix C.1) then gives, with samples of n_s keys per query:
* step 1: with probability >= 0.95 every normalizer estimate is within a factor 1 +- eta,
      eta = C^2 sqrt(ln(40 N) / (2 n_s))                  (the proof's eps/4);
* the output: with probability >= 0.9 every row is within relative error eps,
      eps = max( sqrt(8 C^4 ln(40 N) / n_s), sqrt(128 ln(40 d N) / (n_s D^2)) ),
  d the value dimension: the smallest eps for which the proof's two conditions on M hold.
The constants are the paper's; they are loose, so eps is often above 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import exp, log, sqrt

import torch
from torch import Tensor

from vm.attention.chunked.model import HeadWeights, LargeTransformer
from vm.attention.chunked.sampled import block_sizes
from vm.attention.chunked.simulate import check_sizes


@dataclass(frozen=True)
class AverageCaseCheck:
    """C and D of the input, the smallest sample, and the bounds they give."""

    c: float
    d: float
    sample: int
    output_bound: float
    normalizer_bound: float


def head_constants(x_head: Tensor, head: HeadWeights, row_chunk: int = 1024,
                   progress: Callable[[int], None] | None = None) -> tuple[float, float]:
    """The smallest C and the largest D of Theorem 4.1 for one head; `progress` is told the
    rows done after each chunk (N^2 work: twice the direct attention's time). One chunk of
    scores is held, worked on in place: four copies took 2 GiB at N = 65536."""
    if not (isinstance(row_chunk, int) and row_chunk >= 1):  # -1 checked no rows: C 1, D inf
        raise ValueError(f"row_chunk must be a whole number of rows, at least 1, got "
                         f"{row_chunk!r}")
    x_head = x_head.double()
    q, k, v = x_head @ head.query.double(), x_head @ head.key.double(), x_head @ head.value.double()
    n = len(x_head)
    value_norms = torch.linalg.vector_norm(v, dim=1)
    largest_score, ratio = 0.0, float("inf")
    for start in range(0, n, row_chunk):
        scores = q[start:start + row_chunk] @ k.T
        low, high = scores.aminmax()
        largest_score = max(largest_score, -float(low), float(high))
        shifted = scores.sub_(scores.amax(dim=1, keepdim=True)).exp_()
        total = torch.linalg.vector_norm(shifted @ v, dim=1)
        largest = shifted.mul_(value_norms).amax(dim=1)
        ratio = min(ratio, float((total / (n * largest)).min()))
        del scores, shifted  # before the next chunk's scores are formed
        if progress is not None:
            progress(min(n, start + row_chunk))
    return (exp(largest_score) if largest_score < 700 else float("inf")), ratio


def bounds(c: float, d: float, n: int, sample: int, value_dim: int) -> tuple[float, float]:
    """(eps, eta) of the module docstring; inf where C^4 is beyond float range (C is at most
    e^700: `c ** 4` raised OverflowError, the product goes to inf)."""
    c_squared = c * c
    normalizer = c_squared * sqrt(log(40 * n) / (2 * sample))
    if d <= 0:
        return float("inf"), normalizer
    output = max(sqrt(8 * c_squared * c_squared * log(40 * n) / sample),
                 sqrt(128 * log(40 * value_dim * n) / (sample * d ** 2)))
    return output, normalizer


def check_first_layer(model: LargeTransformer, x: Tensor, max_length: int,
                      progress: Callable[[int], None] | None = None) -> AverageCaseCheck:
    """C (largest) and D (smallest) over the heads of the first layer, and their bounds;
    `progress` is told the rows done, over every head, after each chunk. M is checked as
    the simulation checks it (M = 1 divided by zero, M = 2.5 made samples of one key)."""
    check_sizes("sampled", len(x), max_length, model.mask)
    constants = [head_constants(model.head_input(x, h), head, progress=None if progress is None
                                else lambda rows, base=h * len(x): progress(base + rows))
                 for h, head in enumerate(model.layers[0])]
    c = max(value for value, _ in constants)
    d = min(value for _, value in constants)
    sample = min(block_sizes(len(x), max_length))
    output_bound, normalizer_bound = bounds(c, d, len(x), sample, model.head_dim)
    return AverageCaseCheck(c=c, d=d, sample=sample, output_bound=output_bound,
                            normalizer_bound=normalizer_bound)
