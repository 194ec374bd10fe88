"""The transformer layer of Eq. (1a)/(1b) as batched torch modules.

X has shape (batch, rows D, columns n). Each head adds V X softmax(lam (KX)^T (QX)),
the softmax taken over keys for every query column (torch's softmax subtracts
the max, so it is stable); then the ReLU layer adds W2 relu(W1 A + b1) + b2 with
biases shared by all columns. Nothing else happens between layers.

For speed the arithmetic is rearranged, never changed: a layer's heads run as
one batched product (Q, K, V stacked; lam folded into Q), a ReLU layer reads
only the rows its W1 uses and writes only the rows its W2/b2 change.

Attention is `dense` (every query sees every key, cost n^2) or `masked`: the
geometry-only mask of the paper's Section 5.2 remark, where the first
`scratch` columns attend globally and every other column attends to itself
and the scratchpad (`mask_matrix`; exported with the weights). Up to
`MASK_AS_BIAS_MAX` columns the mask is applied as a -inf bias on dense
scores; beyond, a linear-cost path computes the same softmax over only the
allowed keys, so a pass costs O(n * scratch).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch
from torch import nn

from vm.weights import FeedForwardWeights, HeadWeights, LayerWeights, MachineWeights

ATTENTION_MODES = ("dense", "masked")
MASK_AS_BIAS_MAX = 128
Observer = Callable[[int, str, torch.Tensor], None]
"""Called with (layer index, "attention" | "ffn", X after that sublayer); observes only."""


def configure_device(device: torch.device) -> None:
    """Keep CUDA matmuls in full precision: TF32 would make results drift."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


@contextmanager
def flush_denormals() -> Iterator[None]:
    """Flush subnormal floats to zero while the machine runs.

    Off-match softmax weights such as e^(-82) sit at the bottom of float32's
    range; subnormal arithmetic is 10-100x slower on x86 CPUs and those
    weights are below any value that can change a result. torch has no getter
    for this flag, so it is restored to its default (off) afterwards.
    """
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


SINGLE_THREAD_MAX_COLUMNS = 1 << 15
"""Up to this many columns in a batch (batch x n), one CPU thread is faster:
the products are too small to split, and idle OpenMP threads spin."""


@contextmanager
def cpu_threads(batch_columns: int, requested: int | None = None) -> Iterator[None]:
    """Use `requested` torch CPU threads (or a count suited to the work) while the
    machine runs, then restore the caller's setting."""
    previous = torch.get_num_threads()
    wanted = requested or (1 if batch_columns <= SINGLE_THREAD_MAX_COLUMNS else previous)
    torch.set_num_threads(wanted)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def mask_matrix(columns: int, scratch: int) -> np.ndarray:
    """allowed[i, j]: key i may be attended by query j (the `masked` mode)."""
    allowed = np.eye(columns, dtype=bool)
    allowed[:scratch, :] = True
    allowed[:, :scratch] = True
    return allowed


def _rows(rows: np.ndarray) -> slice | torch.Tensor:
    """A slice when the rows are contiguous (a view, cheaper), else an index tensor."""
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return torch.as_tensor(rows, dtype=torch.long)


def _add_rows(X: torch.Tensor, rows: slice | torch.Tensor, update: torch.Tensor) -> None:
    """X[rows] += update, in place (X in the internal (rows, batch, n) layout)."""
    if isinstance(rows, slice):
        X[rows] += update
    else:
        X.index_add_(0, rows, update)


