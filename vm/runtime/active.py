"""Active-column evaluation: the SUBLEQ machine's pass computed only where X can change.

A SUBLEQ pass changes the scratch columns and the memory column it writes; every other
column ends the pass with exactly the bits it started with. `ActiveEvaluator` computes Eq. (1)
with the machine's own weights on those columns only and proves the rest unchanged with a
run-time guard; when the guard cannot prove it, the pass runs in full (`LoopedTransformer.step_`,
the definition). Why skipping is exact, what the guard checks and the bound: docs/speed.md.

How a pass runs (X in the internal (rows, batch, n) layout):

- The evaluated columns sit in a compact block `Xa` (rows, batch, m): the scratch columns and,
  from the layer whose heads have non-scratch queries (SUBLEQ's write head), the "extras":
  per program, the columns whose softmax in that layer puts at least β on a non-self key.
- Every head's projection [Q; K; V] of every column is cached, (batch, width, n). A column the
  pass has not evaluated yet starts each layer with the state it started the pass with, so its
  cached projection is what the full pass computes; evaluated columns use fresh projections.
- Scratch queries score every key (O(n r) a head), extras score the scratch keys and
  themselves, and the skipped columns of a head with non-scratch queries are scored against
  the scratch keys to find the extras. Scores are lam * (Q x_j) . (K x_i), the machine's Q, K
  and lam; on the {-1, 0, 1} lattice the dot products are exact small integers.
- The ReLU layers are the model's own `FeedForward` modules, applied to `Xa`.
- X is written only after the guard passed: `Xa` is scattered back and the cache entries of
  the extras are recomputed from their new state.

The guard, checked every pass (β = `exactness_bound`):
  * X is on the lattice {-1, 0, 1} with zero working rows when a run starts, and every
    evaluated column is again after the pass (skipped columns do not change);
  * a live scratch query puts all but β of its weight on one key whose value has no zero
    entry: its output is then exactly that value, in any summation order;
  * an extra puts all but β on one key or two exactly tied ones, and every value row has a
    non-zero tied average or no contribution from the other keys: its output is exactly that
    average, in any summation order;
  * a skipped column has off-self weight below β in every head where it queries (the extras
    are exactly the other columns, at most `capacity` per program);
  * heads whose non-scratch queries were zero when the run started still have zero queries
    in every column the pass changed, and scratch queries zero or live as in the first pass
    (a zero query averages garbage that the next ReLU layer clears, docs/speed.md).
A failed guard runs the pass in full (counted in `ActiveRun.fallbacks`, with a short back-off
before the next try), or raises `PrecisionError` when the run is `strict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from vm.common.errors import PrecisionError
from vm.transformer.layers import LoopedTransformer
from vm.transformer.layout import Layout
from vm.transformer.weights import HeadWeights, MachineWeights

if TYPE_CHECKING:
    from vm.runtime.fused import FusedPass
    from vm.runtime.graphed import GraphedPasses

DEFAULT_CAPACITY = 8
"""Most extras (columns evaluated beyond the scratchpad) per program and pass; a pass that
needs more runs in full. SUBLEQ at a default temperature needs one: the written cell."""
MAX_BACKOFF = 64
"""After consecutive guard failures, at most this many passes run in full before a retry."""
SKIP_BOUND = 1 / 16
"""Off-self weight below which a skipped column of SUBLEQ's write head provably keeps its
bits: its write buffer is then within 2 * 1/16 of its word (0 in instruction columns), and
the write layer's ternary restores a word from any buffer within 1/4 of it and leaves 0 for
any buffer within 1/8, with every partial sum exact (docs/speed.md)."""


def exactness_bound(dtype: torch.dtype) -> float:
    """β = 2^-(p+2) for p significant bits: 2^-26 in float32, 2^-55 in float64.

    Weight below β on other keys moves a ±1 value by less than half the spacing of floats
    next to 1 (2^-(p+1)), with a factor 2 to spare for the rounding of partial sums, so the
    value comes back exactly whatever order the sum is taken in.
    """
    return torch.finfo(dtype).eps / 8


@dataclass(frozen=True)
class _Group:
    """Heads of one layer with equal query width r, value rows k and temperature."""

    count: int
    r: int
    k: int
    lam: float
    q: slice
    key: slice
    v: slice
    field: str


class _Layer:
    """One attention layer: [Q; K; V_own] of its heads stacked per group (Q without lam)."""

    def __init__(self, index: int, heads: tuple[HeadWeights, ...], offset: int, layout: Layout,
                 dtype: torch.dtype, device: torch.device) -> None:
        self.index = index
        owned = [head.written_rows for head in heads]
        shapes: dict[tuple[int, int, float], list[int]] = {}
        for number, (head, own) in enumerate(zip(heads, owned)):
            shapes.setdefault((head.Q.shape[0], len(own), float(head.lam)), []).append(number)
        blocks, targets, self.groups, start = [], [], [], 0
        for (r, k, lam), members in shapes.items():
            parts = ([heads[i].Q for i in members] + [heads[i].K for i in members]
                     + [heads[i].V[owned[i]] for i in members])
            blocks += parts
            targets += [owned[i] for i in members]
            h = len(members)
            self.groups.append(_Group(h, r, k, lam, slice(start, start + h * r),
                                      slice(start + h * r, start + 2 * h * r),
                                      slice(start + 2 * h * r, start + 2 * h * r + h * k),
                                      layout.field_of_row(int(owned[members[0]][0]))[0]))
            start += h * (2 * r + k)
        matrix = np.concatenate(blocks)
        self.width = start
        self.rows = slice(offset, offset + start)
        """This layer's rows in the evaluator's stacked projection of all layers."""
        read = np.flatnonzero(np.abs(matrix).sum(0))
        self.read = torch.as_tensor(read, device=device)
        self.W = torch.as_tensor(matrix[:, read], dtype=dtype, device=device)
        self.targets = torch.as_tensor(np.concatenate(targets), device=device)

    def project(self, X: torch.Tensor) -> torch.Tensor:
        """[Q; K; V_own] of every column of X (rows, batch, m), as (batch, width, m)."""
        _, batch, m = X.shape
        flat = X.index_select(0, self.read).view(len(self.read), batch * m)
        return (self.W @ flat).view(self.width, batch, m).permute(1, 0, 2)


class ActiveEvaluator:
    """Evaluates passes of one looped transformer on the columns that can change.

    `start(X)` binds a run to X (internal layout) and builds its cache; `ActiveRun.step`
    then runs passes in place, bit-identical to `model.step_`. `unsupported` says why a
    machine or mode cannot be evaluated this way (callers then use the full pass).
    """

    def __init__(self, model: LoopedTransformer, weights: MachineWeights, layout: Layout,
                 scratch: int, real_fields: tuple[str, ...] = (),
                 capacity: int = DEFAULT_CAPACITY) -> None:
        self.model, self.layout, self.scratch, self.capacity = model, layout, scratch, capacity
        parameter = next(model.buffers())
        self.dtype, self.device = parameter.dtype, parameter.device
        self.bound = exactness_bound(self.dtype)
        self.unsupported = self._unsupported(model, scratch, real_fields)
        self.layers: list[_Layer | None] = []
        start = 0
        for index, layer in enumerate(weights.layers):
            if not layer.heads:
                self.layers.append(None)
                continue
            built = _Layer(index, layer.heads, start, layout, self.dtype, self.device)
            start += built.width
            self.layers.append(built)
        self.width = start
        attending = [layer for layer in self.layers if layer is not None]
        read = torch.unique(torch.cat([layer.read for layer in attending]))
        stacked = torch.zeros((self.width, len(read)), dtype=self.dtype, device=self.device)
        for layer in attending:
            stacked[layer.rows, torch.searchsorted(read, layer.read)] = layer.W
        self.read, self.W = read, stacked
        self.fused: "FusedPass | GraphedPasses | None" = None
        """The compiled form of this evaluator's pass, when set: numba on the CPU
        (vm/runtime/fused.py), CUDA graphs on a GPU (vm/runtime/graphed.py)."""
        working = [row for name in layout.working()
                   for row in range(layout[name].start, layout[name].stop)]
        self.working = torch.as_tensor(working, device=self.device)

    @staticmethod
    def _unsupported(model: LoopedTransformer, scratch: int,
                     real_fields: tuple[str, ...]) -> str | None:
        if model.attention != "masked":
            return ("dense attention: every column queries every key, so no column's weights "
                    "can be bounded from the scratch keys alone")
        if real_fields:
            return (f"real-valued fields ({', '.join(real_fields)}): the function blocks' "
                    "rounding depends on how many columns a product covers, so a subset of the "
                    "columns is not bit-identical to the full pass")
        if scratch != 1:
            return ("a scratchpad of more than one column: zero queries average 1/(s+1) or 1/n "
                    "of the values, which the ReLU layers clear exactly only in the full pass's "
                    "own summation order")
        return None

    def project(self, X: torch.Tensor) -> torch.Tensor:
        """Every layer's [Q; K; V_own] of every column of X (rows, batch, m): (batch, width, m)."""
        _, batch, m = X.shape
        flat = X.index_select(0, self.read).reshape(len(self.read), batch * m)
        return (self.W @ flat).view(self.width, batch, m).permute(1, 0, 2)

    def start(self, X: torch.Tensor, strict: bool = False, fused: bool = False) -> "ActiveRun":
        """A run bound to X (rows, batch, n); X must change only through the run from now on.

        `strict`: raise PrecisionError when the guard fails instead of running in full.
        `fused`: let `ActiveRun.fused_steps` use the evaluator's fused form, if it has one.
        """
        if self.unsupported is not None:
            raise ValueError(f"active evaluation is not available: {self.unsupported}")
        return ActiveRun(self, X, strict, fused)


