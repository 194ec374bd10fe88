"""The small transformer oracle O: the only place where attention is evaluated.

Each layer has the form of Eq. (1a) of "Looped Transformers as Programmable Computers",
written for row tokens (X is n x D, one token per row):

    X <- X + sum_h softmax(mask((X Wq_h)(X Wk_h)^T)) (X Wv_h)

with no temperature (lambda = 1) and the ReLU part of Eq. (1b) set to zero. Head h's value
matrix is the D x D matrix V^h of Eq. (1a); it is stored as its only non-zero column block:
`value` (D x o) placed at columns [target, target + o). That is what lets one oracle with L'
layers and H' heads run H'L' independent single-head problems (Lemma 3.3): each head reads
its own columns and writes its own fresh columns, and the residual carries everything else
through the later layers unchanged.

The oracle refuses sequences longer than its length limit M and counts its calls. A batch
of B sequences (tokens B x n x D, weights with an optional leading B) is B independent calls,
evaluated together only to save interpreter overhead, and counts as B calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


class OracleInputTooLong(ValueError):
    """A caller tried to feed the oracle more tokens than its length limit M."""


@dataclass(frozen=True)
class OracleHead:
    """One attention head of an oracle layer (see the module docstring for `target`)."""

    query: Tensor
    key: Tensor
    value: Tensor
    target: int


class AttentionOracle:
    """A small transformer with `layers` layers of `heads` heads and input length at most M."""

    def __init__(self, max_length: int, heads: int = 1, layers: int = 1,
                 causal: bool = False) -> None:
        if max_length < 1 or heads < 1 or layers < 1:
            raise ValueError("oracle length, heads and layers must be positive")
        self.max_length, self.heads, self.layers, self.causal = max_length, heads, layers, causal
        self.calls = 0
        self.progress: Callable[[int], None] | None = None
        """Told the calls made after each call: a long simulation's progress and time limit."""
        self._masks: dict[int, Tensor] = {}

    def __call__(self, tokens: Tensor, weights: Sequence[Sequence[OracleHead]]) -> Tensor:
        """Run the oracle on `tokens` (n x D, or B x n x D for B calls); weights[l][h] is head h
        of layer l."""
        n = tokens.shape[-2]
        if n > self.max_length:
            raise OracleInputTooLong(
                f"oracle input has {n} tokens, more than its length limit M={self.max_length}")
        if n == 0:
            raise ValueError("oracle input is empty")
        if len(weights) > self.layers or any(len(layer) > self.heads for layer in weights):
            raise ValueError(f"oracle has {self.layers} layers of {self.heads} heads; got "
                             f"{[len(layer) for layer in weights]} heads per layer")
        self.calls += tokens.shape[0] if tokens.dim() == 3 else 1
        if self.progress is not None:
            self.progress(self.calls)
        x = tokens
        for layer in weights:
            update = torch.zeros_like(x)
            for head in layer:
                scores = (x @ head.query) @ (x @ head.key).transpose(-1, -2)
                if self.causal:
                    scores.masked_fill_(self._future(n), float("-inf"))
                columns = slice(head.target, head.target + head.value.shape[-1])
                update[..., columns] += torch.softmax(scores, dim=-1) @ (x @ head.value)
            x = x + update
        return x

    def _future(self, n: int) -> Tensor:
        """The causal mask: entry (i, j) is True where key j comes after query i."""
        if n not in self._masks:
            self._masks[n] = torch.ones(n, n, dtype=torch.bool).triu(1)
        return self._masks[n]
