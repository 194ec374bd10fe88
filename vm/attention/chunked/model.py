"""The large transformer that the small oracle simulates (Definitions 2.1-2.5 of the paper).

It has L layers of H softmax attention heads. Head h of a layer reads the columns
D_h = [h*m, (h+1)*m) of the layer input with its own m x m query, key and value
matrices; the head outputs are concatenated into the next layer's input. The layer
MLP is the identity, as the paper assumes without loss of generality (Lemma B.1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from vm.common.errors import InputError

MASK_KINDS = ("none", "causal", "window", "sink")


@dataclass(frozen=True)
class Mask:
    """Which keys each query sees: all, causal (Def. 2.3), window (Def. 2.4), sink (Def. 2.5).

    `window` is r (query i sees keys i-r+1..i); `sinks` is s (it also sees keys 0..s-1).
    Positions are 0-based here; the paper counts from 1.
    """

    kind: str = "none"
    window: int = 0
    sinks: int = 0

    def __post_init__(self) -> None:
        """Mask("bogus") was taken as a sink mask, a negative window as one seeing nothing."""
        if self.kind not in MASK_KINDS:
            raise InputError(f"unknown mask kind {self.kind!r} (choose from "
                             f"{', '.join(MASK_KINDS)})")
        if self.window < 0 or self.sinks < 0:
            raise InputError(f"window and sinks must be at least 0, got {self.window} and "
                             f"{self.sinks}")

    def visible(self, queries: Tensor, keys: Tensor) -> Tensor:
        """Boolean matrix: entry (a, b) says whether query queries[a] may see key keys[b]."""
        i, j = queries[:, None], keys[None, :]
        if self.kind == "none":
            return torch.ones(len(queries), len(keys), dtype=torch.bool)
        causal = j <= i
        if self.kind == "causal":
            return causal
        recent = j > i - self.window
        if self.kind == "window":
            return causal & recent
        return causal & (recent | (j < self.sinks))


@dataclass(frozen=True)
class HeadWeights:
    """Query, key and value matrices of one head, each m x m (the paper's W_h^Q, W_h^K, W_h^V)."""

    query: Tensor
    key: Tensor
    value: Tensor


@dataclass(frozen=True)
class LargeTransformer:
    """L layers of H heads; `layers[l][h]` are the weights of head h in layer l."""

    layers: tuple[tuple[HeadWeights, ...], ...]
    mask: Mask

    def __post_init__(self) -> None:
        """Every layer reads the previous one's H*m columns, so all layers need the same H
        heads of m x m weights in one floating dtype: a ragged model failed deep in torch
        (or as a precision failure), an integer one in torch.finfo."""
        heads = [head for layer in self.layers for head in layer]
        if not heads or any(len(layer) != len(self.layers[0]) for layer in self.layers):
            raise InputError(f"a large transformer needs at least one layer and the same "
                             f"number of heads in each, got {[len(l) for l in self.layers]}")
        m, dtype = heads[0].query.shape[0], heads[0].query.dtype
        for head in heads:
            for weight in (head.query, head.key, head.value):
                if (tuple(weight.shape) != (m, m) or weight.dtype != dtype
                        or not dtype.is_floating_point):
                    raise InputError(f"every head's query, key and value must be m x m (m = "
                                     f"{m}, the first query's rows) of one floating dtype "
                                     f"({dtype}, the first query's); got "
                                     f"{tuple(weight.shape)} of {weight.dtype}")
                if not bool(torch.isfinite(weight).all()):
                    raise InputError("a head's weights have entries that are not finite")

    @property
    def heads(self) -> int:
        return len(self.layers[0])

    @property
    def head_dim(self) -> int:
        return self.layers[0][0].query.shape[0]

    @property
    def dim(self) -> int:
        return self.heads * self.head_dim

    def to(self, dtype: torch.dtype) -> LargeTransformer:
        """The same transformer with its weights converted to `dtype`."""
        return LargeTransformer(
            layers=tuple(tuple(HeadWeights(h.query.to(dtype), h.key.to(dtype), h.value.to(dtype))
                               for h in layer) for layer in self.layers),
            mask=self.mask)

    def head_input(self, x: Tensor, head: int) -> Tensor:
        """The columns D_h of a layer input that head `head` reads."""
        m = self.head_dim
        return x[:, head * m:(head + 1) * m]


def random_instance(n: int, heads: int, layers: int, head_dim: int, mask: Mask,
                    dtype: torch.dtype, seed: int,
                    score_scale: float = 1.0) -> tuple[Tensor, LargeTransformer]:
    """A random input X (n x H*m) and random weights whose first-layer scores have std ~score_scale.

    Entries of X are standard normal; W^Q and W^K entries have variance score_scale/m^1.5,
    so <q_i, k_j> = x_i W^Q (W^K)^T x_j^T has variance about score_scale^2. W^V is the
    identity plus noise, so values keep the size of the inputs from layer to layer.
    """
    if min(n, heads, layers, head_dim) < 1:  # head_dim 0 divided by zero, n -1 in torch
        raise ValueError(f"n, heads, layers and head_dim must be at least 1, got {n}, "
                         f"{heads}, {layers} and {head_dim}")
    if not (math.isfinite(score_scale) and score_scale >= 0):  # -1 made complex weights
        raise ValueError(f"score_scale must be finite and at least 0, got {score_scale}")
    generator = torch.Generator().manual_seed(seed)
    m = head_dim

    def draw(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    spread = (score_scale / m ** 1.5) ** 0.5
    model_layers = tuple(
        tuple(
            HeadWeights(
                query=(draw(m, m) * spread).to(dtype),
                key=(draw(m, m) * spread).to(dtype),
                value=(torch.eye(m, dtype=torch.float64) + draw(m, m) / m ** 0.5).to(dtype),
            )
            for _ in range(heads)
        )
        for _ in range(layers)
    )
    x = draw(n, heads * m).to(dtype)
    return x, LargeTransformer(layers=model_layers, mask=mask)
