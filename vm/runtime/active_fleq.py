"""FLEQ passes that skip the heads of the function blocks the instruction does not select.

Where a FLEQ pass spends its time (`ltvm bench fleq`, docs/speed.md): in the function-block
layers' attention, whose many heads (sigmoid sums of 64 terms, linearized softmax products)
every scratch query evaluates over all n keys, for every block, although only the block the
instruction selects (its `cur_m` bit) produces the result that is written. The model runs
each block's heads of a layer as their own `Attention` (`TransformerLayer.parts`, one per
component named in the heads' roles), so a block's heads cost the same products whether or
not the other blocks run. `FleqActiveEvaluator` runs the pass with the model's own modules,
layer by layer, and skips in each block layer the parts of blocks that are not selected.

Why X comes out bit-identical (docs/speed.md, "FLEQ"). Both passes run the same modules on
the same data except for the skipped parts: the fetch, pointer and operand layers
(CONTROL_LAYERS) and the last layer run in full, and a selected block's part is the same
`Attention` call in both. Checked once, on the weights (`_structure`):

* every block-layer head belongs to one block (its key reads one block gate row); no block
  reads a row another block writes; no layer writes a constant row (rows the geometry
  fixes: gates, indicators, positions, block constants) and no block layer a result-mask row;
* block-layer units either carry exactly one block's gate (then they are that block's) or
  read no row any block writes; the last layer reads block-written rows only through the
  write head's values and through clear units (x - relu(x) + relu(-x), exactly 0 for every
  finite x), and its queries and keys read none.

Then the two passes differ only in rows that unselected blocks write: their own rows
(in every column) and shared result rows in their own columns, provided every value of
either pass is finite and every unit of a block j has a pre-activation <= 0 outside block
j's columns (both give it exactly 0 there). The write head weighs an unselected block's C
columns by exactly 0 (exact move temperature; its keys and queries come from control rows;
0 x a finite value is 0) and the last layer clears every working row to exactly 0.

The guard (`problem`), on X after the control layers, each pass, O(rows x n):

* the constant rows equal the geometry's punchcard values, exactly;
* the result-mask rows (OFFSET_FIELDS) hold only 0 or -GATE_BIG;
* every other row's largest |value| is within its limit (`_row_limits`): the operand
  bound `bound` in rows the control heads copy from memory, 1 in the other rows the
  control layers write and in pc and instructions, 0 in working rows not yet written;
  memory itself only a finiteness bound.

`bound` is found once, on the weights, by interval propagation from those limits through
every block layer and the last layer (`_propagate`): constant rows exactly, per unit and
column (gate offsets 0 / -2^60 included), result-mask rows as [-2^60, 0], each head's
output as a convex combination of its values, each layer's bounds widened for rounding. It
is the largest 2^(k/16) for which every bound and score stays below the dtype's largest
float / 2^8, and every block unit outside its block stays below -2^-10 times the sum of its
terms' magnitudes (so rounding cannot lift it to > 0).

The blocks evaluated are every block whose selector `cur_m` (the fetch's output, read after
layer 0) is non-zero in some scratch column of some program of the batch. When the guard
fails, the rest of the pass runs in full (its first layers already did), or
`PrecisionError` is raised when the run is strict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from vm.common.cache import Checkpoint, no_checkpoint
from vm.common.errors import PrecisionError
from vm.functions.base import GATE_BIG
from vm.machines.fleq.layout import FleqGeometry
from vm.machines.fleq.punchcard import constant_rows
from vm.transformer.layers import LoopedTransformer
from vm.transformer.layout import Layout
from vm.transformer.weights import MachineWeights

if TYPE_CHECKING:  # graphed.py imports this module
    from vm.runtime.graphed import FleqGraphedPasses

CONTROL_LAYERS = 3
"""Fetch, pointer and operand layers: always evaluated in full, before any block layer."""
GUARD_CHECKS = 3
"""Conditions the guard reports (`_checks`), ahead of the block selectors in `control_`'s
result."""
GATE_SLACK = 2.0 ** -10
"""A block unit's pre-activation outside its block must stay at or below -GATE_SLACK times
the sum of its terms' magnitudes: the rounding of a sum of k terms is at most k x eps times
that sum, below that when 2 k eps <= GATE_SLACK (checked), so its ReLU gives exactly 0."""
SEARCH_STEPS = 16
"""The operand bound is searched to 1/SEARCH_STEPS of a binary order of magnitude."""
FINITE_SHIFT = 8
"""Every bound stays below the dtype's largest float / 2^FINITE_SHIFT."""
MEMORY_FIELDS = ("mem",)
"""Rows that hold program data; every other row holds codes, flags or 0 between passes."""
OFFSET_FIELDS = ("resmask",)
"""Working rows the control layers fill with gate offsets (0 or -GATE_BIG; the d_h x d_w
result mask): checked after the control layers, then taken as [-GATE_BIG, 0] by the bounds."""
CHUNK_ENTRIES = 2 ** 18
"""Entries of the constant rows' contribution to a layer's units computed at a time (2 MiB
in float64): whole, it was units x column patterns, up to 3,453 x 5,517 (150 MB)."""


