"""The transformer layer of Eq. (1a)/(1b) as batched torch modules.

X has shape (batch, rows D, columns n). Each head adds V X softmax(lam (KX)^T (QX)),
the softmax taken over keys for every query column (torch's softmax subtracts
the max, so it is stable); then the ReLU layer adds W2 relu(W1 A + b1) + b2 with
biases shared by all columns. Nothing else happens between layers.

For speed the arithmetic is rearranged, never changed: a layer's heads run as
a few batched products (heads of equal shape grouped, Q, K, V stacked, lam
folded into Q), each head's value product covers only the rows it writes,
projections read only the rows some head uses, and on a CPU the heads run in
chunks whose scores stay in cache; a ReLU layer reads only the rows its W1
uses, writes only the rows its W2/b2 change, and on a CPU multiplies sparse
matrices in CSR form wherever that pays; the units reading a gate row (FLEQ's
blocks) run as their own part, every part from the layer's input. Results
differ from a head-by-head, dense evaluation only in summation order.

Attention is `dense` (every query sees every key, cost n^2) or `masked`: the
geometry-only mask of the paper's Section 5.2 remark, where the first
`scratch` columns attend globally and every other column attends to itself
and the scratchpad (`mask_matrix`; exported with the weights). Up to
`MASK_AS_BIAS_MAX` columns the mask is applied as a -inf bias on dense
scores, added within the score product; beyond, a linear-cost path computes the
same softmax over only the allowed keys, so a pass costs O(n * scratch).
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import torch
from torch import nn

from vm.common.cache import Checkpoint
from vm.transformer.modes import ATTENTION_MODES, mask_matrix
from vm.transformer.sampling import ReadNoise
from vm.transformer.weights import FeedForwardWeights, HeadWeights, LayerWeights, MachineWeights

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


def _rows(rows: np.ndarray) -> slice | torch.Tensor:
    """A slice when the rows are contiguous (a view, cheaper), else an index tensor."""
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return torch.as_tensor(rows, dtype=torch.long)


class _RowIndexed(nn.Module):
    """A module holding row selections (`_rows`) as plain attributes, read in every pass
    without nn.Module's slower buffer lookup, that still follow .to(device) like buffers
    (index_select and index_add_ need the index on X's device)."""

    def _set_rows(self, name: str, rows: np.ndarray) -> None:
        setattr(self, name, _rows(rows))
        self._row_names = getattr(self, "_row_names", ()) + (name,)

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
               ) -> "_RowIndexed":
        super()._apply(fn, recurse)
        for name in getattr(self, "_row_names", ()):
            if isinstance(getattr(self, name), torch.Tensor):
                setattr(self, name, fn(getattr(self, name)))
        return self


def _take_rows(X: torch.Tensor, rows: slice | torch.Tensor) -> torch.Tensor:
    """X[rows] (a view for a slice, a gathered copy for an index tensor)."""
    return X[rows] if isinstance(rows, slice) else X.index_select(0, rows)


def _add_rows(X: torch.Tensor, rows: slice | torch.Tensor, update: torch.Tensor) -> None:
    """X[rows] += update, in place (X in the internal (rows, batch, n) layout): add_ on the
    view, not `+=`, whose item assignment would copy the view onto itself (a kernel more)."""
    if isinstance(rows, slice):
        X[rows].add_(update)
    else:
        X.index_add_(0, rows, update)


@dataclass(frozen=True)
class _HeadGroup:
    """Heads of one layer with the same query width r and written-row count k.

    Their stacked [lam Q; K; V restricted to the head's own written rows]
    (`width` = 2r + k rows each) sit in rows `start:stop` of the layer's
    projection; `heads` are their indices in the layer.
    """

    heads: tuple[int, ...]
    r: int
    k: int
    start: int
    count: int = field(init=False)
    width: int = field(init=False)
    stop: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", len(self.heads))
        object.__setattr__(self, "width", 2 * self.r + self.k)
        object.__setattr__(self, "stop", self.start + self.count * self.width)


