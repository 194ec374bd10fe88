"""Hardcoded weights of a looped transformer, in float64 numpy, as exported.

These containers are the single source of truth: the torch modules cast them
to the run's dtype/device, the exporter writes them, and tests read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from vm.transformer.modes import mask_matrix


@dataclass(frozen=True)
class HeadWeights:
    """One attention head of Eq. (1a): V X softmax(lam (K X)^T (Q X)) over keys."""

    Q: np.ndarray  # (r, D)
    K: np.ndarray  # (r, D)
    V: np.ndarray  # (D, D)
    lam: float
    role: str

    @cached_property
    def written_rows(self) -> np.ndarray:
        """Rows of X this head can change (non-zero rows of V). Kept, and found without
        abs().sum()'s (D, D) copies: the transformer's layers and the FLEQ active evaluation
        asked 718 times for 137 heads of 2118 x 2118, 7.5 s of a 20 s build."""
        return np.flatnonzero(self.V.any(axis=1))


@dataclass(frozen=True)
class FeedForwardWeights:
    """The ReLU layer of Eq. (1b): A + W2 relu(W1 A + b1 1^T) + b2 1^T."""

    W1: np.ndarray  # (W, D)
    b1: np.ndarray  # (W,)
    W2: np.ndarray  # (D, W)
    b2: np.ndarray  # (D,)

    @property
    def width(self) -> int:
        return self.W1.shape[0]

    @property
    def written_rows(self) -> np.ndarray:
        return np.flatnonzero(np.abs(self.W2).sum(axis=1) + np.abs(self.b2))


@dataclass(frozen=True)
class LayerWeights:
    """A transformer layer: attention heads (possibly none), then a ReLU layer."""

    heads: tuple[HeadWeights, ...]
    ffn: FeedForwardWeights
    role: str

    def arrays(self) -> tuple[np.ndarray, ...]:
        """Every matrix and bias of the layer (the heads' Q, K, V, then W1, b1, W2, b2)."""
        ffn = self.ffn
        return (*(m for head in self.heads for m in (head.Q, head.K, head.V)),
                ffn.W1, ffn.b1, ffn.W2, ffn.b2)

    def parameter_count(self) -> int:
        """Entries of the layer's matrices and biases (temperatures included)."""
        return sum(array.size for array in self.arrays()) + len(self.heads)


@dataclass(frozen=True)
class MachineWeights:
    """All layers of one looped transformer, plus the scratch columns of its geometry-only
    attention mask (`mask`; None: dense attention)."""

    layers: tuple[LayerWeights, ...]
    rows: int
    columns: int
    mask_scratch: int | None = None
    meta: dict = field(default_factory=dict)

    @cached_property
    def mask(self) -> np.ndarray | None:
        """`mask[i, j]` is True where key column i may be attended by query column j
        (`mask_matrix`), or None. Built when first asked (the export reads it), not with the
        weights: columns x columns booleans, feeding 60,000 input bytes to the image REPL
        spent 7 s and 3.6 GB on a mask nothing read, and every cached machine kept one."""
        if self.mask_scratch is None:
            return None
        return mask_matrix(self.columns, self.mask_scratch)

    @property
    def has_mask(self) -> bool:
        """Whether `mask` is a matrix, known without building it (4 GB at 65,536 columns)."""
        return self.mask_scratch is not None

    @property
    def heads(self) -> list[int]:
        return [len(layer.heads) for layer in self.layers]
