"""FLEQ passes that skip the heads of the function blocks the instruction does not select.

Where a FLEQ pass spends its time (`ltvm bench fleq`, docs/speed.md): in the function-block
layers' attention, whose many heads (sigmoid sums of 64 terms, linearized softmax products)
every scratch query evaluates over all n keys, for every block, although only the block the
instruction selects (its `cur_m` bit) produces the result that is written. Every other
block computes on its own private rows: values that the gated ReLU units of other blocks
see as exactly 0, that reach memory only through the write head with weight exactly 0,
and that the last layer clears. `FleqActiveEvaluator` runs the pass with the model's own
modules, layer by layer, but computes in each block layer only the heads of the selected
blocks (same weights, same per-head shapes, same softmax rows over all n keys).

Why X comes out bit-identical (docs/speed.md, "FLEQ"): the two computations differ only
in rows private to unselected blocks, everywhere, and in rows those blocks' units write,
in those blocks' own columns. Checked once, on the weights: every block head belongs to
one block (its key's gate row), no head or unit of one block reads a row another block
writes, and unselected heads write only their block's rows. Checked every pass (the guard):

* the state is finite, has no -0.0 and |X| <= `bound` (found on the weights by interval
  propagation through every layer, every head taken as a convex combination of its
  values): then every value either computation makes is finite, and every gated unit of a
  block, outside that block's columns, has a pre-activation below -2^59, so both give it
  exactly 0; 0 x (a finite value) is 0, and the final clear of working rows
  (x - relu(x) + relu(-x)) is exactly 0 whatever finite x it clears;
* the write head moves at an exact temperature (`moves_are_exact`): its weight on an
  unselected block's C column is exactly 0 in both computations, whose keys and queries
  (positions, write keys, the selection bit) do not depend on block values;
* the blocks evaluated are every block whose selector `cur_m` (computed by the fetch
  head, read after layer 0) is non-zero in some scratch column of some program.

When the guard fails the pass runs in full (`LoopedTransformer.step_`), or raises
`PrecisionError` when the run is strict.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vm.common.errors import PrecisionError
from vm.functions.base import GATE_BIG
from vm.transformer.layers import LoopedTransformer, _add_rows
from vm.transformer.layout import Layout
from vm.transformer.weights import MachineWeights

CONTROL_LAYERS = 3
"""Fetch, pointer and operand layers: always evaluated in full, before any block layer."""
GATE_MARGIN = GATE_BIG / 2
"""A gated unit's pre-activation without its gate must stay below this for the gate
(-GATE_BIG outside the block) to make it exactly 0."""
SOFTMAX_SLACK = 1.0 + 1e-9
"""A softmax's weights sum to at most this (rounding), so a head's output is bounded by
this times the largest value it averages."""
FINITE = 1e300
OFFSET_FIELDS = ("gA", "gB", "gC", "resmask")
"""Rows (besides the block gates and the blocks' constant fields) that hold gate offsets,
0 or -GATE_BIG: a unit adds them with a positive coefficient to switch itself off."""


@dataclass(frozen=True)
class _Plan:
    """A block layer's attention restricted to some heads: stacked [lam Q; K; V] rows,
    groups as (count, r, k, start) in those rows, and where the outputs go."""

    qkv: torch.Tensor
    groups: tuple[tuple[int, int, int, int], ...]
    targets: torch.Tensor
    reduce: torch.Tensor | None


class FleqActiveEvaluator:
    """Block-selective FLEQ passes for one model; `unsupported` says why not, when not."""

    def __init__(self, model: LoopedTransformer, weights: MachineWeights, layout: Layout,
                 blocks: int, exact_moves: bool) -> None:
        self.model, self.weights, self.layout = model, weights, layout
        self.blocks = blocks
        self.fallbacks = 0
        self.unsupported: str | None = None
        self._plans: dict[tuple[int, frozenset[int]], _Plan] = {}
        self.bound = 0.0
        if not exact_moves:
            self.unsupported = "the write head does not move at an exact temperature"
        elif model.attention != "masked" or blocks == 0:
            self.unsupported = "needs masked attention and function blocks"
        else:
            self.head_blocks = self._assign()
            if self.unsupported is None:
                self.bound = self._state_bound()
                if self.bound < 1.0:
                    self.unsupported = "no state bound keeps every gated unit at exactly 0"
        self.selector = layout["cur_m"]
        offsets = self._offset_rows()
        device = model.layers[0].ffn.b1.device
        self._offsets = torch.as_tensor(np.flatnonzero(offsets), device=device)
        self._values = torch.as_tensor(np.flatnonzero(~offsets), device=device)
        self.scratch = model.scratch

    # -- checks on the weights ---------------------------------------------------------
    def _gate_rows(self) -> dict[int, int]:
        return {self.layout.row(f"gblock{i}"): i for i in range(self.blocks)}

    def _assign(self) -> list[list[int]]:
        """Each block layer head's block (from its key's gate row); checks that blocks
        neither read what other blocks write nor share written rows."""
        gates = self._gate_rows()
        gate_list = np.array(sorted(gates))
        result: list[list[int]] = []
        reads: dict[int, set[int]] = {i: set() for i in range(self.blocks)}
        writes: dict[int, set[int]] = {i: set() for i in range(self.blocks)}
        for index, layer in enumerate(self.weights.layers):
            owners = []
            if CONTROL_LAYERS <= index < len(self.weights.layers) - 1:
                for head in layer.heads:
                    found = [gates[int(r)] for r in gate_list if head.K[:, r].any()]
                    if len(found) != 1:
                        self.unsupported = f"a head of layer {index} has no single block gate"
                        return []
                    block = found[0]
                    owners.append(block)
                    written = head.written_rows
                    used = np.flatnonzero(np.abs(head.Q).sum(0) + np.abs(head.K).sum(0)
                                          + np.abs(head.V[written]).sum(0))
                    reads[block].update(int(r) for r in used if int(r) not in gates)
                    writes[block].update(int(r) for r in written)
                ffn = layer.ffn
                for unit in range(ffn.width):
                    found = [gates[int(r)] for r in gate_list if ffn.W1[unit, r] != 0]
                    if len(found) > 1:
                        self.unsupported = f"a unit of layer {index} reads two block gates"
                        return []
                    if found:
                        block = found[0]
                        reads[block].update(int(r) for r in np.flatnonzero(ffn.W1[unit])
                                            if int(r) not in gates)
                        writes[block].update(int(r) for r in np.flatnonzero(ffn.W2[:, unit]))
            result.append(owners)
        head_rows = {i: {int(r) for layer, owners in zip(self.weights.layers, result)
                         for head, owner in zip(layer.heads, owners) if owner == i
                         for r in head.written_rows} for i in range(self.blocks)}
        for i in range(self.blocks):
            for j in range(self.blocks):
                if i != j and (reads[i] & writes[j] or head_rows[i] & writes[j]):
                    self.unsupported = f"block {i} reads or shares rows block {j} writes"
                    return []
        return result

    def _offset_rows(self) -> np.ndarray:
        """Rows holding gate offsets (0 or -GATE_BIG): the block gates and OFFSET_FIELDS."""
        offsets = np.zeros(self.weights.rows, dtype=bool)
        offsets[[self.layout.row(f"gblock{i}") for i in range(self.blocks)]] = True
        for name in OFFSET_FIELDS:
            offsets[self.layout[name]] = True
        for name in self.layout.persistent:
            if name.startswith("b") and "." in name:
                offsets[self.layout[name]] = True
        return offsets

    def _propagate(self, magnitude: float) -> bool:
        """Can every value of a pass from a state with |X| <= magnitude outside the gate
        offsets be bounded below FINITE, with every gated unit's pre-activation, gate
        aside, below GATE_MARGIN?"""
        gates = np.zeros(self.weights.rows, dtype=bool)
        gates[list(self._gate_rows())] = True
        offsets = self._offset_rows()
        bound = np.full(self.weights.rows, magnitude)
        bound[offsets] = 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            for layer in self.weights.layers:
                added = np.zeros_like(bound)
                for head in layer.heads:
                    if head.V[:, offsets].any():
                        return False
                    added += np.abs(head.V) @ bound * SOFTMAX_SLACK
                bound = bound + added
                ffn = layer.ffn
                if ffn.width:
                    negative = np.minimum(ffn.W1[:, offsets & ~gates], 0.0)
                    pre = (np.abs(ffn.W1[:, ~offsets]) @ bound[~offsets] + np.abs(ffn.b1)
                           - negative.sum(1) * GATE_BIG)
                    gated = (ffn.W1[:, gates] > 0).any(1)
                    if not np.all(pre[gated] < GATE_MARGIN):
                        return False
                    bound = bound + np.abs(ffn.W2) @ pre + np.abs(ffn.b2)
                    bound[offsets] = 0.0
                if not np.all(bound < FINITE):
                    return False
        return True

    def _state_bound(self) -> float:
        """The largest power of 2 (from 2^0 up) that `_propagate` accepts; 0 if none."""
        magnitude = 0.0
        for exponent in range(0, 1000, 4):
            if not self._propagate(2.0 ** exponent):
                break
            magnitude = 2.0 ** exponent
        return magnitude

    # -- one pass --------------------------------------------------------------------
    def _plan(self, index: int, selected: frozenset[int]) -> _Plan | None:
        key = (index, selected)
        if key in self._plans:
            return self._plans[key]
        attention = self.model.layers[index].attention
        owners = self.head_blocks[index]
        heads = self.weights.layers[index].heads
        rows, groups, targets = [], [], []
        start = 0
        for group in attention.writing_groups:
            members = [position for position, head in enumerate(group.heads)
                       if owners[head] in selected]
            for position in members:
                first = group.start + position * group.width
                rows.extend(range(first, first + group.width))
                own = heads[group.heads[position]].written_rows
                targets.extend(int(r) for r in own)
            if members:
                groups.append((len(members), group.r, group.k, start))
                start += len(members) * group.width
        plan = None
        if groups:
            device = attention.QKV.device
            qkv = attention.QKV[torch.as_tensor(rows, device=device)].contiguous()
            target = np.array(targets)
            reduce = None
            written = np.unique(target)
            if len(written) < len(target) or np.any(target != written):
                reduce = torch.as_tensor(target[None, :] == written[:, None],
                                         dtype=qkv.dtype, device=device)
            plan = _Plan(qkv, tuple(groups), torch.as_tensor(written, device=device), reduce)
        self._plans[key] = plan
        return plan

    def _attend(self, X: torch.Tensor, index: int, selected: frozenset[int]) -> None:
        """The selected blocks' heads of block layer `index`, added to X."""
        plan = self._plan(index, selected)
        if plan is None:
            return
        model, attention = self.model, self.model.layers[index].attention
        _, batch, n = X.shape
        read = attention.read
        source = X.view(X.shape[0], -1)
        source = source[read] if isinstance(read, slice) else source.index_select(0, read)
        projected = plan.qkv @ source
        outputs = []
        for count, r, k, start in plan.groups:
            width = 2 * r + k
            part = projected[start:start + count * width].view(count, width, batch, n)
            part = part.permute(2, 0, 1, 3).reshape(batch * count, width, n)
            out = attention._heads(part[:, :r], part[:, r:2 * r], part[:, 2 * r:],
                                   model.attention, model.scratch, model.mask_bias)
            outputs.append(out.view(batch, count * k, n).transpose(0, 1))
        out = torch.cat(outputs) if len(outputs) > 1 else outputs[0]
        if plan.reduce is not None:
            flat = out.reshape(out.shape[0], batch * n)
            out = (plan.reduce @ flat).view(plan.reduce.shape[0], batch, n)
        _add_rows(X, plan.targets, out)

    def _unsafe(self, X: torch.Tensor) -> str | None:
        """Why this state's pass cannot skip heads, or None."""
        largest = float(X.index_select(0, self._values).abs().amax())
        if not largest <= self.bound:
            return f"a finite state with |X| <= {self.bound:g} outside the gate offsets"
        offsets = X.index_select(0, self._offsets)
        if not bool(((offsets == 0) | (offsets.abs() == GATE_BIG)
                     | (offsets.abs() <= 1)).all()):
            return "gate offsets and block constants 0, +-GATE_BIG or within [-1, 1]"
        if bool((torch.signbit(X) & (X == 0)).any()):
            return "no -0.0 in the state"
        return None

    def step_(self, X: torch.Tensor, step: int = 0, strict: bool = False) -> bool:
        """One pass in place on X (rows, batch, n); True when heads were skipped."""
        model = self.model
        problem = self._unsafe(X)
        if problem is not None:
            if strict:
                raise PrecisionError(step, 0, 0, "state", float(X.abs().amax()), problem)
            self.fallbacks += 1
            model.step_(X)
            return False
        selected: frozenset[int] = frozenset()
        last = len(model.layers) - 1
        for index, layer in enumerate(model.layers):
            if CONTROL_LAYERS <= index < last:
                self._attend(X, index, selected)
            else:
                layer.attend(X, model.attention, model.scratch, model.mask_bias)
            layer.ffn(X)
            if index == 0:
                flags = X[self.selector, :, :self.scratch].ne(0).flatten(1).any(1)
                selected = frozenset(int(i) for i in flags.nonzero().flatten())
        return True