class FleqActiveEvaluator:
    """Block-selective FLEQ passes for one model; `unsupported` says why not, when not."""

    fused = None
    """The compiled form of its pass, if any: CUDA graphs on a GPU (set by the executor,
    vm/runtime/graphed.py `FleqGraphedPasses`); the Runner asks."""

    def __init__(self, model: LoopedTransformer, weights: MachineWeights, layout: Layout,
                 geometry: FleqGeometry, dtype: str, exact_moves: bool,
                 checkpoint: Checkpoint | None = None) -> None:
        """`checkpoint` is called with the name of each part of the checks on the weights
        before it begins (each layer's structure and bounds, each try of the operand bound):
        they take seconds on a wide program, which a time limit stops between them by
        raising."""
        checkpoint = checkpoint or no_checkpoint
        self.model, self.weights, self.layout = model, weights, layout
        self.blocks = len(geometry.blocks)
        self.unsupported: str | None = None
        self.bound = 0.0
        """The operand bound: largest |value| the guard allows in rows copied from memory."""
        self.finite = float(np.finfo(dtype).max) / 2.0 ** FINITE_SHIFT
        self.memory_limit = self.finite ** 0.5
        """|memory| allowed (read by the write head only: a finiteness bound)."""
        eps = float(np.finfo(dtype).eps)
        self.rounding = 1.0 + 4.0 * (max(weights.rows, weights.columns) + 8) * eps
        """Each layer's bounds are widened by this factor: a softmax's weights sum to at
        most 1 + n eps, and each sum of k terms rounds by at most k eps of its magnitude."""
        terms = max(int(np.count_nonzero(layer.ffn.W1, axis=1).max(initial=0)) + 1
                    for layer in weights.layers)
        constants = constant_rows(geometry, layout)
        self._constant_mask = np.abs(constants).sum(axis=1) > 0
        self._constants = constants
        self.block_columns = [geometry.block_columns(i) for i in range(self.blocks)]
        self.part_blocks: list[list[frozenset[int]]] = []
        self._offset_mask = np.zeros(weights.rows, dtype=bool)
        for name in OFFSET_FIELDS:
            self._offset_mask[layout[name]] = True
        if not exact_moves:
            self.unsupported = "the write head does not move at an exact temperature"
        elif 2 * terms * eps > GATE_SLACK:
            self.unsupported = "units with too many terms for the gate's rounding slack"
        elif model.attention != "masked" or self.blocks == 0:
            self.unsupported = "needs masked attention and function blocks"
        else:
            self.unsupported = self._structure(checkpoint)
            if self.unsupported is None:
                self.bound = self._operand_bound(checkpoint)
                if self.bound < 1.0:
                    self.unsupported = "no operand bound keeps every block unit at exactly 0"
        self.unit_gates: list[list[int | None] | None] = [None] * len(model.layers)
        """For each block layer whose units run in parts, each part's block (None: units
        without a gate, always run); None for layers that run every unit."""
        if self.unsupported is None:
            gate_rows = self._gate_rows()
            last = len(model.layers) - 1
            for index, layer in enumerate(model.layers):
                if CONTROL_LAYERS <= index < last and layer.ffn.parts:
                    self.unit_gates[index] = [None if gate is None else gate_rows[gate]
                                              for gate in layer.ffn.part_gates]
        self.selector = layout["cur_m"]
        self.scratch = model.scratch
        device = model.layers[0].ffn.b2.device
        torch_dtype = model.layers[0].ffn.b2.dtype
        self._constant_rows = torch.as_tensor(np.flatnonzero(self._constant_mask),
                                              device=device)
        self._constant_values = torch.as_tensor(constants[self._constant_mask][:, None, :],
                                                dtype=torch_dtype, device=device)
        values = np.flatnonzero(~self._constant_mask & ~self._offset_mask)
        self._value_rows = torch.as_tensor(values, device=device)
        self._offset_rows = torch.as_tensor(np.flatnonzero(self._offset_mask), device=device)
        self._limits = torch.as_tensor(self._row_limits(self.bound)[values], dtype=torch_dtype,
                                       device=device)

    # -- checks on the weights ---------------------------------------------------------
    def _gate_rows(self) -> dict[int, int]:
        return {self.layout.row(f"gblock{i}"): i for i in range(self.blocks)}

    def _structure(self, checkpoint: Checkpoint) -> str | None:
        """Why the weights do not allow skipping unselected blocks, or None; fills
        `part_blocks` (for each layer, the blocks of each of its attention parts).
        `checkpoint` is called before each layer."""
        gates = self._gate_rows()
        gate_list = np.array(sorted(gates))
        layers = self.weights.layers
        last = len(layers) - 1
        reads: dict[int, set[int]] = {i: set() for i in range(self.blocks)}
        writes: dict[int, set[int]] = {i: set() for i in range(self.blocks)}
        ungated_reads: set[int] = set()
        for index, layer in enumerate(layers):
            checkpoint(f"checking layer {index + 1} of {len(layers)}")
            for head in layer.heads:
                if self._constant_mask[head.written_rows].any():
                    return f"a head of layer {index} writes a constant row"
            written = np.flatnonzero(np.abs(layer.ffn.W2).sum(1) + np.abs(layer.ffn.b2))
            if self._constant_mask[written].any():
                return f"a unit of layer {index} writes a constant row"
            owners = []
            if CONTROL_LAYERS <= index < last and (
                    self._offset_mask[written].any()
                    or any(self._offset_mask[head.written_rows].any() for head in layer.heads)):
                return f"layer {index} writes a result mask row"
            if CONTROL_LAYERS <= index < last:
                for head in layer.heads:
                    found = [gates[int(r)] for r in gate_list if head.K[:, r].any()]
                    if len(found) != 1:
                        return f"a head of layer {index} has no single block gate"
                    block = found[0]
                    owners.append(block)
                    rows = head.written_rows
                    used = np.flatnonzero(np.abs(head.Q).sum(0) + np.abs(head.K).sum(0)
                                          + np.abs(head.V[rows]).sum(0))
                    reads[block].update(int(r) for r in used if int(r) not in gates)
                    writes[block].update(int(r) for r in rows)
                ffn = layer.ffn
                for unit in range(ffn.width):
                    found = [gates[int(r)] for r in gate_list if ffn.W1[unit, r] != 0]
                    if len(found) > 1:
                        return f"a unit of layer {index} reads two block gates"
                    used = {int(r) for r in np.flatnonzero(ffn.W1[unit])}
                    if found:
                        reads[found[0]].update(used - set(gates))
                        writes[found[0]].update(int(r) for r in np.flatnonzero(ffn.W2[:, unit]))
                    else:
                        ungated_reads.update(used)
                layer_model = self.model.layers[index]
                segments = layer_model.part_heads or [tuple(range(len(layer.heads)))]
                self.part_blocks.append([frozenset(owners[h] for h in segment)
                                         for segment in segments])
            else:
                self.part_blocks.append([])
        for i in range(self.blocks):
            for j in range(self.blocks):
                if i != j and reads[i] & writes[j]:
                    return f"block {i} reads rows block {j} writes"
        block_written = set().union(*writes.values())
        if ungated_reads & block_written:
            return "a block layer unit without a block gate reads rows blocks write"
        return self._last_layer(layers[last], block_written)

    @staticmethod
    def _last_layer(layer, block_written: set[int]) -> str | None:
        """The last layer reads block-written rows only through its heads' values and
        clear units; None when so."""
        rows = np.array(sorted(block_written), dtype=int)
        for head in layer.heads:
            if np.abs(head.Q[:, rows]).sum() + np.abs(head.K[:, rows]).sum():
                return "the write head's queries or keys read rows blocks write"
        ffn = layer.ffn
        for unit in np.flatnonzero(np.abs(ffn.W1[:, rows]).sum(1)):
            used = np.flatnonzero(ffn.W1[unit])
            out = np.flatnonzero(ffn.W2[:, unit])
            coef = ffn.W1[unit, used[0]] if len(used) == 1 else 0.0
            if not (len(used) == 1 and abs(coef) == 1.0 and ffn.b1[unit] == 0.0
                    and list(out) == list(used) and ffn.W2[used[0], unit] == -coef):
                return "the last layer reads rows blocks write other than to clear them"
        return None

    def _row_limits(self, operands: float) -> np.ndarray:
        """Largest |value| allowed per row after the control layers: `operands` in rows the
        control layers' heads copy from memory (operands, the flag, the old value),
        `memory_limit` in memory, 1 in the other rows the control layers write and in the
        program's own rows (pc, instructions), 0 in working rows not written yet (the last
        layer cleared them). Constant and offset rows are checked exactly instead (0 here)."""
        limits = np.zeros(self.weights.rows)
        for name in self.layout.persistent:
            limits[self.layout[name]] = 1.0
        control = self.weights.layers[:CONTROL_LAYERS]
        for layer in control:
            limits[np.flatnonzero(np.abs(layer.ffn.W2).sum(1) + np.abs(layer.ffn.b2))] = 1.0
        memory = np.zeros(self.weights.rows, dtype=bool)
        for name in MEMORY_FIELDS:
            memory[self.layout[name]] = True
        for layer in control:
            for head in layer.heads:
                if np.abs(head.V[:, memory]).sum():
                    limits[head.written_rows] = operands
        limits[memory] = self.memory_limit
        limits[self._constant_mask | self._offset_mask] = 0.0
        return limits

    def _outside(self) -> np.ndarray:
        """(blocks, n): True in the columns outside each block."""
        outside = np.ones((self.blocks, self.weights.columns), dtype=bool)
        for i, columns in enumerate(self.block_columns):
            outside[i, columns.start:columns.stop] = False
        return outside

    def _prepare(self, checkpoint: Checkpoint) -> list[dict[str, np.ndarray]]:
        """Each layer's weights in the form `_propagate` uses: absolute values, the maxima
        over the columns of the constant rows' exact contribution to each unit, block units'
        worst case outside their block. `checkpoint` is called before each layer's heads and
        each half of its units (up to 0.2 s each on a 20-sample `ltvm train --hidden 16`)."""
        gates = self._gate_rows()
        constant = self._constant_mask
        C = self._constants[constant]
        outside = self._outside()
        prepared = []
        offset = self._offset_mask
        free = ~constant & ~offset
        layers = self.weights.layers
        for index, layer in enumerate(layers[CONTROL_LAYERS:], CONTROL_LAYERS):
            part: dict[str, np.ndarray] = {"free": free, "offset": offset}
            if layer.heads:
                checkpoint(f"bounding the heads of layer {index + 1} of {len(layers)}")
                part["Q"] = np.abs(np.concatenate([head.lam * head.Q for head in layer.heads]))
                part["K"] = np.abs(np.concatenate([head.K for head in layer.heads]))
                part["starts"] = np.cumsum([0] + [head.Q.shape[0] for head in layer.heads])[:-1]
                part["V"] = np.zeros_like(layer.heads[0].V)
                for head in layer.heads:  # |V| of the rows each writes: 61 heads of 2118 x
                    rows = head.written_rows  # 2118 took 1.5 s as whole matrices
                    part["V"][rows] += np.abs(head.V[rows])
            ffn = layer.ffn
            if ffn.width:
                units = f"bounding the units of layer {index + 1} of {len(layers)}"
                checkpoint(f"{units}, part 1 of 2")
                # np.compress, abs in place: a boolean index and abs took 3 times as long
                top, largest, worst, mass = _constant_maxima(
                    np.compress(constant, ffn.W1, axis=1), C,
                    [(np.flatnonzero(ffn.W1[:, row]), outside[block])
                     for row, block in gates.items()])
                used = np.compress(free, ffn.W1, axis=1)
                part["W1"] = np.abs(used, out=used)
                part["raised"] = np.maximum(-ffn.W1[:, offset], 0.0).sum(1) * GATE_BIG
                checkpoint(f"{units}, part 2 of 2")
                part["top"] = ffn.b1 + top
                part["size"] = (largest + np.abs(ffn.b1)
                                + np.abs(ffn.W1[:, offset]).sum(1) * GATE_BIG)
                part["worst"] = worst + ffn.b1
                part["mass"] = mass + np.abs(ffn.b1)
                part["W2"] = np.abs(ffn.W2)
                part["b2"] = np.abs(ffn.b2)
            prepared.append(part)
        return prepared

    def _propagate(self, operands: float, prepared: list[dict[str, np.ndarray]]) -> bool:
        """Does every pass whose state after the control layers is within
        `_row_limits(operands)` (constant and offset rows exact) keep every value below
        `finite` and every block unit off outside its block?"""
        constant = self._constant_mask
        fixed = np.abs(self._constants[constant]).max(axis=1)
        offset = self._offset_mask
        bound = self._row_limits(operands)
        bound[constant] = fixed
        bound[offset] = GATE_BIG
        limit = self.finite
        with np.errstate(over="ignore", invalid="ignore"):
            for part in prepared:
                if "Q" in part:
                    scores = np.add.reduceat((part["Q"] @ bound) * (part["K"] @ bound),
                                             part["starts"])
                    if not np.all(scores < limit):
                        return False
                    bound = (bound + part["V"] @ bound) * self.rounding
                    bound[constant] = fixed
                if "W1" in part:
                    free = part["free"]
                    variable = part["W1"] @ bound[free] + part["raised"]
                    if not (np.all(variable + part["worst"]
                                   <= -GATE_SLACK * (variable + part["mass"]))
                            and np.all(variable + part["size"] < limit)):
                        return False
                    bound = (bound + part["W2"] @ np.maximum(variable + part["top"], 0.0)
                             + part["b2"]) * self.rounding
                    bound[constant] = fixed
                bound[offset] = GATE_BIG
                if not np.all(bound < limit):
                    return False
        return True

    def _operand_bound(self, checkpoint: Checkpoint) -> float:
        """The largest power of 2^(1/SEARCH_STEPS) that `_propagate` accepts (it is
        monotone: bigger states have bigger bounds), by bisection; 0 if none from 2^0.
        `checkpoint` is called before each part of `_prepare` and each try."""
        prepared = self._prepare(checkpoint)
        checkpoint("searching the operand bound, try 1")
        if not self._propagate(1.0, prepared):
            return 0.0
        low, high = 0, (int(np.log2(self.finite)) + 1) * SEARCH_STEPS
        tries = 1
        while high - low > 1:
            tries += 1
            checkpoint(f"searching the operand bound, try {tries}")
            middle = (low + high) // 2
            if self._propagate(2.0 ** (middle / SEARCH_STEPS), prepared):
                low = middle
            else:
                high = middle
        return 2.0 ** (low / SEARCH_STEPS)

    # -- one pass --------------------------------------------------------------------
    def _checks(self, X: torch.Tensor) -> torch.Tensor:
        """The guard's three conditions on X (see `problem`) as a bool tensor, unsynced."""
        constants = X.index_select(0, self._constant_rows)
        offsets = X.index_select(0, self._offset_rows)
        # NaN propagates through abs and amax, and fails the comparison below (aminmax along
        # the rows is slower on the CPU and, with its max of high and -low, kernels more).
        largest = X.flatten(1).abs().amax(1).index_select(0, self._value_rows)
        return torch.stack(((constants == self._constant_values).all(),
                            ((offsets == 0) | (offsets == -GATE_BIG)).all(),
                            (largest <= self._limits).all()))

    def problem(self, X: torch.Tensor) -> str | None:
        """Why X, after the control layers, does not let the pass skip blocks; or None."""
        return self._explain(self._checks(X).tolist())

    def _explain(self, checks: list[bool]) -> str | None:
        if not checks[0]:
            return "constant rows equal to the geometry's punchcard values"
        if not checks[1]:
            return "result mask rows 0 or -2^60"
        if not checks[2]:
            return (f"finite values, |operands| <= {self.bound:g}, unwritten working rows 0, "
                    "control rows within [-1, 1]")
        return None

    def step_(self, X: torch.Tensor, step: int = 0, strict: bool = False) -> bool:
        """One pass in place on X (rows, batch, n); True when blocks were skipped. The
        control layers run in full; the guard looks at X after them. The selected blocks
        (read after layer 0) and the guard's result reach the host in one sync."""
        problem, selected = self.verdict(self.control_(X).tolist())
        if problem is not None:
            return self._full(X, CONTROL_LAYERS, step, strict, problem)
        self.rest_(X, selected)
        return True

    def control_(self, X: torch.Tensor) -> torch.Tensor:
        """The control layers, in full and in place; then the guard's three conditions and
        each block's selector (non-zero `cur_m` after layer 0), as one bool tensor on X's
        device, unsynced (`verdict` reads it)."""
        model = self.model
        flags = None
        for index, layer in enumerate(model.layers[:CONTROL_LAYERS]):
            layer.attend(X, model.attention, model.scratch, model.mask_bias)
            layer.ffn(X)
            if index == 0:
                flags = X[self.selector, :, :self.scratch].ne(0).flatten(1).any(1)
        return torch.cat((self._checks(X), flags))

    def verdict(self, found: list[bool]) -> tuple[str | None, frozenset[int]]:
        """From `control_`'s result: why the rest of the pass cannot skip blocks (None when
        it can), and the blocks it must run."""
        return (self._explain(found[:GUARD_CHECKS]),
                frozenset(i for i, flag in enumerate(found[GUARD_CHECKS:]) if flag))

    def rest_(self, X: torch.Tensor, selected: frozenset[int]) -> None:
        """The layers after the control layers, in place, with only the `selected` blocks'
        heads and units in the block layers."""
        model = self.model
        mode, scratch, bias = model.attention, model.scratch, model.mask_bias
        for index in range(CONTROL_LAYERS, len(model.layers)):
            layer = model.layers[index]
            parts = self.part_blocks[index]
            if parts:
                for part, blocks in zip(layer.parts or [layer.attention], parts):
                    if blocks & selected:
                        layer.attend_part(X, part, mode, scratch, bias)
            else:
                layer.attend(X, mode, scratch, bias)
            gates = self.unit_gates[index]
            layer.ffn(X, None if gates is None else
                      [i for i, block in enumerate(gates) if block is None or block in selected])

    def _full(self, X: torch.Tensor, first: int, step: int, strict: bool, expected: str
              ) -> bool:
        """The layers from `first` on in full (the pass's earlier layers ran in full too),
        or PrecisionError when strict; False."""
        if strict:
            raise PrecisionError(step, first, 0, "state", float(X.abs().amax()), expected)
        model = self.model
        for layer in model.layers[first:]:
            layer.attend(X, model.attention, model.scratch, model.mask_bias)
            layer.ffn(X)
        return False

    def start(self, X: torch.Tensor, strict: bool = False, fused: bool = False
              ) -> "FleqActiveRun":
        """A run bound to X (rows, batch, n), like `ActiveEvaluator.start`; `fused`: its
        passes may use the evaluator's compiled form (CUDA graphs, vm/runtime/graphed.py)."""
        if self.unsupported is not None:
            raise ValueError(f"active evaluation is not available: {self.unsupported}")
        return FleqActiveRun(self, X, strict, self.fused if fused else None)