CACHED_SCORES_BYTES = 1 << 20
"""On a CPU, heads are run in chunks whose score matrices take about this much memory, so
scores, softmax and value product stay in a core's L2 cache (measured 4-7x faster on a
float64 FLEQ layer of 80 heads at n = 471 than one batch of all heads)."""
DEVICE_SCORES_BYTES = 1 << 30
"""On a GPU, chunks of heads (of all programs of a batch) whose score matrices take at most
this much memory: a group runs at once up to large batches (a calculator batch of 1,000
takes 0.8 GB), and a batch whose scores would not fit runs in chunks instead of failing
(inverse-d8: 78 MB of scores a program in its 68-head layer)."""


def _chunk_size(scores_per_head: int, X: torch.Tensor) -> int:
    """How many heads to run at once: about CACHED_SCORES_BYTES of scores on a CPU, at most
    DEVICE_SCORES_BYTES elsewhere."""
    budget = CACHED_SCORES_BYTES if X.device.type == "cpu" else DEVICE_SCORES_BYTES
    return max(1, budget // (scores_per_head * X.element_size()))


class Attention(_RowIndexed):
    """All heads of one layer; every head reads the same X.

    A head's value product covers only the rows that head writes, so a layer
    of many heads that each write a row or two costs what they write, not
    heads x all rows written. Heads are batched in groups of equal (r, k);
    the projection reads only the rows of X some head uses. Each head's output
    rows are then summed into the layer's written rows (a 0/1 matrix product
    when heads share rows, so results differ from a per-head sum at most by
    summation order: exact 0/1 moves stay bit-exact).
    """

    def __init__(self, heads: tuple[HeadWeights, ...], dtype: torch.dtype) -> None:
        super().__init__()
        self.count = len(heads)
        own_rows = [head.written_rows for head in heads]
        used = [np.flatnonzero(np.abs(head.Q).sum(axis=0) + np.abs(head.K).sum(axis=0)
                               + np.abs(head.V[rows]).sum(axis=0))
                for head, rows in zip(heads, own_rows)]
        read = np.unique(np.concatenate(used))
        if not len(read):
            read = np.zeros(1, dtype=int)
        self._set_rows("read", read)
        shapes: dict[tuple[int, int], list[int]] = {}
        for index, (head, rows) in enumerate(zip(heads, own_rows)):
            shapes.setdefault((head.Q.shape[0], len(rows)), []).append(index)
        stacked, targets, self.groups, start = [], [], [], 0
        for (r, k), members in shapes.items():
            for index in members:
                head = heads[index]
                stacked.append(np.concatenate([head.lam * head.Q, head.K,
                                               head.V[own_rows[index]]])[:, read])
                targets.append(own_rows[index])
            self.groups.append(_HeadGroup(tuple(members), r, k, start))
            start = self.groups[-1].stop
        self.writing_groups = [group for group in self.groups if group.k]
        self.register_buffer("QKV", torch.as_tensor(np.concatenate(stacked), dtype=dtype))
        self.register_buffer("lams", torch.as_tensor([head.lam for head in heads], dtype=dtype))
        target = np.concatenate(targets).astype(int)
        written = np.unique(target)
        self._set_rows("rows", written)
        reduce = None
        if len(written) < len(target) or np.any(target != written):
            reduce = torch.as_tensor(target[None, :] == written[:, None], dtype=dtype)
        self.register_buffer("reduce", reduce)

    def multiply_adds(self, score_columns: int) -> int:
        """Multiply-adds a column of X costs these heads: the stacked projection, the scores
        against `score_columns` keys (r each) and the value products (k each), and the sum
        into shared rows."""
        heads = sum(group.count * (group.r + group.k) * score_columns
                    for group in self.writing_groups)
        return self.QKV.numel() + heads + (0 if self.reduce is None else self.reduce.numel())

    def _project(self, X: torch.Tensor) -> torch.Tensor:
        """[lam Q; K; V_own] X for every head, stacked: (sum of widths, batch * n)."""
        return self.QKV @ _take_rows(X.view(X.shape[0], -1), self.read)

    @staticmethod
    def _split(projected: torch.Tensor, group: _HeadGroup, batch: int, n: int
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A group's queries, keys and values, each (batch * heads, width, n)."""
        part = projected[group.start:group.stop].view(group.count, group.width, batch, n)
        part = part.permute(2, 0, 1, 3).reshape(batch * group.count, group.width, n)
        r = group.r
        return part[:, :r], part[:, r:2 * r], part[:, 2 * r:]

    def forward(self, X: torch.Tensor, mode: str, scratch: int,
                bias: torch.Tensor | None, noise: ReadNoise | None = None) -> torch.Tensor:
        """Sum of the heads' outputs on the written rows, shape (R, batch, n).

        `noise`: stochastic reads (vm/transformer/sampling.py); None computes Eq. (1a)."""
        _, batch, n = X.shape
        projected = self._project(X)
        score_columns = n if mode == "dense" or bias is not None else 2 * scratch + 1
        size = _chunk_size(n * score_columns, X)
        outputs = []
        for group in self.writing_groups:
            queries, keys, values = self._split(projected, group, batch, n)
            heads = queries.shape[0]
            scales = None
            if noise is not None:
                scales = noise.scales(self.lams[torch.as_tensor(group.heads, device=X.device)],
                                      batch)
            if size >= heads:
                out = self._heads(queries, keys, values, mode, scratch, bias,
                                  self._noise(noise, scales, 0, heads, scratch, n))
            else:
                out = torch.cat([self._heads(queries[start:start + size], keys[start:start + size],
                                             values[start:start + size], mode, scratch, bias,
                                             self._noise(noise, scales, start,
                                                         min(heads, start + size), scratch, n))
                                 for start in range(0, heads, size)])
            outputs.append(out.view(batch, group.count * group.k, n).transpose(0, 1))
        if not outputs:
            return X.new_zeros((0, batch, n))
        out = torch.cat(outputs) if len(outputs) > 1 else outputs[0]
        if self.reduce is None:
            return out
        flat = out.reshape(out.shape[0], batch * n)
        return (self.reduce @ flat).view(self.reduce.shape[0], batch, n)

    def weights(self, X: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        """Every head's attention matrix for X (rows, 1, n): (heads, queries, keys)."""
        n = X.shape[2]
        projected = self._project(X)
        maps = torch.empty((self.count, n, n), dtype=X.dtype, device=X.device)
        for group in self.groups:
            queries, keys, _ = self._split(projected, group, 1, n)
            scores = queries.transpose(1, 2) @ keys
            if allowed is not None:
                scores = scores.masked_fill(~allowed.T, float("-inf"))
            heads = torch.as_tensor(group.heads, device=X.device)
            maps.index_copy_(0, heads, torch.softmax(scores, dim=2))
        return maps

    @staticmethod
    def _noise(noise: ReadNoise | None, scales: torch.Tensor | None, start: int, stop: int,
               scratch: int, n: int) -> torch.Tensor | None:
        """Gumbel noise for the scratch queries' scores of heads start:stop, scaled by each
        head's lam x temperature: (heads, scratch, n), or None for exact reads."""
        if noise is None:
            return None
        gumbel = noise.gumbel((stop - start, scratch, n), scales)
        return gumbel * scales[start:stop, None, None]

    @classmethod
    def _heads(cls, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mode: str,
               scratch: int, bias: torch.Tensor | None,
               noise: torch.Tensor | None = None) -> torch.Tensor:
        """Eq. (1a)'s V X softmax(...) for a batch of heads: (heads, k, n); `noise` is
        added to the scratch queries' scores (stochastic reads)."""
        if mode == "dense" or bias is not None:
            if bias is not None:  # the mask added in the product: x + 0 and x - inf are exact
                scores = torch.baddbmm(bias, queries.transpose(1, 2), keys)
            else:
                scores = queries.transpose(1, 2) @ keys
            if noise is not None:
                scores[:, :scratch] += noise
            return values @ torch.softmax(scores, dim=2).transpose(1, 2)
        return cls._masked(queries, keys, values, scratch, noise)

    @staticmethod
    def _masked(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                scratch: int, noise: torch.Tensor | None = None) -> torch.Tensor:
        """Scratch queries over all keys; other queries over the scratch keys and themselves.

        Scores are laid out (query, key) so each softmax runs over the last,
        contiguous dimension.
        """
        global_scores = queries[..., :scratch].transpose(1, 2) @ keys
        if noise is not None:
            global_scores += noise
        global_weights = torch.softmax(global_scores, dim=2)
        local_scores = torch.cat([
            queries[..., scratch:].transpose(1, 2) @ keys[..., :scratch],
            (keys[..., scratch:] * queries[..., scratch:]).sum(dim=1)[..., None],
        ], dim=2)
        local_weights = torch.softmax(local_scores, dim=2)
        local = (values[..., :scratch] @ local_weights[..., :scratch].transpose(1, 2)
                 + values[..., scratch:] * local_weights[..., scratch][:, None])
        return torch.cat([values @ global_weights.transpose(1, 2), local], dim=-1)


SPARSE_DENSITY_MAX = 0.01
SPARSE_SIZE_MIN = 1 << 14
"""On a CPU, a ReLU-layer matrix with at least SPARSE_SIZE_MIN entries of which at most
SPARSE_DENSITY_MAX are non-zero is multiplied in CSR form: FLEQ's last layer (clearing the
working rows, 699 x 324 at d = 8, 0.3 % non-zero) drops from 9 ms to 0.3 ms."""
SPARSE_WORK_DENSITY_MAX = 0.2
SPARSE_WORK_MIN = 1 << 18
"""A matrix up to SPARSE_WORK_DENSITY_MAX non-zero is also kept in CSR form when its dense
product over the machine's columns costs at least SPARSE_WORK_MIN multiply-adds (entries x
columns): measured in float64 on FLEQ's layers, CSR beats the dense product from about
there (inverse-d8's fetch layer, 314 x 78 at 2.6 % over 473 columns: 0.89 ms -> 0.14 ms),
and loses below it, where the per-call overhead dominates."""


def _sparse_pays(W: np.ndarray, columns: int) -> bool:
    """Is CSR the faster form for W times a (W's columns) x `columns` matrix?"""
    density = np.count_nonzero(W) / max(W.size, 1)
    return ((W.size >= SPARSE_SIZE_MIN and density <= SPARSE_DENSITY_MAX)
            or (W.size * columns >= SPARSE_WORK_MIN and density <= SPARSE_WORK_DENSITY_MAX))


def _matrix(W: np.ndarray, dtype: torch.dtype, sparse: bool, columns: int) -> torch.Tensor:
    """W as a torch tensor: CSR when `sparse` is allowed and CSR pays (`_sparse_pays`)."""
    dense = torch.as_tensor(W, dtype=dtype)
    if not sparse or not _sparse_pays(W, columns):
        return dense
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta state")
        return dense.to_sparse_csr()


class FeedForward(_RowIndexed):
    """The ReLU layer of Eq. (1b), computed on the rows it reads and writes.

    `sparse`: big, almost empty matrices may be kept in CSR form (for CPU runs, where they
    multiply `columns` columns); the products then skip the zero terms, which changes only
    the summation order. `gate_rows`: units that read one of these rows (FLEQ's block
    gates) run as one part per gate row, the others as one more part (`parts`,
    `part_gates`): every part reads the layer's input, then each adds its output, so a
    part's products are the same whether or not the other parts run, which lets
    vm/runtime/active_fleq.py skip the units of unselected blocks bit-exactly.
    """

    def __init__(self, weights: FeedForwardWeights, dtype: torch.dtype,
                 sparse: bool = False, columns: int = 1, gate_rows: tuple[int, ...] = ()
                 ) -> None:
        super().__init__()
        self.part_gates: list[int | None] = []
        self.parts = nn.ModuleList()
        units = _unit_parts(weights.W1, gate_rows)
        if len(units) > 1 or (units and units[0][0] is not None):
            no_b2 = np.zeros_like(weights.b2)
            for gate, members in units:
                self.part_gates.append(gate)
                self.parts.append(FeedForward(FeedForwardWeights(
                    weights.W1[members], weights.b1[members], weights.W2[:, members], no_b2),
                    dtype, sparse, columns))
        read = np.flatnonzero(np.abs(weights.W1).sum(axis=0))
        written = weights.written_rows
        self.empty = weights.width == 0 or len(written) == 0
        self._set_rows("read", read)
        self._set_rows("rows", written)
        self.has_b2 = bool(np.any(weights.b2))
        if self.parts:
            self._set_rows("b2_rows", np.flatnonzero(weights.b2))
            self.register_buffer("b2", torch.as_tensor(weights.b2[np.flatnonzero(weights.b2),
                                                                  None], dtype=dtype))
            return
        self.register_buffer("W1", _matrix(weights.W1[:, read], dtype, sparse, columns))
        self.register_buffer("b1", torch.as_tensor(weights.b1[:, None], dtype=dtype))
        self.register_buffer("W2", _matrix(weights.W2[written], dtype, sparse, columns))
        self.register_buffer("b2", torch.as_tensor(weights.b2[written, None], dtype=dtype))

    def forward(self, A: torch.Tensor, parts: list[int] | None = None) -> None:
        """A += W2 relu(W1 A + b1) + b2, in place (A in the (rows, batch, n) layout); with
        `parts`, only those parts' units (b2 always)."""
        if self.empty:
            return
        flat = A.view(A.shape[0], -1)
        if self.parts:
            chosen = range(len(self.parts)) if parts is None else parts
            updates = [(self.parts[i], self.parts[i].update(flat)) for i in chosen]
            for part, update in updates:
                if update is not None:
                    _add_rows(flat, part.rows, update)
            if self.has_b2:
                _add_rows(flat, self.b2_rows, self.b2)
            return
        hidden = torch.addmm(self.b1, self.W1, _take_rows(flat, self.read)).relu_()
        if isinstance(self.rows, slice) and not self.has_b2:
            flat[self.rows].addmm_(self.W2, hidden)
            return
        update = self.W2 @ hidden
        if self.has_b2:
            update += self.b2
        _add_rows(flat, self.rows, update)

    def multiply_adds(self) -> int:
        """Multiply-adds a column of A costs this layer: its matrices' entries (the non-zero
        ones of a CSR matrix), summed over its parts."""
        if self.parts:
            return sum(part.multiply_adds() for part in self.parts)
        if self.empty:
            return 0
        return sum(W.values().numel() if W.layout == torch.sparse_csr else W.numel()
                   for W in (self.W1, self.W2))

    def update(self, flat: torch.Tensor) -> torch.Tensor | None:
        """W2 relu(W1 A + b1) on the written rows of a part without b2, or None if empty."""
        if self.empty:
            return None
        return self.W2 @ torch.addmm(self.b1, self.W1, _take_rows(flat, self.read)).relu_()


def _unit_parts(W1: np.ndarray, gate_rows: tuple[int, ...]
                ) -> list[tuple[int | None, np.ndarray]]:
    """The units reading each gate row (by the first gate row a unit reads), then the units
    reading none (gate None); only non-empty parts, none at all without gate rows."""
    if not gate_rows or not W1.shape[0]:
        return []
    reads = W1[:, list(gate_rows)] != 0
    owner = np.where(reads.any(axis=1), reads.argmax(axis=1), -1)
    parts = [(int(gate_rows[g]), np.flatnonzero(owner == g)) for g in range(len(gate_rows))]
    parts.append((None, np.flatnonzero(owner == -1)))
    return [(gate, members) for gate, members in parts if len(members)]


def head_segments(roles: list[str]) -> list[tuple[int, ...]]:
    """The heads of a layer split by the component their role names ("inv: ..."), when
    every head names one and there are several; else one segment of all heads."""
    names = [role.split(": ", 1)[0] if ": " in role else None for role in roles]
    if None in names or len(set(names)) < 2:
        return [tuple(range(len(roles)))]
    order = list(dict.fromkeys(names))
    return [tuple(i for i, name in enumerate(names) if name == wanted) for wanted in order]


class TransformerLayer(nn.Module):
    """Attention followed by the ReLU layer, updating X in place.

    A layer whose heads belong to several components (FLEQ's function blocks) runs each
    component's heads as its own `Attention` (`parts`, heads `part_heads`): a component's
    heads then cost the same products whether or not the other components run, which lets
    vm/runtime/active_fleq.py skip components bit-exactly.
    """

    def __init__(self, weights: LayerWeights, dtype: torch.dtype, sparse: bool = False,
                 columns: int = 1, gate_rows: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.role = weights.role
        self.head_roles = [head.role for head in weights.heads]
        self.attention = Attention(weights.heads, dtype) if weights.heads else None
        segments = head_segments(self.head_roles) if weights.heads else []
        self.part_heads = segments if len(segments) > 1 else []
        self.parts = nn.ModuleList(Attention(tuple(weights.heads[i] for i in segment), dtype)
                                   for segment in self.part_heads)
        self.ffn = FeedForward(weights.ffn, dtype, sparse, columns, gate_rows)

    def multiply_adds(self, score_columns: int) -> int:
        """Multiply-adds a column of X costs this layer, each head scoring `score_columns`
        keys."""
        heads = list(self.parts) or ([self.attention] if self.attention is not None else [])
        return (sum(part.multiply_adds(score_columns) for part in heads)
                + self.ffn.multiply_adds())

    def attend(self, X: torch.Tensor, mode: str, scratch: int,
               bias: torch.Tensor | None, noise: ReadNoise | None = None) -> None:
        if self.parts:  # every part reads the layer's input X, as Eq. (1)'s heads do
            outputs = [part(X, mode, scratch, bias, noise) for part in self.parts]
            for part, output in zip(self.parts, outputs):
                _add_rows(X, part.rows, output)
        elif self.attention is not None:
            self.attend_part(X, self.attention, mode, scratch, bias, noise)

    @staticmethod
    def attend_part(X: torch.Tensor, part: Attention, mode: str, scratch: int,
                    bias: torch.Tensor | None, noise: ReadNoise | None = None) -> None:
        """X += the output of some of the layer's heads."""
        _add_rows(X, part.rows, part(X, mode, scratch, bias, noise))


class LoopedTransformer(nn.Module):
    """TF of Algorithm 1: one application executes one instruction.

    `gate_rows`: rows whose readers among a ReLU layer's units run as their own part
    (`FeedForward`): FLEQ's block gates. `checkpoint` is called with "layer i of n" before
    each layer is built: a wide FLEQ program's layers take seconds, which a time limit
    (`ltvm train --max-seconds`) stops between them by raising."""

    def __init__(self, weights: MachineWeights, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu", attention: str = "masked",
                 scratch: int = 1, gate_rows: tuple[int, ...] = (),
                 checkpoint: Checkpoint | None = None) -> None:
        super().__init__()
        if attention not in ATTENTION_MODES:
            raise ValueError(f"attention must be one of {ATTENTION_MODES}, got {attention!r}")
        if dtype not in (torch.float32, torch.float64):  # float16 failed in the first matmul
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
        if not 1 <= scratch <= weights.columns:  # 0 masked the scratch column's reads
            raise ValueError(f"scratch must be 1 to {weights.columns} columns, got {scratch}")
        self.attention, self.scratch = attention, scratch
        self.rows, self.columns, self.dtype = weights.rows, weights.columns, dtype
        device = torch.device(device)
        if device.type not in ("cpu", "cuda") or (device.type == "cuda"
                                                  and not torch.cuda.is_available()):
            raise ValueError(f"device {str(device)!r} cannot run the model here (cpu, or cuda "
                             f"with a CUDA device present)")
        sparse = device.type == "cpu"
        self.layers = nn.ModuleList()
        for index, layer in enumerate(weights.layers):
            if checkpoint is not None:
                checkpoint(f"layer {index + 1} of {len(weights.layers)}")
            self.layers.append(TransformerLayer(layer, dtype, sparse, weights.columns,
                                                gate_rows))
        use_bias = attention == "masked" and weights.columns <= MASK_AS_BIAS_MAX
        bias = None
        if use_bias:
            allowed = mask_matrix(weights.columns, scratch)
            bias = torch.as_tensor(np.where(allowed, 0.0, -np.inf).T, dtype=dtype)
        self.register_buffer("mask_bias", bias)
        score_columns = (weights.columns if attention == "dense" or use_bias
                         else 2 * scratch + 1)
        self.multiply_adds_per_column = sum(layer.multiply_adds(score_columns)
                                            for layer in self.layers)
        """About what a pass costs a column of X, in multiply-adds: how much work a pass is,
        which decides whether it is worth more than one CPU thread
        (vm/transformer/threads.py)."""
        configure_device(device)
        self.to(device)

    def multiply_adds(self, batch: int) -> int:
        """About what a full pass over `batch` programs costs, in multiply-adds."""
        return self.multiply_adds_per_column * batch * self.columns

    def forward(self, X: torch.Tensor, observer: Observer | None = None) -> torch.Tensor:
        """One pass on X of shape (batch, rows, n); returns a new tensor."""
        if not isinstance(X, torch.Tensor) or X.ndim != 3 or X.shape[1:] != (self.rows,
                                                                             self.columns):
            raise ValueError(f"X must be a tensor (batch, {self.rows}, {self.columns}), got "
                             f"{getattr(X, 'shape', type(X).__name__)}")
        if X.dtype != self.dtype:
            raise ValueError(f"X has dtype {X.dtype}, the model runs {self.dtype}")
        internal = to_internal(X)
        self.step_(internal, observer)
        return from_internal(internal)

    def step_(self, X: torch.Tensor, observer: Observer | None = None,
              noise: ReadNoise | None = None) -> None:
        """One pass in place on X in the internal (rows, batch, n) layout.

        The observer sees X in the public (batch, rows, n) layout (a view). `noise` makes
        the scratch column's reads stochastic (vm/transformer/sampling.py); without it the
        pass is Eq. (1) exactly.
        """
        for index, layer in enumerate(self.layers):
            layer.attend(X, self.attention, self.scratch, self.mask_bias, noise)
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


def trace_pass(model: LoopedTransformer, X: torch.Tensor,
               observer: Observer | None = None) -> list[LayerTrace]:
    """Run one pass on a single punchcard X (rows, n), recording every layer. `observer`
    sees each sublayer's output as in `step_`, so a checked mode checks the traced pass
    itself instead of running it a second time."""
    internal = to_internal(X[None])
    allowed = None
    if model.attention == "masked":
        allowed = torch.as_tensor(mask_matrix(internal.shape[2], model.scratch),
                                  device=internal.device)
    records = []
    with torch.inference_mode():
        for index, layer in enumerate(model.layers):
            before = internal[:, 0].clone()
            if layer.attention is not None:
                maps = layer.attention.weights(internal, allowed)
                roles = layer.head_roles
            else:
                maps = torch.zeros((0, internal.shape[2], internal.shape[2]))
                roles = []
            layer.attend(internal, model.attention, model.scratch, model.mask_bias)
            middle = internal[:, 0].clone()
            if observer is not None:
                observer(index, "attention", from_internal(internal))
            layer.ffn(internal)
            if observer is not None:
                observer(index, "ffn", from_internal(internal))
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