@dataclass
class _Check:
    """One guard condition of a pass: `ok` (batch, slots), the value it tested, and where.

    `columns` maps a slot to its column: a (batch, slots) tensor, or a period p with an
    offset (slot i is column offset + i % p)."""

    ok: torch.Tensor
    value: torch.Tensor
    layer: int
    field: str
    expected: str
    columns: torch.Tensor | tuple[int, int] = (1 << 30, 0)

    def column(self, program: int, slot: int) -> int:
        if isinstance(self.columns, torch.Tensor):
            return int(self.columns[program, slot])
        period, offset = self.columns
        return offset + slot % period


class FusedNotCompiled(Exception):
    """Raised by a fused form that may not compile (`FusedPass.compiles`) when numba has not
    got the machine code of a kernel it would call: the run goes on without it."""


class _GuardFailure(Exception):
    """A pass that cannot be proven identical to the full pass."""

    def __init__(self, check: _Check) -> None:
        super().__init__(check.expected)
        self.check = check


class ActiveRun:
    """Passes of one evaluator on one bound X, with the projection cache between them."""

    def __init__(self, evaluator: ActiveEvaluator, X: torch.Tensor, strict: bool,
                 fused: bool = False) -> None:
        self.evaluator, self.X, self.strict = evaluator, X, strict
        self.fused = evaluator.fused if fused else None
        self.fallbacks = 0
        """Passes run in full: the guard failed, or the run was backing off after a failure."""
        self.backoff, self.wait, self.stale = 0, 0, True
        self.fused_passes = 0
        """Passes the fused form computed since the cache was last built."""
        self.fused_state = None
        """What the fused form keeps beside the cache (vm/runtime/fused.py); None whenever a
        torch pass may have written the cache."""
        self.graph = None
        """The CUDA-graph form's captured passes of this run (vm/runtime/graphed.py): kept
        here so that the graph and its copies of X and the cache go with the run."""

    def step(self, step: int = 0) -> bool:
        """One pass in place; True when it ran on the active columns."""
        self.fused_state = None
        if self.wait == 0:
            try:
                if self.stale:
                    self._rebuild()
                self._active_pass()
                self.backoff = 0
                return True
            except _GuardFailure as failure:
                if self.strict:
                    raise self._precision_error(step, failure.check) from None
                self.backoff = min(2 * self.backoff or 1, MAX_BACKOFF)
                self.wait = self.backoff
        self.wait -= 1
        self.fallbacks += 1
        self.evaluator.model.step_(self.X)
        self.stale = True
        return False

    def restart(self) -> None:
        """X was replaced in place (`Runner.restart`): the cache is built anew, from it,
        before the next pass, and any back-off ends."""
        self.stale = True
        self.backoff = self.wait = 0

    def fused_steps(self, count: int, record: torch.Tensor, pc_rows: np.ndarray,
                    threads: int | None = None) -> int:
        """Up to `count` passes by the evaluator's fused form (vm/runtime/fused.py), each
        after recording the program counters (rows `pc_rows` of the scratch column) into
        `record[i]`; 0 when there is none or the run is not ready for it (a cache to
        build, a back-off, pending checks), and 0 with `fused` dropped to None when the
        fused form would first have to compile and may not. After a pass it could not prove,
        the cache is marked for rebuilding when the fused form does not keep the own scores
        that the torch pass needs (`keeps_own_scores`)."""
        fused = self.fused
        if (fused is None or self.stale or self.wait
                or not all(bool(check.ok.all()) for check in self.pending)):
            return 0
        try:
            done, ahead = fused.passes(self, count, record, pc_rows, threads)
        except FusedNotCompiled:
            self.fused = None  # the torch pass goes on; the caller sees fused is None
            return 0
        if done:
            self.pending = []
            self.fused_passes += done
        if done < count and (ahead or (self.fused_passes and not fused.keeps_own_scores)):
            self.stale = True
        return done

    # -- the cache ------------------------------------------------------------------------
    def _rebuild(self) -> None:
        """Project every column, classify every group's queries, check the lattice."""
        ev, X = self.evaluator, self.X
        s = ev.scratch
        self.stale = False
        self.fused_passes = 0
        self.fused_state = None
        self.cache = ev.project(X).contiguous()
        self.self_query: dict[tuple[int, int], bool] = {}
        self.zero_queries: dict[tuple[int, int], bool] = {}
        self.pending: list[_Check] = []
        for layer in ev.layers:
            for number, group in enumerate(layer.groups if layer is not None else ()):
                queries = self.cache[:, layer.rows][:, group.q, s:]
                self.self_query[layer.index, number] = bool(queries.any())
        layers = sorted({index for (index, _), query in self.self_query.items() if query})
        if len(layers) > 1:
            self.stale = True
            raise _GuardFailure(_Check(torch.zeros((1, 1), dtype=torch.bool), X.new_zeros(1),
                                       layers[1], "queries", "non-scratch queries in one "
                                       "layer only", (1, s)))
        self.extras_layer = layers[0] if layers else None
        self.own_scores: dict[int, torch.Tensor] = {}
        if self.extras_layer is not None:
            layer = ev.layers[self.extras_layer]
            for number, group in enumerate(layer.groups):
                if self.self_query[layer.index, number]:
                    self.own_scores[number] = self._own_scores(layer, group, self.cache)
        off_lattice = (X * X != X.abs()).any(0) | X[ev.working].any(0)
        if bool(off_lattice.any()):
            self.stale = True
            raise _GuardFailure(_Check(~off_lattice, off_lattice.to(X.dtype), 0, "state",
                                       "on the lattice {-1, 0, 1} with zero working rows "
                                       "before the pass", (1 << 30, 0)))

    @staticmethod
    def _own_scores(layer: _Layer, group: _Group, projected: torch.Tensor) -> torch.Tensor:
        """(Q x_j) . (K x_j) of every column of a projection: (batch, heads, columns)."""
        part = projected[:, layer.rows]
        queries = part[:, group.q].unflatten(1, (group.count, group.r))
        keys = part[:, group.key].unflatten(1, (group.count, group.r))
        return (queries * keys).sum(2)

    def _refresh(self, extras: torch.Tensor, state: torch.Tensor) -> None:
        """Recompute the cache entries (and own scores) of the columns this pass changed;
        groups whose non-scratch queries were zero must still find them zero (checked with
        the next pass)."""
        ev = self.evaluator
        fresh = ev.project(state)
        self.cache.scatter_(2, extras[:, None, :].expand(-1, ev.width, -1), fresh)
        for (index, number), query in self.self_query.items():
            layer = ev.layers[index]
            group = layer.groups[number]
            if query:
                self.own_scores[number].scatter_(
                    2, extras[:, None, :].expand(-1, group.count, -1),
                    self._own_scores(layer, group, fresh))
            else:
                queries = fresh[:, layer.rows][:, group.q]
                self.pending.append(_Check(~queries.any(1), queries.abs().amax(1), index,
                                           group.field, "zero queries outside the scratchpad",
                                           extras))

    # -- one pass -------------------------------------------------------------------------
    def _active_pass(self, proven: torch.Tensor | None = None) -> None:
        """One pass; raises _GuardFailure before writing X when a guard condition fails.

        `proven` (a one-element bool tensor): the pass is being captured as part of a CUDA
        graph (vm/runtime/graphed.py), which allows no host sync. Every condition is then
        ANDed into `proven` instead of raising, X is written regardless (the caller restores
        it when `proven` ends False) and the extras have the fixed width `ev.capacity`."""
        ev, X = self.evaluator, self.X
        rows, batch, _ = X.shape
        s = ev.scratch
        checks = [] if proven is not None else self.pending
        self.pending = []
        Xa = X[:, :, :s].contiguous()
        extras: torch.Tensor | None = None
        for layer, module in zip(ev.layers, ev.model.layers):
            if layer is not None:
                fresh = layer.project(Xa)
                cache = self.cache[:, layer.rows]
                cache[:, :, :s] = fresh[:, :, :s]
                if extras is not None:
                    cache.scatter_(2, extras[:, None, :].expand(-1, layer.width, -1),
                                   fresh[:, :, s:])
                if layer.index == self.extras_layer:
                    extras = self._extras(layer, cache, checks if proven is not None else None)
                    Xa = torch.cat([Xa, X.gather(2, extras[None].expand(rows, -1, -1))], 2)
                    fresh = torch.cat([fresh, cache.gather(
                        2, extras[:, None, :].expand(-1, layer.width, -1))], 2)
                outputs = []
                for number, group in enumerate(layer.groups):
                    out = self._scratch_queries(layer, number, group, fresh, cache, checks)
                    if extras is not None:
                        out = torch.cat([out, self._extra_queries(layer, group, fresh,
                                                                  checks)], -1)
                    outputs.append(out.flatten(1, 2))
                update = torch.cat(outputs, 1) if len(outputs) > 1 else outputs[0]
                Xa.index_add_(0, layer.targets, update.permute(1, 0, 2))
            module.ffn(Xa)
        columns = torch.arange(s, device=X.device).expand(batch, -1)
        if extras is not None:
            columns = torch.cat([columns, extras], 1)
        off_lattice = (Xa * Xa != Xa.abs()).any(0) | Xa[ev.working].any(0)
        checks.append(_Check(~off_lattice, off_lattice.to(X.dtype), len(ev.layers) - 1,
                             "result", "on the lattice {-1, 0, 1} with zero working rows "
                             "after the pass", columns))
        if proven is None and not bool(torch.cat([check.ok.flatten() for check in checks]).all()):
            raise _GuardFailure(next(check for check in checks if not bool(check.ok.all())))
        X.scatter_(2, columns[None].expand(rows, -1, -1), Xa)
        if extras is not None:
            self._refresh(extras, Xa[:, :, s:])
        if proven is not None:
            checks += self.pending
            self.pending = []
            proven.logical_and_(torch.cat([check.ok.flatten() for check in checks]).all())

    def _extras(self, layer: _Layer, cache: torch.Tensor,
                deferred: list[_Check] | None = None) -> torch.Tensor:
        """Per program, the non-scratch columns whose softmax in this layer puts at least
        SKIP_BOUND on non-self keys, padded with the next most attracted columns: (batch, E).

        E is the most any program needs, found by a host sync; with `deferred` (a captured
        pass) it is `capacity` (or every non-scratch column, if fewer) and the condition that
        no program needs more is appended there instead."""
        ev = self.evaluator
        s = ev.scratch
        mass = None
        for number, group in enumerate(layer.groups):
            if not self.self_query[layer.index, number]:
                continue
            queries = cache[:, group.q, s:].unflatten(1, (group.count, group.r))
            keys = cache[:, group.key, :s].unflatten(1, (group.count, group.r))
            scores = queries.transpose(-1, -2) @ keys
            own = self.own_scores[number][..., s:, None]
            weight = torch.exp(group.lam * (scores - own)).sum(-1).amax(1)
            mass = weight if mass is None else torch.maximum(mass, weight)
        if deferred is not None:
            width = min(ev.capacity, mass.shape[-1])
            needed = (mass >= SKIP_BOUND).sum(-1, keepdim=True)
            deferred.append(_Check(needed <= width, needed.to(mass.dtype), layer.index,
                                   "columns", f"at most {width} columns a program with "
                                   f"off-self weight >= {SKIP_BOUND}", (1 << 30, s)))
            return mass.topk(width, dim=-1).indices + s
        needed = int((mass >= SKIP_BOUND).sum(-1).max())
        if needed > ev.capacity:
            raise _GuardFailure(_Check(mass < SKIP_BOUND, mass, layer.index, "columns",
                                       f"at most {ev.capacity} columns a program with "
                                       f"off-self weight >= {SKIP_BOUND}", (1 << 30, s)))
        return mass.topk(needed, dim=-1).indices + s

    def _scratch_queries(self, layer: _Layer, number: int, group: _Group, fresh: torch.Tensor,
                         cache: torch.Tensor, checks: list[_Check]) -> torch.Tensor:
        """The group's output at the scratch queries, which see every key: (batch, H, k, s)."""
        ev = self.evaluator
        s, h = ev.scratch, group.count
        queries = fresh[:, group.q, :s].unflatten(1, (h, group.r))
        scores = queries.transpose(-1, -2) @ cache[:, group.key].unflatten(1, (h, group.r))
        values = cache[:, group.v].unflatten(1, (h, group.k))
        zero = ~queries.any(2)
        known = self.zero_queries.get((layer.index, number))
        if known is None:
            known = self.zero_queries[layer.index, number] = bool(zero.any())
        checks.append(_Check((zero == known).flatten(1), zero.flatten(1).to(scores.dtype),
                             layer.index, group.field, "scratch queries all zero or all live, as "
                             "in the run's first pass", (s, 0)))
        if known:
            return values @ torch.softmax(group.lam * scores, dim=-1).transpose(-1, -2)
        top, winner = scores.max(-1)
        weights = torch.exp(group.lam * (scores - top[..., None]))
        off = weights.scatter(-1, winner[..., None], 0.0).sum(-1)
        value = values.gather(-1, winner[:, :, None, :].expand(-1, -1, group.k, -1))
        out = value / weights.sum(-1)[:, :, None, :]
        exact = (off < ev.bound) & value.all(2)
        checks.append(_Check(exact.flatten(1), off.flatten(1), layer.index, group.field,
                             f"a read with all but {ev.bound:.3g} of its weight on one key "
                             "whose value has no zero entry", (s, 0)))
        return out

    def _extra_queries(self, layer: _Layer, group: _Group, fresh: torch.Tensor,
                       checks: list[_Check]) -> torch.Tensor:
        """The group's output at the extras, which see the scratch key and themselves.

        Exact when the two scores tie (weights 1/2 each: the written cell's buffer is the
        dyadic average of two lattice values) or when the off-self weight is below
        SKIP_BOUND (a padding column, which the write layer provably leaves unchanged)."""
        s, h = self.evaluator.scratch, group.count
        queries = fresh[:, group.q, s:].unflatten(1, (h, group.r))
        keys = fresh[:, group.key].unflatten(1, (h, group.r))
        values = fresh[:, group.v].unflatten(1, (h, group.k))
        scratch = queries.transpose(-1, -2) @ keys[..., :s]
        own = (queries * keys[..., s:]).sum(2)[..., None]
        weights = torch.softmax(group.lam * torch.cat([scratch, own], -1), dim=-1)
        out = values[..., :s] @ weights[..., :s].transpose(-1, -2) + \
            values[..., s:] * weights[:, :, None, :, s]
        off = torch.exp(group.lam * (scratch - own)).sum(-1)
        exact = (scratch == own).squeeze(-1) | (off < SKIP_BOUND)
        checks.append(_Check(exact.flatten(1), off.flatten(1), layer.index, group.field,
                             "two exactly tied keys, or off-self weight below "
                             f"{SKIP_BOUND}", (queries.shape[-1], s)))
        return out

    def _precision_error(self, step: int, check: _Check) -> PrecisionError:
        """The first (program, column) where a guard condition failed, as a PrecisionError."""
        failed = ~check.ok.reshape(check.ok.shape[0], -1)
        program, slot = np.unravel_index(int(failed.flatten().nonzero()[0]), tuple(failed.shape))
        value = float(check.value.reshape(failed.shape)[program, slot])
        return PrecisionError(step, check.layer, check.column(int(program), int(slot)),
                              check.field, value, check.expected,
                              program=int(program) if failed.shape[0] > 1 else None)