def _column_patterns(C: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, inverse): a column of each distinct bit pattern of C's `rows`, and each
    column's pattern. Columns with the same bits in the rows a unit reads give it the same
    products, so its maxima over the columns are its maxima over these patterns."""
    if not len(rows):
        return np.zeros(1, dtype=int), np.zeros(C.shape[1], dtype=int)
    keys = np.ascontiguousarray(C[rows].T).view(np.dtype((np.void, C.itemsize * len(rows))))
    _, first, inverse = np.unique(keys[:, 0], return_index=True, return_inverse=True)
    return first, inverse


def _constant_maxima(W: np.ndarray, C: np.ndarray,
                     gated: list[tuple[np.ndarray, np.ndarray]]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per unit (row of W, its weights on the constant rows C), the maxima over the
    columns of offsets = W @ C, the constant rows' exact contribution: largest value,
    largest |value|, largest value in the columns of each (units, columns) of `gated`
    (-inf for other units; a later entry wins), and largest value of |W| @ |C|.

    Only a column of each pattern of the rows W reads (`_column_patterns`: 2 to 103 of
    5,517 columns on `ltvm train --hidden 16`), CHUNK_ENTRIES at a time; each entry is the
    same BLAS product over all of C's rows as in the whole W @ C, where the other rows meet
    weights 0 and add only signed zeros: the maxima are the whole product's, bit for bit
    (tests/test_active_fleq.py compares them)."""
    first, inverse = _column_patterns(C, np.flatnonzero(np.any(W != 0, axis=0)))
    P = C[:, first]
    abs_W, abs_P = np.abs(W), np.abs(P)
    blocks = []
    for units, columns in gated:
        seen = np.zeros(len(first), dtype=bool)
        seen[inverse[columns]] = True
        blocks.append((units, seen))
    count = W.shape[0]
    top, largest, mass = np.empty(count), np.empty(count), np.empty(count)
    worst = np.full(count, -np.inf)
    step = max(1, CHUNK_ENTRIES // len(first))
    for start in range(0, count, step):
        chunk = slice(start, start + step)
        offsets = W[chunk] @ P
        top[chunk] = offsets.max(axis=1)
        for units, seen in blocks:
            inside = units[np.searchsorted(units, start):np.searchsorted(units, start + step)]
            if len(inside):
                worst[inside] = offsets[np.ix_(inside - start, seen)].max(axis=1)
        largest[chunk] = np.abs(offsets, out=offsets).max(axis=1)
        mass[chunk] = (abs_W[chunk] @ abs_P).max(axis=1)
    return top, largest, worst, mass


class FleqActiveRun:
    """Passes of one evaluator on one bound X (the interface the executor's Runner uses)."""

    def __init__(self, evaluator: FleqActiveEvaluator, X: torch.Tensor, strict: bool,
                 fused: FleqGraphedPasses | None = None) -> None:
        self.evaluator, self.X, self.strict, self.fused = evaluator, X, strict, fused
        self.fallbacks = 0
        """Passes the guard sent to the full pass."""
        self.graph = None
        """The compiled form's captured graphs of this run, kept here so that they and
        their copy of X go with the run."""

    def step(self, step: int = 0) -> bool:
        """One pass in place; True when unselected blocks were skipped."""
        skipped = self.evaluator.step_(self.X, step, self.strict)
        self.fallbacks += not skipped
        return skipped

    def restart(self) -> None:
        """X was replaced in place (`Runner.restart`): the graphs, bound to X's storage and
        nothing else, stay valid."""

    def fused_steps(self, count: int, record: torch.Tensor, pc_rows: np.ndarray,
                    threads: int | None = None) -> int:
        """Up to `count` passes by the compiled form, each after recording the program
        counters (rows `pc_rows` of the scratch column) into `record[i]`; it stops before
        a pass whose guard fails, which the eager `step` then runs (in full, or raising
        when strict). 0 without a compiled form."""
        if self.fused is None:
            return 0
        return self.fused.passes(self, count, record, pc_rows, threads)[0]