class Attention(nn.Module):
    """All heads of one layer; every head reads the same X."""

    def __init__(self, heads: tuple[HeadWeights, ...], dtype: torch.dtype) -> None:
        super().__init__()
        self.count = len(heads)
        written = np.unique(np.concatenate([h.written_rows for h in heads]))
        self.rows = _rows(written)
        self.r = max(h.Q.shape[0] for h in heads)
        self.width = 2 * self.r + len(written)
        stacked = []
        for head in heads:
            padding = np.zeros((self.r - head.Q.shape[0], head.Q.shape[1]))
            stacked.append(np.concatenate([head.lam * head.Q, padding, head.K, padding,
                                           head.V[written]]))
        self.register_buffer("QKV", torch.as_tensor(np.concatenate(stacked), dtype=dtype))

    def forward(self, X: torch.Tensor, mode: str, scratch: int,
                bias: torch.Tensor | None) -> torch.Tensor:
        """Sum of the heads' outputs on the written rows, shape (R, batch, n)."""
        rows, batch, n = X.shape
        projected = (self.QKV @ X.view(rows, batch * n)).view(self.count, self.width, batch, n)
        projected = projected.permute(2, 0, 1, 3).reshape(batch * self.count, self.width, n)
        queries, keys = projected[:, :self.r], projected[:, self.r:2 * self.r]
        values = projected[:, 2 * self.r:]
        if mode == "dense" or bias is not None:
            scores = queries.transpose(1, 2) @ keys
            if bias is not None:
                scores += bias
            out = values @ torch.softmax(scores, dim=2).transpose(1, 2)
        else:
            out = self._masked(queries, keys, values, scratch)
        out = out.view(batch, self.count, -1, n)
        out = out.sum(dim=1) if self.count > 1 else out[:, 0]
        return out.transpose(0, 1)

    def weights(self, X: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        """Every head's attention matrix for X (rows, 1, n): (heads, queries, keys)."""
        rows, _, n = X.shape
        projected = (self.QKV @ X.view(rows, n)).view(self.count, self.width, n)
        queries, keys = projected[:, :self.r], projected[:, self.r:2 * self.r]
        scores = queries.transpose(1, 2) @ keys
        if allowed is not None:
            scores = scores.masked_fill(~allowed.T, float("-inf"))
        return torch.softmax(scores, dim=2)

    @staticmethod
    def _masked(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                scratch: int) -> torch.Tensor:
        """Scratch queries over all keys; other queries over the scratch keys and themselves.

        Scores are laid out (query, key) so each softmax runs over the last,
        contiguous dimension.
        """
        global_weights = torch.softmax(queries[..., :scratch].transpose(1, 2) @ keys, dim=2)
        local_scores = torch.cat([
            queries[..., scratch:].transpose(1, 2) @ keys[..., :scratch],
            (keys[..., scratch:] * queries[..., scratch:]).sum(dim=1)[..., None],
        ], dim=2)
        local_weights = torch.softmax(local_scores, dim=2)
        local = (values[..., :scratch] @ local_weights[..., :scratch].transpose(1, 2)
                 + values[..., scratch:] * local_weights[..., scratch][:, None])
        return torch.cat([values @ global_weights.transpose(1, 2), local], dim=-1)


class FeedForward(nn.Module):
    """The ReLU layer of Eq. (1b), computed on the rows it reads and writes."""

    def __init__(self, weights: FeedForwardWeights, dtype: torch.dtype) -> None:
        super().__init__()
        read = np.flatnonzero(np.abs(weights.W1).sum(axis=0))
        written = weights.written_rows
        self.empty = weights.width == 0 or len(written) == 0
        self.read, self.rows = _rows(read), _rows(written)
        self.register_buffer("W1", torch.as_tensor(weights.W1[:, read], dtype=dtype))
        self.register_buffer("b1", torch.as_tensor(weights.b1[:, None], dtype=dtype))
        self.register_buffer("W2", torch.as_tensor(weights.W2[written], dtype=dtype))
        self.has_b2 = bool(np.any(weights.b2))
        self.register_buffer("b2", torch.as_tensor(weights.b2[written, None], dtype=dtype))

    def forward(self, A: torch.Tensor) -> None:
        """A += W2 relu(W1 A + b1) + b2, in place (A in the (rows, batch, n) layout)."""
        if self.empty:
            return
        flat = A.view(A.shape[0], -1)
        inputs = flat[self.read] if isinstance(self.read, slice) else flat.index_select(0,
                                                                                     self.read)
        hidden = torch.addmm(self.b1, self.W1, inputs).relu_()
        if isinstance(self.rows, slice) and not self.has_b2:
            flat[self.rows].addmm_(self.W2, hidden)
            return
        update = self.W2 @ hidden
        if self.has_b2:
            update += self.b2
        _add_rows(flat, self.rows, update)


class TransformerLayer(nn.Module):
    """Attention followed by the ReLU layer, updating X in place."""

    def __init__(self, weights: LayerWeights, dtype: torch.dtype) -> None:
        super().__init__()
        self.role = weights.role
        self.head_roles = [head.role for head in weights.heads]
        self.attention = Attention(weights.heads, dtype) if weights.heads else None
        self.ffn = FeedForward(weights.ffn, dtype)

    def attend(self, X: torch.Tensor, mode: str, scratch: int,
               bias: torch.Tensor | None) -> None:
        if self.attention is not None:
            _add_rows(X, self.attention.rows, self.attention(X, mode, scratch, bias))


class LoopedTransformer(nn.Module):
    """TF of Algorithm 1: one application executes one instruction."""

    def __init__(self, weights: MachineWeights, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu", attention: str = "masked",
                 scratch: int = 1) -> None:
        super().__init__()
        if attention not in ATTENTION_MODES:
            raise ValueError(f"attention must be one of {ATTENTION_MODES}, got {attention!r}")
        self.attention, self.scratch = attention, scratch
        self.layers = nn.ModuleList(TransformerLayer(layer, dtype) for layer in weights.layers)
        use_bias = attention == "masked" and weights.columns <= MASK_AS_BIAS_MAX
        bias = None
        if use_bias:
            allowed = mask_matrix(weights.columns, scratch)
            bias = torch.as_tensor(np.where(allowed, 0.0, -np.inf).T, dtype=dtype)
        self.register_buffer("mask_bias", bias)
        device = torch.device(device)
        configure_device(device)
        self.to(device)

    def forward(self, X: torch.Tensor, observer: Observer | None = None) -> torch.Tensor:
        """One pass on X of shape (batch, rows, n); returns a new tensor."""
        internal = to_internal(X)
        self.step_(internal, observer)
        return from_internal(internal)

    def step_(self, X: torch.Tensor, observer: Observer | None = None) -> None:
        """One pass in place on X in the internal (rows, batch, n) layout.

        The observer sees X in the public (batch, rows, n) layout (a view).
        """
        for index, layer in enumerate(self.layers):
            layer.attend(X, self.attention, self.scratch, self.mask_bias)
            if observer is not None:
                observer(index, "attention", from_internal(X))
            layer.ffn(X)
            if observer is not None:
                observer(index, "ffn", from_internal(X))


@dataclass
class LayerTrace:
    """One layer of one pass, for pictures: X (rows, n) before, after attention, after the
    ReLU layer, and each head's attention matrix (queries x keys, rows sum to 1)."""

    role: str
    head_roles: list[str]
    before: torch.Tensor
    attention: torch.Tensor
    after_attention: torch.Tensor
    after: torch.Tensor


def trace_pass(model: LoopedTransformer, X: torch.Tensor) -> list[LayerTrace]:
    """Run one pass on a single punchcard X (rows, n), recording every layer."""
    internal = to_internal(X[None])
    allowed = None
    if model.attention == "masked":
        allowed = torch.as_tensor(mask_matrix(internal.shape[2], model.scratch),
                                  device=internal.device)
    records = []
    with torch.inference_mode():
        for layer in model.layers:
            before = internal[:, 0].clone()
            if layer.attention is not None:
                maps = layer.attention.weights(internal, allowed)
                roles = layer.head_roles
            else:
                maps = torch.zeros((0, internal.shape[2], internal.shape[2]))
                roles = []
            layer.attend(internal, model.attention, model.scratch, model.mask_bias)
            middle = internal[:, 0].clone()
            layer.ffn(internal)
            records.append(LayerTrace(layer.role, roles, before, maps, middle,
                                      internal[:, 0].clone()))
    return records


def to_internal(X: torch.Tensor) -> torch.Tensor:
    """(batch, rows, n) -> a new contiguous (rows, batch, n) tensor, the layout layers
    work in: every projection becomes one 2-D product over batch x columns.
    Always a copy (a plain `.contiguous()` would alias X when batch is 1)."""
    return X.transpose(0, 1).clone(memory_format=torch.contiguous_format)


def from_internal(X: torch.Tensor) -> torch.Tensor:
    """(rows, batch, n) -> a (batch, rows, n) view."""
    return X.transpose(0, 1)
