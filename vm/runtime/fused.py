"""A fused active pass: the whole of `ActiveRun`'s pass in one compiled call (numba).

The torch active pass (vm/runtime/active.py) issues about 150 small operations a pass, so
at batch 1 it is bound by per-operation overhead. This module runs the same pass, on the
same columns, with the same guard, in numba: a program alone runs all of a call's passes on
its own slices of X and the cache; a batch runs in blocks of programs (blocks on a pool of
threads when there are several: the kernels release the GIL), whose passes go in lockstep
so that each ReLU layer is one vector sweep over every evaluated column of the block.
Programs log the columns they commit, and programs that ran ahead of another's first
unproven pass are rolled back to it (docs/speed.md, "The fused pass").

Bit-identity with the full pass does not depend on the order of any sum here: every
product of a weight and an input, and every sum of them, is checked at run time to be a
multiple of 2^-F whose numerators add up, in absolute value, to less than 2^p (p = 24 in
float32, 52 in float64). Then every partial sum in any order is exactly representable, and
the full pass's products (whatever order BLAS takes) give the same bits. A pass that does
not meet this, or any of the active pass's own guard conditions, is handed back to the
torch active pass, which either proves it there or runs it in full (or raises in strict
mode). A head whose scratch query is zero averages every value into the scratch column;
those rows are carried as an interval containing every value averaged, which the next
ReLU layer must provably clear (`_feed_forward_junk`). Heads of one layer that write the
same rows make the fused pass decline the machine up front.

numba is optional (`pip install ltvm[fast]`); without it runs use the torch active pass.
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait

import numpy as np
import torch

from vm.runtime.active import SKIP_BOUND, ActiveEvaluator, ActiveRun, FusedNotCompiled
from vm.runtime.config import FUSED_CHECK_EVERY

try:
    import numba
    from numba.core import event as numba_events
except ImportError:  # pragma: no cover - exercised where numba is not installed
    numba = None

MAX_FRACTION_BITS = 40
"""Inputs needing more fractional bits than this are not checked for exact sums."""
FLOAT32_EXACT = 2.0 ** 24
"""Integers below this are exact in float32, and so is every sum of them that stays below."""
INT16_EXACT = 2.0 ** 15
"""A head whose terms' magnitudes add up to less than this has its scores summed in int16
(`_head_scores`; a live head's key is also chosen in int16): every partial sum is then an
integer that int16 holds exactly, and a vector sweep takes twice the columns it takes in
int32."""
MIRROR_MAX = 127
"""Largest |numerator| of a cached query or key entry the 8-bit mirror holds."""
NO_SCORE = np.int32(-(2 ** 31))
"""A score slot of a column evaluated apart (below every real score, which is < 2^24)."""
NARROW_NO_SCORE = np.int16(-(2 ** 15))
"""NO_SCORE in a head's int16 scores (below every one of them: their magnitude is below
INT16_EXACT)."""
SCAN_BLOCK = 64
"""Columns a threshold scan counts in one branch-free sweep before it looks closer."""
LOCKSTEP_BLOCK = 32
"""Most programs one thread runs in lockstep: their evaluated columns are the lanes of each
ReLU layer's vector sweeps (about 64 columns of ~100 rows stay in a core's L2 cache)."""
LOCKSTEP_BYTES = 2 ** 20
"""What a block's programs may read by attention in a pass (score mirror, own scores, score
buffers): each layer's attention visits every program of the block in turn, so a block
larger than a core's L2 cache reloads them from memory at every layer (n = 4096, blocks of
32 programs of about 115 KB: batch 256 at 0.82x batch 16's rate)."""


def available() -> bool:
    """Whether numba is installed, so fused passes can be compiled."""
    return numba is not None


def thread_count(requested: int | None) -> int:
    """Threads a fused pass over many programs uses: `requested`, at most one a core."""
    if numba is None:
        return 1
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count()) or 1
    return min(requested or cores, cores)


_pool: ThreadPoolExecutor | None = None
"""Threads that run blocks of a batch side by side, made at the first batch that uses them."""


def _wait_through_interrupts(jobs: list[Future]) -> None:
    """Return only once every job has ended, then raise a Ctrl-C (or the command line's
    SIGTERM) that came meanwhile: a thread still writing X after the caller was interrupted
    (the REPL goes on with the same machine) would change it under the next command."""
    interrupted = None
    while True:
        try:
            wait(jobs)
            break
        except BaseException as interrupt:  # a signal's exception: raised once all end
            interrupted = interrupt
    if interrupted is not None:
        raise interrupted


def _thread_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(thread_count(None), thread_name_prefix="ltvm-fused")
    return _pool


def _forget_the_pool() -> None:
    """In a forked child: the pool's threads stayed in the parent, so work handed to the
    copied pool would never run and its caller would wait for ever."""
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_the_pool)


def fraction_bits(matrix: np.ndarray) -> int | None:
    """The least F with every entry times 2^F an integer, None beyond MAX_FRACTION_BITS."""
    values = np.asarray(matrix, dtype=np.float64)
    for bits in range(MAX_FRACTION_BITS + 1):
        scaled = values * 2.0 ** bits
        if np.array_equal(scaled, np.floor(scaled)):
            return bits
    return None


def _integral(matrix: np.ndarray, bits: int) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(matrix, dtype=np.float64) * 2.0 ** bits)


def _sparse(matrix: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """matrix * 2^bits in CSR form (row pointers, column indices, values): the machine's
    matrices read a few rows each, and only the non-zero terms need adding."""
    scaled = np.atleast_2d(_integral(matrix, bits))
    rows, columns = np.nonzero(scaled)
    pointers = np.searchsorted(rows, np.arange(scaled.shape[0] + 1)).astype(np.int64)
    return pointers, columns.astype(np.int64), scaled[rows, columns]


def _entry_rows(pointers: np.ndarray) -> np.ndarray:
    """The row of each entry of a CSR matrix with these row pointers (`_project`)."""
    return np.repeat(np.arange(len(pointers) - 1), np.diff(pointers)).astype(np.int64)


def _lattice_exact(matrix: np.ndarray, bits: int, limit: float) -> bool:
    """Whether W x is exact for every x on the lattice {-1, 0, 1}: each row's numerators
    (W times 2^bits) add up, in absolute value, to less than `limit` (`_project`)."""
    return bool(np.abs(_integral(matrix, bits)).sum(axis=1, initial=0.0).max(initial=0.0)
                < limit)


def _lane_bounds(W1: np.ndarray, b1: np.ndarray, W2: np.ndarray, b2: np.ndarray, first: int,
                 second: int) -> tuple[float, float, float, float]:
    """A ReLU layer's largest |bias| and absolute row sum of its integer weight numerators,
    for each of its two matrices (`_lane_feed_forward` bounds every partial sum by them)."""
    return (float(np.max(np.abs(b1), initial=0.0)) * 2.0 ** first,
            float(np.max(np.abs(W1).sum(axis=1), initial=0.0)) * 2.0 ** first,
            float(np.max(np.abs(b2), initial=0.0)) * 2.0 ** second,
            float(np.max(np.abs(W2).sum(axis=1), initial=0.0)) * 2.0 ** second)


def _lane_weights(W1: list[tuple], b1: list[np.ndarray], W2: list[tuple], b2: list[np.ndarray],
                  bits: list[tuple[int, int]], dtype: type) -> tuple:
    """The ReLU layers' numerators and scales in the lanes' dtype (the run's: float32 lanes
    fill twice as many a vector). A numerator that dtype cannot hold is no hazard: the
    layer's bound (`_lane_bounds`) is at least that numerator, so a lane that reads it is
    refused, and one whose read rows are all zero multiplies it by zero (kept finite here)."""
    largest = np.finfo(dtype).max

    def cast(values: np.ndarray) -> np.ndarray:
        return np.clip(values, -largest, largest).astype(dtype)
    scales = np.array([(2.0 ** (first + second), 2.0 ** first, 2.0 ** -(first + second))
                       for first, second in bits], dtype).reshape(-1, 3)
    return (tuple(cast(values) for _, _, values in W1), tuple(cast(part) for part in b1),
            tuple(cast(values) for _, _, values in W2), tuple(cast(part) for part in b2), scales)


def _columns_of(matrices: list[tuple]) -> tuple[tuple, tuple, tuple]:
    """Per-layer CSR triples as three tuples (pointers, indices, values): numba's parallel
    loops take tuples of arrays, not tuples of tuples."""
    return tuple(zip(*matrices)) if matrices else ((), (), ())


def _scoring(mirrored: list[tuple], reach: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """The 8-bit mirror's layout: which projection rows it holds (every head's query and key
    rows), their scale 2^F, their largest |numerator| (from the weights' row sums: cached
    columns are on the {-1, 0, 1} lattice), each group's first query row, first key row and
    first head, each head's bound on |own score| and its (query row, key row, r). None when
    some numerator could exceed MIRROR_MAX."""
    rows, scale, group_rows, head_rows = [], [], [], []
    for start, bits, group in mirrored:
        span = group.count * group.r
        query_first = len(rows)
        rows += range(start + group.q.start, start + group.q.start + span)
        key_first = len(rows)
        rows += range(start + group.key.start, start + group.key.start + span)
        scale += [2.0 ** bits] * (2 * span)
        group_rows.append((query_first, key_first, len(head_rows)))
        head_rows += [(query_first + h * group.r, key_first + h * group.r, group.r)
                      for h in range(group.count)]
    rows_array = np.array(rows, np.int64)
    scale_array = np.array(scale, np.float64)
    largest = reach[rows_array] * scale_array
    if (largest > MIRROR_MAX).any():
        return None
    own_bound = np.array([sum(largest[q + t] * largest[k + t] for t in range(r))
                          for q, k, r in head_rows], np.float64)
    return (rows_array, scale_array, largest, np.array(group_rows, np.int64).reshape(-1, 3),
            own_bound, np.array(head_rows, np.int64).reshape(-1, 3))


def _columns_apart(batch: int, rows: int, slots: int) -> np.ndarray:
    """A (batch, rows, slots) array whose slots (a program's evaluated columns) each lie
    contiguous in memory: a pass reads and writes a column's rows together, and the two
    columns most passes use then take 2 x rows x 8 bytes of cache, not a line per row."""
    return np.empty((batch, slots, rows)).transpose(0, 2, 1)


class FusedPass:
    """The static tables of one evaluator's machine, laid out for the compiled pass.

    `unsupported` says why this machine cannot be fused (then None of the rest is set)."""

    keeps_own_scores = False
    """Its passes do not update the torch pass's own scores: after them the cache is rebuilt
    before a torch pass."""

    def __init__(self, evaluator: ActiveEvaluator, weights, compiles: bool = True) -> None:
        """`compiles`: whether a pass may compile the kernels it calls (numba, up to a
        minute each on a cold cache); without, a pass whose kernels numba has neither in
        the process nor in its cache on disk raises FusedNotCompiled instead."""
        self.evaluator, self.compiles = evaluator, compiles
        self._ready_kernels: set = set()
        self.unsupported = self._build(evaluator, weights)

    def _build(self, ev: ActiveEvaluator, weights) -> str | None:
        if numba is None:
            return "numba is not installed"
        if ev.device.type != "cpu":
            return "fused passes run on the CPU"
        if ev.unsupported is not None:
            return ev.unsupported
        self.limit = 2.0 ** (24 if ev.dtype == torch.float32 else 52)
        att_read, att_W, att_bits, att_off, att_lattice, present = [], [], [], [], [], []
        att_rows: list[np.ndarray] = []
        reach: list[np.ndarray] = []
        mirrored: list[tuple] = []
        groups: list[tuple] = []
        targets: list[np.ndarray] = []
        layer_groups = []
        target_start = 0
        for layer in ev.layers:
            if layer is None:
                present.append(False)
                att_read.append(np.zeros(0, np.int64))
                att_W.append(_sparse(np.zeros((0, 0)), 0))
                att_rows.append(np.zeros(0, np.int64))
                att_bits.append(0)
                att_off.append(0)
                att_lattice.append(False)
                layer_groups.append((len(groups), len(groups)))
                continue
            matrix = layer.W.double().cpu().numpy()
            bits = fraction_bits(matrix)
            if bits is None:
                return "attention weights are not dyadic"
            layer_targets = layer.targets.cpu().numpy()
            if len(np.unique(layer_targets)) != len(layer_targets):
                return "heads of one layer write the same rows"
            present.append(True)
            att_read.append(layer.read.cpu().numpy().astype(np.int64))
            att_W.append(_sparse(matrix, bits))
            att_rows.append(_entry_rows(att_W[-1][0]))
            att_bits.append(bits)
            att_off.append(layer.rows.start)
            att_lattice.append(_lattice_exact(matrix, bits, self.limit))
            reach.append(np.abs(matrix).sum(axis=1))
            first = len(groups)
            offset = target_start
            for group in layer.groups:
                mirrored.append((layer.rows.start, bits, group))
                groups.append((group.count, group.r, group.k, group.q.start, group.key.start,
                               group.v.start, offset, group.lam))
                offset += group.count * group.k
            layer_groups.append((first, len(groups)))
            targets.append(layer_targets.astype(np.int64))
            target_start += len(layer_targets)
        ffn_read, ffn_W1, ffn_b1, ffn_rows, ffn_W2, ffn_b2, ffn_bits = [], [], [], [], [], [], []
        ffn_touch, ffn_bounds = [], []
        for layer in weights.layers:
            ffn = layer.ffn
            read = np.flatnonzero(np.abs(ffn.W1).sum(axis=0)).astype(np.int64)
            rows = np.asarray(ffn.written_rows, dtype=np.int64)
            first = fraction_bits(np.concatenate([ffn.W1[:, read].ravel(), ffn.b1]))
            second = fraction_bits(np.concatenate([ffn.W2[rows].ravel(), ffn.b2[rows]]))
            if first is None or second is None:
                return "ReLU-layer weights are not dyadic"
            numpy_dtype = np.float32 if ev.dtype == torch.float32 else np.float64
            if any(not np.array_equal(part.astype(numpy_dtype), part)
                   for part in (ffn.W1, ffn.b1, ffn.W2, ffn.b2)):
                return "ReLU-layer weights are not exact in the run's dtype"
            ffn_read.append(read)
            ffn_W1.append(_sparse(ffn.W1[:, read], first))
            ffn_b1.append(_integral(ffn.b1, first))
            ffn_rows.append(rows)
            ffn_W2.append(_sparse(ffn.W2[rows], second))
            ffn_b2.append(_integral(ffn.b2[rows], second))
            ffn_bits.append((first, second))
            ffn_touch.append(np.union1d(read, rows).astype(np.int64))
            ffn_bounds.append(_lane_bounds(ffn.W1[:, read], ffn.b1, ffn.W2[rows], ffn.b2[rows],
                                           first, second))
        reach_rows = np.concatenate(reach) if reach else np.zeros(0)
        self.tables = (
            np.array(present), tuple(att_read), *_columns_of(att_W), np.array(att_bits, np.int64),
            np.array(att_off, np.int64), np.array(att_lattice, np.bool_),
            np.array(layer_groups, np.int64).reshape(-1, 2),
            np.array([g[:7] for g in groups], np.int64).reshape(-1, 7),
            np.array([g[7] for g in groups], np.float64),
            np.concatenate(targets) if targets else np.zeros(0, np.int64),
            tuple(ffn_read), *_columns_of(ffn_W1), tuple(ffn_b1), tuple(ffn_rows),
            *_columns_of(ffn_W2), tuple(ffn_b2), np.array(ffn_bits, np.int64).reshape(-1, 2),
            ev.working.cpu().numpy().astype(np.int64), reach_rows)
        self.lane_dtype = np.float32 if ev.dtype == torch.float32 else np.float64
        self.lane_tables = (tuple(ffn_touch), np.array(ffn_bounds, np.float64).reshape(-1, 4),
                            *_lane_weights(ffn_W1, ffn_b1, ffn_W2, ffn_b2, ffn_bits,
                                           self.lane_dtype))
        self.hidden_width = max((len(part) for part in ffn_b1), default=1)
        scoring = _scoring(mirrored, reach_rows)
        if scoring is None:
            return "query or key projections do not fit the 8-bit score mirror"
        self.mirror_rows, self.mirror_scale, *_, self.head_rows = scoring
        self.tables += (*scoring, tuple(att_rows))
        return None

    def program_bytes(self, rows: int, n: int, itemsize: int) -> int:
        """Bytes a run keeps per program for the compiled pass (`check_memory` counts them):
        the undo log of a window (`_log`), the score mirror, own scores, X by columns and
        its marks (`_mirror`), the workspace (`_workspace`) and the lockstep lanes
        (`_lanes`), as those allocate them."""
        slots, hidden = self.evaluator.capacity + 1, max(self.hidden_width, 1)
        width = self.evaluator.width
        entries = 2 * FUSED_CHECK_EVERY + slots
        log = entries * (8 + rows * itemsize) + (FUSED_CHECK_EVERY + 1) * 8
        mirror = (len(self.mirror_rows) + 4 * len(self.head_rows) + rows * itemsize + 9) * n
        work = (8 * (rows * slots + width * slots + 6 * rows + 3 * hidden + 2 * slots + width)
                + 2 * rows + 14 * n)
        lanes = 8 * slots * (3 * rows + hidden + 6) + 32
        return log + mirror + work + lanes

    def passes(self, run: ActiveRun, count: int, record: torch.Tensor, pc_rows: np.ndarray,
               threads: int | None = None) -> tuple[int, bool]:
        """Up to `count` passes of `run` in place, each after copying the program counters
        (rows `pc_rows` of the scratch column) into `record[i]`; stops before the first
        pass it cannot prove for every program, which the caller evaluates another way.
        Returns the passes made and whether the cache no longer matches X (a program ran
        ahead of that pass and was rolled back). `threads` caps the threads that evaluate
        programs in parallel, each program running all its passes in one region."""
        ev = self.evaluator
        if run.extras_layer is None or any(key not in run.zero_queries
                                           for key in run.self_query):
            return 0, False
        X, cache = run.X.numpy(), run.cache.numpy()
        rows, batch, _ = X.shape
        groups = [(layer.index, number) for layer in ev.layers if layer is not None
                  for number in range(len(layer.groups))]
        self_query = np.array([run.self_query[key] for key in groups])
        zero_scratch = np.array([run.zero_queries[key] for key in groups])
        log = batch > 1
        log_columns, log_values, log_start = self._log(batch, count, rows, X.dtype, log)
        done = np.zeros(batch, np.int64)
        mirror = self._mirror(run, X, cache)
        if mirror is None:
            return 0, False
        work = self._workspace(batch, rows, cache.shape[1], X.shape[2])
        settings = (self_query, zero_scratch, run.extras_layer, ev.capacity, ev.bound,
                    SKIP_BOUND, self.limit, log, log_columns, log_values, log_start, done)
        # The compiled kernels are called from here, one block (or program) at a time,
        # by Python threads where there are several: each numba function that calls
        # another compiles its callee again, and a serial or parallel (prange) wrapper
        # per kernel cost up to a minute of compiling in every fresh process.
        if batch == 1:
            arguments = (0, count, record.numpy(), pc_rows, X, cache, *self.tables, *mirror,
                         work, *settings[:-1])
            self._ready(_program, arguments)
            done[0] = _program(*arguments)
        else:
            workers = min(batch, thread_count(threads))
            read = (len(self.mirror_rows) + 4 * len(self.head_rows) + 12) * X.shape[2]
            size = max(1, min(LOCKSTEP_BLOCK, LOCKSTEP_BYTES // read, -(-batch // workers)))
            blocks = -(-batch // size)
            arguments = (count, record.numpy(), pc_rows, X, cache, *self.tables,
                         *self.lane_tables, *mirror, work, self._lanes(blocks, size, rows))
            self._ready(_lockstep, (0, min(batch, size), *arguments, 0, *settings))
            nothing_back = (X, done, 0, log_columns, log_values, log_start)
            if self._ready(_rollback, nothing_back):  # machine code now, not at a first
                _rollback(*nothing_back)  # roll-back in the middle of a run
            shares = min(workers, blocks)
            bounds = [blocks * share // shares for share in range(shares + 1)]

            def run_blocks(first: int, last: int) -> None:
                """Blocks first..last-1 in lockstep, one after another: each program runs
                all the call's passes in the one thread that runs its block."""
                for block in range(first, last):
                    _lockstep(block * size, min(batch, (block + 1) * size), *arguments, block,
                              *settings)
            others = [_thread_pool().submit(run_blocks, bounds[share], bounds[share + 1])
                      for share in range(1, shares)]
            try:
                run_blocks(bounds[0], bounds[1])
            finally:
                _wait_through_interrupts(others)
            for other in others:
                other.result()
        least = int(done.min())
        ahead = bool((done > least).any())
        if ahead:
            _rollback(X, done, least, log_columns, log_values, log_start)
            run.fused_state = None
        return least, ahead

    def _ready(self, kernel, arguments: tuple) -> bool:
        """Before this form's first call of `kernel`: where it may not compile, make sure
        numba has the kernel's machine code for these arguments (raising FusedNotCompiled
        if not). Returns whether this was the first call."""
        if kernel in self._ready_kernels:
            return False
        if not self.compiles and not _has_machine_code(kernel, arguments):
            raise FusedNotCompiled(kernel.__name__)
        self._ready_kernels.add(kernel)
        return True

    def _mirror(self, run: ActiveRun, X: np.ndarray, cache: np.ndarray) -> tuple | None:
        """The run's query and key rows as 8-bit numerators (batch, mirrored rows, n) and
        every head's own score (Q x_j).(K x_j) as float32 numerators (batch, heads, n): the
        O(n) scoring reads these, a quarter of the cache's bytes. Then X with each column's
        rows contiguous (batch, n, rows: a column of X itself spans batch x n x rows
        entries, so reading and writing the cell a pass writes missed the cache and the TLB
        at every row) and the marks of the columns a call wrote there (`_write_back`).
        Built from the cache and X whenever the torch pass has written them
        (`run.fused_state` is then None); None when a cached entry is not such a numerator
        (the pass then goes to the torch form)."""
        if run.fused_state is not None:
            return run.fused_state
        batch, _, n = cache.shape
        mirror = np.empty((batch, len(self.mirror_rows), n), np.int8)
        own = np.empty((batch, len(self.head_rows), n), np.float32)
        for b in range(batch):  # one program at a time: no batch-sized float64 temporary
            values = cache[b, self.mirror_rows] * self.mirror_scale[:, None]
            values[:, 0] = 0.0
            mirror[b] = values
            if not np.array_equal(mirror[b], values):
                return None
            for number, (query, key, r) in enumerate(self.head_rows):
                own[b, number] = (mirror[b, query:query + r].astype(np.float32)
                                  * mirror[b, key:key + r]).sum(axis=0)
        dirty = (np.zeros((batch, n), np.bool_), np.zeros((batch, n), np.int64),
                 np.zeros(batch, np.int64))
        run.fused_state = (mirror, own, np.ascontiguousarray(X.transpose(1, 2, 0)), dirty)
        return run.fused_state

    def _workspace(self, batch: int, rows: int, width: int, n: int) -> tuple[np.ndarray, ...]:
        """Every program's scratch arrays for the compiled pass (kept between calls of one
        shape): allocated here, so the pass itself runs without numba's reference counting."""
        shape = (batch, rows, width, n)
        if getattr(self, "_work_shape", None) != shape:
            slots, hidden = self.evaluator.capacity + 1, max(self.hidden_width, 1)
            self._work_shape = shape
            self._work = (_columns_apart(batch, rows, slots),
                          _columns_apart(batch, width, slots),
                          np.empty((batch, rows)), np.empty((batch, hidden)),
                          np.zeros((batch, rows)), np.zeros((batch, rows)),
                          np.empty((batch, n), np.int32), np.empty((batch, n)),
                          np.zeros((batch, hidden), np.int64), np.zeros((batch, hidden), np.int64),
                          np.zeros((batch, slots), np.int64), np.zeros((batch, rows), np.bool_),
                          np.zeros((batch, rows), np.bool_), np.empty((batch, width)),
                          np.empty((batch, slots)), np.empty((batch, rows)),
                          np.empty((batch, n), np.int16))
        return self._work

    def _lanes(self, blocks: int, size: int, rows: int) -> tuple[np.ndarray, ...]:
        """Each block's lanes for `_lockstep` (room for every evaluated column of its
        programs) and its programs' progress, kept between calls of one shape; the
        passes proven in lockstep and those evaluated again alone are counted in
        `lockstep_tally`."""
        shape = (blocks, size, rows)
        if getattr(self, "_lanes_shape", None) != shape:
            lanes, hidden = size * (self.evaluator.capacity + 1), max(self.hidden_width, 1)
            self._lanes_shape = shape
            self._lane_work = (np.zeros((blocks, rows, lanes), self.lane_dtype),
                               np.zeros((blocks, hidden, lanes), self.lane_dtype),
                               np.zeros((blocks, lanes), np.int64),
                               np.zeros((blocks, lanes), np.int64),
                               np.zeros((blocks, lanes), np.int64), np.zeros((blocks, lanes)),
                               np.zeros((blocks, lanes)), np.zeros((blocks, lanes), np.int64),
                               np.zeros((blocks, lanes), np.bool_),
                               np.zeros((blocks, 2), np.int64),
                               np.zeros((blocks, size), np.int64),
                               np.zeros((blocks, size), np.int64),
                               np.zeros((blocks, size), np.int64),
                               np.zeros((blocks, rows, lanes)), np.zeros((blocks, rows, lanes)),
                               np.zeros((blocks, hidden), np.int64),
                               np.zeros((blocks, hidden), np.int64),
                               np.zeros((blocks, size), np.int64))
        return self._lane_work

    def lockstep_tally(self) -> tuple[int, int]:
        """Passes proven in lockstep and passes evaluated again program by program, over
        the calls of the current shape (the tests check that lockstep carries the runs)."""
        tally = getattr(self, "_lane_work", None)
        return (0, 0) if tally is None else tuple(int(v) for v in tally[9].sum(axis=0))

    def _log(self, batch: int, count: int, rows: int, dtype: np.dtype,
             log: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The undo log of a call: room for two columns a pass (the scratch column and the
        written cell) and one pass's worth more. Kept between calls of one batch and grown,
        never shrunk: calls of 4 passes (a thread try) between calls of 124 and 128 made a
        new 16 MB log each time at batch 256, n = 1024 (the pass reads only the room it
        needs; more is harmless)."""
        passes = max(count, FUSED_CHECK_EVERY)
        entries = 2 * passes + self.evaluator.capacity + 1 if log else 0
        shape = (batch, rows, np.dtype(dtype).str)
        if getattr(self, "_log_shape", None) != shape or self._log_arrays[2].shape[1] <= count:
            self._log_shape = shape
            self._log_arrays = (np.empty((batch, entries), np.int64),
                                np.empty((batch, entries, rows), dtype),
                                np.zeros((batch, passes + 1), np.int64))
        return self._log_arrays


class _CompileRefused(Exception):
    """Ends numba's compile of a kernel that `_has_machine_code` only asks about."""


def _has_machine_code(kernel, arguments: tuple) -> bool:
    """Whether numba has machine code for `kernel` on the types of `arguments` without
    compiling: in this process already, or in its cache on disk (then loaded now, as a call
    would load it). numba's own lookup runs (`compile`, which looks in its cache first);
    a listener stops it where it would start compiling."""
    types = tuple(kernel.typeof_pyval(value) for value in arguments)
    if types in kernel.overloads:
        return True
    asking = threading.get_ident()

    class Refuse(numba_events.Listener):
        def on_start(self, event) -> None:
            if event.data["dispatcher"] is kernel and threading.get_ident() == asking:
                raise _CompileRefused

        def on_end(self, event) -> None:
            pass
    try:
        with numba_events.install_listener("numba:compile", Refuse()):
            kernel.compile(types)
    except _CompileRefused:
        return False
    return True


if numba is not None:  # error_model="numpy": no division in the pass can be by zero, so
    # numba's check for one (a branch at every division) is dropped
    _jit = numba.njit(cache=True, fastmath=False, nogil=True, error_model="numpy")
    _inline = numba.njit(cache=True, fastmath=False, nogil=True, inline="always", _nrt=False,
                         error_model="numpy")
    _bare = numba.njit(cache=True, fastmath=False, nogil=True, _nrt=False, error_model="numpy")
else:  # pragma: no cover
    def _jit(function):
        return function
    _inline = _bare = _jit


POWERS_REACH = 256
"""The largest |k| of `_two_to`: exponents in a pass are sums of at most three fraction bit
counts (each <= MAX_FRACTION_BITS), their negatives, and -10."""
_POWERS_OF_TWO = 2.0 ** np.arange(-POWERS_REACH, POWERS_REACH + 1)


@_inline
def _two_to(exponent: int) -> float:
    """2^exponent, exactly, from a table: `2.0 ** k` on an integer k compiles to a libm call
    (about 24 ns), and a pass takes dozens."""
    return _POWERS_OF_TWO[exponent + POWERS_REACH]


@_inline
def _stored_max(old: float, new: float) -> float:
    """max(old, new) for a cell that is written back either way, in old's or new's dtype.
    Written as `a[i] = max(a[i], x)`, LLVM stores only where the cell changes: a masked
    vector store (vmaskmovpd), microcoded and slow on AMD Zen. Adding +0.0 (exact: only
    -0.0 changes, to 0.0) makes the stored value differ from the loaded one, so the store
    stays a plain one. The lane sweeps keep their flags plain stores the same way: a test
    joins a flag by `&`, not `and` (a branch), and failures are counted, not or-ed in."""
    return max(old, new) + np.float32(0.0)


@_inline
def _scale_bits(values: np.ndarray, count: int) -> int:
    """Least F (<= 40) with values[:count] * 2^F integral, -1 if none."""
    for bits in range(MAX_FRACTION_BITS + 1):
        scale = _two_to(bits)
        exact = True
        for i in range(count):
            scaled = values[i] * scale
            if scaled != math.floor(scaled):
                exact = False
                break
        if exact:
            return bits
    return -1


@_inline
def _fits(values: np.ndarray, count: int, scale: float, limit: float) -> bool:
    """Every value's numerator below 2^p: the value is exactly one of the machine's floats."""
    for i in range(count):
        if abs(values[i] * scale) >= limit:
            return False
    return True


@_inline
def _project(pointers: np.ndarray, indices: np.ndarray, values: np.ndarray,
             entry_rows: np.ndarray, w_bits: int, lattice_exact: bool, read: np.ndarray,
             column: np.ndarray, out: np.ndarray, buffer: np.ndarray, limit: float,
             junk: np.ndarray) -> bool:
    """out = W column[read] exactly (float64), or False when a float sum could round or a
    read row holds a zero-query average. Where every value read is -1, 0 or 1 and the
    layer is `lattice_exact` (`_lattice_exact`), the checks below cannot fail and their
    grid is 2^0, so the sums are made without them: the same terms in the same order, in
    one sweep over the entries (`entry_rows`: each one's row), not a loop a row (a
    projection's rows hold one or two terms each: the per-row loops, and a branch on each
    junk flag, took 2-3 times as long)."""
    off_lattice = 0
    averaged = 0
    for i in range(len(read)):
        averaged += junk[read[i]]
        value = column[read[i]]
        buffer[i] = value
        off_lattice += (value != 0.0) & (value != 1.0) & (value != -1.0)
    if averaged > 0:
        return False
    if lattice_exact and off_lattice == 0:
        unscale = _two_to(-w_bits)
        for i in range(len(pointers) - 1):
            out[i] = 0.0
        for e in range(len(values)):
            out[entry_rows[e]] += values[e] * buffer[indices[e]]
        for i in range(len(pointers) - 1):
            out[i] *= unscale
        return True
    bits = _scale_bits(buffer, len(read))
    if bits < 0 or not _fits(buffer, len(read), _two_to(bits), limit):
        return False
    scale = _two_to(bits)
    unscale = _two_to(-(bits + w_bits))
    for i in range(len(pointers) - 1):
        total = 0.0
        size = 0.0
        for e in range(pointers[i], pointers[i + 1]):
            term = values[e] * (buffer[indices[e]] * scale)
            total += term
            size += abs(term)
        if size >= limit:
            return False
        out[i] = total * unscale
    return True


@_inline
def _feed_forward(pointers, indices, values, b1, W2_pointers, W2_indices, W2_values, b2, read,
                  rows, first, second, column, hidden, buffer, limit) -> bool:
    """column += W2 relu(W1 column[read] + b1) + b2, exactly, or False (column untouched
    unless True)."""
    for i in range(len(read)):
        buffer[i] = column[read[i]]
    bits = _scale_bits(buffer, len(read))
    if bits < 0 or not _fits(buffer, len(read), _two_to(bits), limit):
        return False
    scale = _two_to(bits)
    for i in range(len(pointers) - 1):
        total = b1[i] * scale
        size = abs(total)
        for e in range(pointers[i], pointers[i + 1]):
            term = values[e] * (buffer[indices[e]] * scale)
            total += term
            size += abs(term)
        if size >= limit:
            return False
        hidden[i] = total if total > 0.0 else 0.0
    hidden_scale = _two_to(first + bits)
    out_scale = _two_to(second) * hidden_scale
    for r in range(len(rows)):
        residual = column[rows[r]] * out_scale
        if residual != math.floor(residual):
            return False
        bias = b2[r] * hidden_scale
        total = residual + bias
        size = abs(residual) + abs(bias)
        for e in range(W2_pointers[r], W2_pointers[r + 1]):
            term = W2_values[e] * hidden[W2_indices[e]]
            total += term
            size += abs(term)
        if size >= limit:
            return False
        buffer[r] = total / out_scale
    for r in range(len(rows)):
        column[rows[r]] = buffer[r]
    return True


@_inline
def _feed_forward_junk(pointers, indices, values, b1, W2_pointers, W2_indices, W2_values, b2,
                       read, rows, first, second, column, junk, low, high, hidden, kind,
                       source, buffer, limit) -> bool:
    """The ReLU layer on the scratch column while some of its rows hold the average of a
    zero-query head (`junk`, known only to lie in [low, high]). A hidden unit reading such a
    row must either be negative over the whole interval (ReLU gives an exact 0 whatever the
    rounding) or be relu(+-row) alone; a junk row must come out as row - relu(row) +
    relu(-row) = 0 exactly, with nothing else added. Anything else: False."""
    for i in range(len(read)):
        buffer[i] = 0.0 if junk[read[i]] else column[read[i]]
    bits = _scale_bits(buffer, len(read))
    if bits < 0 or not _fits(buffer, len(read), _two_to(bits), limit):
        return False
    scale = _two_to(bits)
    unit_scale = _two_to(-(first + bits))
    weight_scale = _two_to(-first)
    for i in range(len(pointers) - 1):
        total = b1[i] * scale
        size = abs(total)
        junk_high = 0.0
        junk_size = 0.0
        junk_count = 0
        junk_weight = 0.0
        for e in range(pointers[i], pointers[i + 1]):
            j = indices[e]
            if junk[read[j]]:
                weight = values[e] * weight_scale
                lo, hi = weight * low[read[j]], weight * high[read[j]]
                junk_high += max(lo, hi)
                junk_size += max(abs(lo), abs(hi))
                junk_count += 1
                junk_weight = weight
                source[i] = read[j]
                continue
            term = values[e] * (buffer[j] * scale)
            total += term
            size += abs(term)
        if size >= limit:
            return False
        kind[i] = 0
        if junk_count == 0:
            hidden[i] = total if total > 0.0 else 0.0
            continue
        upper = total * unit_scale + junk_high
        if upper + (size * unit_scale + junk_size) * _two_to(-10) < 0.0:
            hidden[i] = 0.0
        elif junk_count == 1 and size == 0.0 and abs(junk_weight) == 1.0:
            kind[i] = 1 if junk_weight > 0 else -1
            hidden[i] = 0.0
        else:
            return False
    hidden_scale = _two_to(first + bits)
    out_scale = _two_to(second) * hidden_scale
    coefficient_scale = _two_to(-second)
    for r in range(len(rows)):
        row = rows[r]
        total = b2[r] * hidden_scale
        size = abs(total)
        plus = 0
        minus = 0
        for e in range(W2_pointers[r], W2_pointers[r + 1]):
            i = W2_indices[e]
            if kind[i] != 0:
                if source[i] != row:
                    return False
                coefficient = W2_values[e] * coefficient_scale
                if kind[i] == 1 and coefficient == -1.0:
                    plus += 1
                elif kind[i] == -1 and coefficient == 1.0:
                    minus += 1
                else:
                    return False
                continue
            term = W2_values[e] * hidden[i]
            total += term
            size += abs(term)
        if junk[row]:
            if plus != 1 or minus != 1 or size != 0.0:
                return False
            buffer[r] = 0.0
            continue
        if plus or minus:
            return False
        residual = column[row] * out_scale
        if residual != math.floor(residual):
            return False
        total += residual
        size += abs(residual)
        if size >= limit:
            return False
        buffer[r] = total / out_scale
    for r in range(len(rows)):
        column[rows[r]] = buffer[r]
        junk[rows[r]] = False
    return True


@_inline
def _numerators(P, first, count, floor_bits, out, limit) -> float:
    """P[first:first + count, 0] times 2^F into `out`, for the least F >= floor_bits making
    them all integers below `limit`: returns 2^F, or 0.0 when there is none."""
    for t in range(count):
        out[t] = P[first + t, 0]
    bits = _scale_bits(out, count)
    if bits < 0:
        return 0.0
    scale = _two_to(max(bits, floor_bits))
    for t in range(count):
        out[t] *= scale
        if abs(out[t]) >= limit:
            return 0.0
    return scale


@_inline
def _mirror_scores(mirror, b, first, numerators, reach, r, n, scores):
    """scores[i] = sum_t numerators[t] mirror[b, first + t, i] for every column, in int32,
    four rows a sweep. The caller has bounded the sum of the terms' magnitudes below 2^24
    (`reach` is each row's largest |entry|; a row with none adds nothing, whatever its
    numerator), so every partial sum is an exact integer, in any order, and so is its
    conversion to a float."""
    for i in range(n):
        scores[i] = 0
    t = 0
    while t + 4 <= r:
        a = _int_numerator(numerators[t], reach[first + t])
        c = _int_numerator(numerators[t + 1], reach[first + t + 1])
        d = _int_numerator(numerators[t + 2], reach[first + t + 2])
        e = _int_numerator(numerators[t + 3], reach[first + t + 3])
        for i in range(n):
            scores[i] += (a * np.int32(mirror[b, first + t, i])
                          + c * np.int32(mirror[b, first + t + 1, i])
                          + d * np.int32(mirror[b, first + t + 2, i])
                          + e * np.int32(mirror[b, first + t + 3, i]))
        t += 4
    while t < r:
        a = _int_numerator(numerators[t], reach[first + t])
        for i in range(n):
            scores[i] += a * np.int32(mirror[b, first + t, i])
        t += 1


@_inline
def _head_scores(mirror, b, first, numerators, reach, r, n, size, narrow, scores):
    """`_mirror_scores` into `scores` (int32), summed in `narrow` (int16) and widened where
    `size`, the sum of the terms' magnitudes, is below INT16_EXACT: the same integers,
    with the sweeps over n columns 2.5 times as fast at n = 4096."""
    if size < INT16_EXACT:
        _mirror_scores(mirror, b, first, numerators, reach, r, n, narrow)
        for i in range(n):
            scores[i] = narrow[i]
    else:
        _mirror_scores(mirror, b, first, numerators, reach, r, n, scores)


@_inline
def _int_numerator(numerator: float, reach: float) -> np.int32:
    """A query numerator as int32: below 2^24 wherever its row has a non-zero entry (the
    caller's bound), and 0 where the row has none (the float may then be anything)."""
    return np.int32(numerator) if reach > 0.0 else np.int32(0)


@_inline
def _top_two(scores, n, none):
    """The largest score, the runner-up (the largest again when it is tied) and the first
    column holding the largest; (none, none, -1) when every slot is `none`, the array's
    NO_SCORE.
    Three branch-free sweeps, each of which vectorizes: the largest, the first block
    holding it (`_first_at_least`, which stops there), and the largest again with that
    slot set to `none` for the sweep. (A sweep that tracked the first and last index of
    the largest ran on 64-bit indices: the choice took 1.0-1.1 us at n = 4096 in a scratch
    timing, now 0.1-0.6 us by where the largest lies.)"""
    top = none
    for i in range(n):
        top = max(top, scores[i])
    if top == none:
        return none, none, -1
    winner = _first_at_least(scores, 0, n, top)
    scores[winner] = none
    second = none
    for i in range(n):
        second = max(second, scores[i])
    scores[winner] = top
    return top, second, winner


@_inline
def _scored_choice(scores, none, cols, m, n):
    """`_top_two` of a head's scores, in either width, with the columns evaluated apart
    set to `none` (they are scored apart); NO_SCORE where it is `none`."""
    for c in range(m):
        scores[cols[c]] = none
    top, second, winner = _top_two(scores, n, none)
    return (NO_SCORE if top == none else np.int32(top),
            NO_SCORE if second == none else np.int32(second), winner)


@_inline
def _first_at_least(values, start, n, threshold):
    """The first index from `start` whose value is >= threshold, else n: blocks of
    SCAN_BLOCK are counted in one sweep without branches (it vectorizes), and only a block
    with a hit is searched one by one."""
    j = start
    while j + SCAN_BLOCK <= n:
        hits = 0
        for i in range(j, j + SCAN_BLOCK):
            hits += values[i] >= threshold
        if hits:
            break
        j += SCAN_BLOCK
    while j < n and values[j] < threshold:
        j += 1
    return j


@_inline
def _marked(flags) -> int:
    """How many flags are set: one branch-free sweep, which vectorizes (`any()` stops at
    the first and runs scalar)."""
    count = 0
    for i in range(len(flags)):
        count += flags[i]
    return count


@_inline
def _differing(flags, others) -> int:
    """At how many places two flag arrays differ, in one branch-free sweep."""
    count = 0
    for i in range(len(flags)):
        count += flags[i] != others[i]
    return count


@_inline
def _extra_outputs(P, A, cols, m, q, key, v, r, k, targets, target) -> bool:
    """One head's output at the extra columns, which see the scratch key and themselves:
    exactly the average of the two values when the two scores tie, else False."""
    exact = True
    for c in range(1, m):
        scratch = 0.0
        own = 0.0
        for t in range(r):
            scratch += P[q + t, c] * P[key + t, 0]
            own += P[q + t, c] * P[key + t, c]
        if scratch != own:
            exact = False
        for t in range(k):
            A[targets[target + t], c] += (P[v + t, 0] + P[v + t, c]) / 2
    return exact


@_inline
def _attention_layer(L, b, X, cache, att, layer_groups, groups, lams, targets, reach, mirror_max,
                     group_mirror, own_bound, mirror, own, XT, self_query, zero_scratch,
                     extras_layer, slots, bound, skip_bound, limit, columns, m) -> int:
    """Layer L's attention for program b on its `m` evaluated columns (in the write layer,
    first choosing the columns to evaluate apart): their new number, or 0 when a step of
    the layer is not proven. `att` holds the attention tables (see `_one_pass`), `columns`
    the program's work arrays; both come as tuples so that a call has at most 30 arguments,
    which CPython passes one by one (more go as *args, which numba cannot inline)."""
    att_read, att_pointers, att_indices, att_values, att_rows, att_bits, att_off, att_lattice = att
    A, P, buffer, junk, clean, low, high, scores, mass, cols, numer, evaluated, narrow = columns
    n = X.shape[2]
    off = att_off[L]
    pointers, indices, values = att_pointers[L], att_indices[L], att_values[L]
    for c in range(m):
        if not _project(pointers, indices, values, att_rows[L], att_bits[L], att_lattice[L],
                        att_read[L], A[:, c], P[off:, c], buffer, limit,
                        junk if c == 0 else clean):
            return 0
    if L == extras_layer:
        fresh = True  # the first head stores its exponents, later ones keep the largest
        for g in range(layer_groups[L, 0], layer_groups[L, 1]):
            if not self_query[g]:
                continue
            h, r = groups[g, 0], groups[g, 1]
            for head in range(h):
                key = off + groups[g, 4] + head * r
                first = group_mirror[g, 0] + head * r
                number = group_mirror[g, 2] + head
                scale = _numerators(P, key, r, att_bits[L], numer, limit)
                own_scale = scale * _two_to(-att_bits[L])
                size = own_bound[number] * own_scale
                for t in range(r):
                    size += abs(numer[t]) * mirror_max[first + t]
                if scale == 0.0 or size >= FLOAT32_EXACT:
                    return 0
                _head_scores(mirror, b, first, numer, mirror_max, r, n, size, narrow, scores)
                unit = lams[g] / (scale * _two_to(att_bits[L]))
                shift = np.float32(own_scale)
                if fresh:
                    for j in range(n):
                        mass[j] = unit * (scores[j] - own[b, number, j] * shift)
                    fresh = False
                    continue
                for j in range(n):
                    exponent = unit * (scores[j] - own[b, number, j] * shift)
                    mass[j] = _stored_max(mass[j], exponent)
        if fresh:
            for j in range(n):
                mass[j] = -math.inf
        threshold = math.log(skip_bound) - 1e-9
        j = _first_at_least(mass, 1, n, threshold)
        while j < n:
            if m == slots:
                return 0
            cols[m] = j
            for r in range(X.shape[0]):
                A[r, m] = XT[b, j, r]
            for i in range(len(pointers) - 1):
                P[off + i, m] = cache[b, off + i, j]
            m += 1
            j = _first_at_least(mass, j + 1, n, threshold)
    for g in range(layer_groups[L, 0], layer_groups[L, 1]):
        h, r, k = groups[g, 0], groups[g, 1], groups[g, 2]
        for head in range(h):
            q = off + groups[g, 3] + head * r
            key = off + groups[g, 4] + head * r
            v = off + groups[g, 5] + head * k
            target = groups[g, 6] + head * k
            live = False
            for t in range(r):
                if P[q + t, 0] != 0.0:
                    live = True
            if live == zero_scratch[g]:
                return 0
            if not live:
                for t in range(k):
                    row = targets[target + t]
                    if junk[row]:
                        return 0
                    lo = -reach[v + t]
                    hi = reach[v + t]
                    for c in range(m):
                        lo = min(lo, P[v + t, c])
                        hi = max(hi, P[v + t, c])
                    low[row] = A[row, 0] + lo
                    high[row] = A[row, 0] + hi
                    junk[row] = True
                    A[row, 0] = 0.0
                if not _extra_outputs(P, A, cols, m, q, key, v, r, k, targets, target):
                    return 0
                continue
            first = group_mirror[g, 1] + head * r
            scale = _numerators(P, q, r, 0, numer, limit)
            size = 0.0
            for t in range(r):
                size += abs(numer[t]) * mirror_max[first + t]
            if scale == 0.0 or size >= FLOAT32_EXACT:
                return 0
            narrowed = size < INT16_EXACT  # scores and their choice in int16 (`_head_scores`)
            if narrowed:
                _mirror_scores(mirror, b, first, numer, mirror_max, r, n, narrow)
                top_score, second_score, winner = _scored_choice(narrow, NARROW_NO_SCORE,
                                                                 cols, m, n)
            else:
                _mirror_scores(mirror, b, first, numer, mirror_max, r, n, scores)
                top_score, second_score, winner = _scored_choice(scores, NO_SCORE, cols, m, n)
            unit = 1.0 / (scale * _two_to(att_bits[L]))
            top = top_score * unit if top_score != NO_SCORE else -math.inf
            second = second_score * unit if second_score != NO_SCORE else -math.inf
            for c in range(m):
                score = 0.0
                for t in range(r):
                    score += P[q + t, 0] * P[key + t, c]
                evaluated[c] = score
                if score > second:
                    if score > top:
                        second = top
                        top = score
                        winner = cols[c]
                    else:
                        second = score
            off_weight = 0.0
            if not 2.0 * n * math.exp(lams[g] * (second - top)) < bound:
                for i in range(n):
                    score = np.int32(narrow[i]) if narrowed else scores[i]
                    if i == winner or score == (NARROW_NO_SCORE if narrowed else NO_SCORE):
                        continue
                    exponent = lams[g] * (score * unit - top)
                    if exponent > -800.0:
                        off_weight += math.exp(exponent)
                for c in range(m):
                    exponent = lams[g] * (evaluated[c] - top)
                    if cols[c] != winner and exponent > -800.0:
                        off_weight += math.exp(exponent)
            if not off_weight < bound:
                return 0
            slot = -1
            for c in range(m):
                if cols[c] == winner:
                    slot = c
            for t in range(k):
                value = P[v + t, slot] if slot >= 0 else cache[b, v + t, winner]
                if value == 0.0:
                    return 0
                A[targets[target + t], 0] += value
            if not _extra_outputs(P, A, cols, m, q, key, v, r, k, targets, target):
                return 0
    return m


@_bare
def _column_feed_forward(L, c, ffn_read, W1_pointers, W1_indices, W1_values, ffn_b1, ffn_rows,
                         W2_pointers, W2_indices, W2_values, ffn_b2, ffn_bits, A, junk, low,
                         high, hidden, kind, source, buffer, limit) -> bool:
    """Layer L's ReLU layer on evaluated column c of one program, exactly, or False; the
    scratch column (c = 0) takes the interval-carrying form while it holds averaged rows."""
    if c == 0 and _marked(junk) > 0:
        return _feed_forward_junk(
            W1_pointers[L], W1_indices[L], W1_values[L], ffn_b1[L], W2_pointers[L],
            W2_indices[L], W2_values[L], ffn_b2[L], ffn_read[L], ffn_rows[L], ffn_bits[L, 0],
            ffn_bits[L, 1], A[:, 0], junk, low, high, hidden, kind, source, buffer, limit)
    return _feed_forward(W1_pointers[L], W1_indices[L], W1_values[L], ffn_b1[L],
                         W2_pointers[L], W2_indices[L], W2_values[L], ffn_b2[L], ffn_read[L],
                         ffn_rows[L], ffn_bits[L, 0], ffn_bits[L, 1], A[:, c], hidden, buffer,
                         limit)


@_inline
def _pass_proven(present, att_read, att_pointers, att_indices, att_values, att_rows, att_bits,
                 att_off, att_lattice, layer_groups, groups, working, self_query, limit, A, P,
                 buffer, junk, clean, m) -> bool:
    """After the last layer: no averaged row is left, every evaluated column is back on the
    lattice with zero working rows, and the extra columns' fresh projections (their cache
    entries once committed) leave zero the queries that were zero."""
    if _marked(junk) > 0:
        return False
    off_lattice = 0
    for c in range(m):
        for r in range(A.shape[0]):
            value = A[r, c]
            off_lattice += (value != 0.0) & (value != 1.0) & (value != -1.0)
        for r in working:
            off_lattice += A[r, c] != 0.0
    if off_lattice > 0:
        return False
    for c in range(1, m):
        for L in range(len(present)):
            if not present[L]:
                continue
            off = att_off[L]
            if not _project(att_pointers[L], att_indices[L], att_values[L], att_rows[L],
                            att_bits[L], att_lattice[L], att_read[L], A[:, c], P[off:, c],
                            buffer, limit, clean):
                return False
            for g in range(layer_groups[L, 0], layer_groups[L, 1]):
                if self_query[g]:
                    continue
                for t in range(groups[g, 0] * groups[g, 1]):
                    if P[off + groups[g, 3] + t, c] != 0.0:
                        return False
    return True


@_bare
def _one_pass(b, X, cache, present, att, layer_groups, groups, lams, targets, ffn, working, reach,
              mirror_max, group_mirror, own_bound, mirror, own, XT, self_query, zero_scratch,
              extras_layer, slots, bound, skip_bound, limit, work) -> int:
    """One pass of program b, from its scratch column (`work[15][b]`), computed and checked
    into its state A and fresh projections P at the columns `cols` (its slices of `work`),
    nothing of X, the scratch or the cache written: the number of evaluated columns, or 0
    when the pass is not proven. `att` and `ffn` hold the attention and ReLU tables, as
    `_lockstep` and `_program` take them one by one."""
    att_read, att_pointers, att_indices, att_values, att_rows, att_bits, att_off, att_lattice = att
    (ffn_read, W1_pointers, W1_indices, W1_values, ffn_b1, ffn_rows, W2_pointers, W2_indices,
     W2_values, ffn_b2, ffn_bits) = ffn
    A, P, buffer, hidden, low, high = (work[0][b], work[1][b], work[2][b], work[3][b],
                                       work[4][b], work[5][b])
    scores, mass, kind, source, cols = work[6][b], work[7][b], work[8][b], work[9][b], work[10][b]
    junk, clean, numer, evaluated = work[11][b], work[12][b], work[13][b], work[14][b]
    scratch = work[15][b]
    junk[:] = False
    for r in range(X.shape[0]):
        A[r, 0] = scratch[r]
    m = 1
    for L in range(len(present)):
        if present[L]:
            m = _attention_layer(
                L, b, X, cache, att, layer_groups, groups, lams, targets, reach, mirror_max,
                group_mirror, own_bound, mirror, own, XT, self_query, zero_scratch, extras_layer,
                slots, bound, skip_bound, limit,
                (A, P, buffer, junk, clean, low, high, scores, mass, cols, numer, evaluated,
                 work[16][b]), m)
            if m == 0:
                return 0
        if len(ffn_rows[L]) > 0:
            for c in range(m):
                if not _column_feed_forward(L, c, ffn_read, W1_pointers, W1_indices, W1_values,
                                            ffn_b1, ffn_rows, W2_pointers, W2_indices,
                                            W2_values, ffn_b2, ffn_bits, A, junk, low, high,
                                            hidden, kind, source, buffer, limit):
                    return 0
    if not _pass_proven(present, att_read, att_pointers, att_indices, att_values, att_rows,
                        att_bits, att_off, att_lattice, layer_groups, groups, working, self_query,
                        limit, A, P, buffer, junk, clean, m):
        return 0
    return m


@_inline
def _write_back(b, X, XT, dirty) -> None:
    """Program b's columns committed in this call, from XT (columns contiguous, where the
    pass reads and writes them) into X (rows apart by batch x n entries)."""
    flags, columns, counts = dirty
    for i in range(counts[b]):
        column = columns[b, i]
        for r in range(X.shape[0]):
            X[r, b, column] = XT[b, column, r]
        flags[b, column] = False
    counts[b] = 0


@_inline
def _commit(b, m, X, cache, mirror, own, XT, dirty, mirror_rows, mirror_scale, head_rows, A, P,
            cols, scratch, log, log_columns, log_values, position) -> int:
    """Program b's proven pass into its scratch column, its columns of X (in XT, marked
    `dirty` for `_write_back`), the cache, the score mirror and the own scores, logging each
    committed column's old state first when `log`: returns the log's new end."""
    rows = X.shape[0]
    if log:
        for c in range(m):
            log_columns[b, position] = cols[c]
            for r in range(rows):
                log_values[b, position, r] = scratch[r] if c == 0 else XT[b, cols[c], r]
            position += 1
    for r in range(rows):
        scratch[r] = A[r, 0]
    for c in range(1, m):
        column = cols[c]
        for r in range(rows):
            XT[b, column, r] = A[r, c]
        flags, columns, counts = dirty
        if not flags[b, column]:
            flags[b, column] = True
            columns[b, counts[b]] = column
            counts[b] += 1
        for i in range(cache.shape[1]):
            cache[b, i, column] = P[i, c]
        for i in range(len(mirror_rows)):
            mirror[b, i, column] = np.int8(P[mirror_rows[i], c] * mirror_scale[i])
        for h in range(len(head_rows)):
            score = np.float32(0.0)
            for t in range(head_rows[h, 2]):
                score += (np.float32(mirror[b, head_rows[h, 0] + t, column])
                          * np.float32(mirror[b, head_rows[h, 1] + t, column]))
            own[b, h, column] = score
    return position


@_bare
def _program(b, count, record, pc_rows, X, cache, present, att_read, att_pointers, att_indices,
             att_values, att_bits, att_off, att_lattice, layer_groups, groups, lams, targets,
             ffn_read, W1_pointers, W1_indices, W1_values, ffn_b1, ffn_rows, W2_pointers,
             W2_indices, W2_values, ffn_b2, ffn_bits, working, reach, mirror_rows, mirror_scale,
             mirror_max, group_mirror, own_bound, head_rows, att_rows, mirror, own, XT, dirty,
             work, self_query, zero_scratch, extras_layer, capacity, bound, skip_bound, limit,
             log, log_columns, log_values, log_start) -> int:
    """Up to `count` passes of program b, each recorded, proven and committed to its own
    slices of X and the cache; stops before the first pass it cannot prove. With `log`,
    every committed column's old state is logged (`_rollback`), and a program whose log
    is full stops too. Returns the passes made."""
    rows = X.shape[0]
    slots = capacity + 1
    att = (att_read, att_pointers, att_indices, att_values, att_rows, att_bits, att_off,
           att_lattice)
    ffn = (ffn_read, W1_pointers, W1_indices, W1_values, ffn_b1, ffn_rows, W2_pointers,
           W2_indices, W2_values, ffn_b2, ffn_bits)
    A, P, cols, scratch = work[0][b], work[1][b], work[10][b], work[15][b]
    for r in range(rows):
        scratch[r] = X[r, b, 0]
    position = 0
    made = count
    for done in range(count):
        if log:
            log_start[b, done] = position
        for i in range(len(pc_rows)):
            record[done, i, b] = scratch[pc_rows[i]]
        m = _one_pass(b, X, cache, present, att, layer_groups, groups, lams, targets, ffn,
                      working, reach, mirror_max, group_mirror, own_bound, mirror, own, XT,
                      self_query, zero_scratch, extras_layer, slots, bound, skip_bound, limit,
                      work)
        if m == 0 or (log and position + m > log_columns.shape[1]):
            made = done
            break
        position = _commit(b, m, X, cache, mirror, own, XT, dirty, mirror_rows, mirror_scale,
                           head_rows, A, P, cols, scratch, log, log_columns, log_values, position)
    for r in range(rows):
        X[r, b, 0] = scratch[r]
    _write_back(b, X, XT, dirty)
    if log and made == count:
        log_start[b, count] = position
    return made


@_inline
def _lane_bits(V, touch, lanes, lane_bits, lane_max, lane_bad) -> None:
    """For each lane (column of V), the least G <= MAX_FRACTION_BITS making every touched
    row's value times 2^G an integer (-1 if none), and the largest |value|."""
    for l in range(lanes):
        lane_bits[l] = -1
        lane_max[l] = 0.0
    for j in range(len(touch)):
        row = touch[j]
        for l in range(lanes):
            lane_max[l] = _stored_max(lane_max[l], abs(V[row, l]))
    left = lanes
    for bits in range(MAX_FRACTION_BITS + 1):
        scale = _two_to(bits)
        for l in range(lanes):
            lane_bad[l] = 0
        for j in range(len(touch)):
            row = touch[j]
            for l in range(lanes):
                scaled = V[row, l] * scale
                lane_bad[l] += scaled != np.floor(scaled)
        for l in range(lanes):
            if lane_bits[l] < 0 and lane_bad[l] == 0:
                lane_bits[l] = bits
                left -= 1
        if left == 0:
            break


@_inline
def _first_bound(V, touch, bias1, sum1, limit, lanes, lane_bits, lane_max, lane_top, lane_bad,
                 lane_ok) -> None:
    """Each lane's grid (`_lane_bits`) and whether W1's partial sums stay exact on it."""
    _lane_bits(V, touch, lanes, lane_bits, lane_max, lane_bad)
    for l in range(lanes):
        lane_ok[l] = (lane_bits[l] >= 0) & (
            (bias1 + sum1 * lane_max[l]) * _two_to(lane_bits[l]) < limit)
        lane_top[l] = 0.0


@_inline
def _second_bound(first, second, bias2, sum2, limit, lanes, lane_bits, lane_max, lane_top,
                  lane_ok) -> None:
    """Whether W2's partial sums, the residual (scaled by 2^(first + second)) and the bias
    stay exact on each lane, given its largest hidden unit."""
    both = _two_to(first + second)
    for l in range(lanes):
        size = lane_max[l] * both + bias2 * _two_to(first) + sum2 * lane_top[l]
        lane_ok[l] = lane_ok[l] & (size * _two_to(lane_bits[l]) < limit)


@_inline
def _lane_unit(u, pointers, indices, values, b1, read, V, H, lanes) -> None:
    """Hidden unit u before the ReLU on every lane: b1[u] + W1[u] V[read]."""
    for l in range(lanes):
        H[u, l] = b1[u]
    for e in range(pointers[u], pointers[u + 1]):
        weight = values[e]
        row = read[indices[e]]
        for l in range(lanes):
            H[u, l] += weight * V[row, l]


@_inline
def _lane_relu(u, H, lanes, lane_top) -> None:
    """The ReLU of hidden unit u on every lane, keeping each lane's largest unit."""
    for l in range(lanes):
        unit = _stored_max(H[u, l], np.float32(0.0))
        H[u, l] = unit
        lane_top[l] = _stored_max(lane_top[l], unit)


@_inline
def _lane_output_row(r, row, W2_pointers, W2_indices, W2_values, b2, scales, V, H,
                     lanes) -> None:
    """V[row] += W2[r] H + b2[r] on every lane, in units of 2^-(first + second) (exact on
    the lanes the bounds keep; `scales` holds 2^(first + second), 2^first and
    2^-(first + second) in the lanes' dtype, so that a float32 sweep stays float32)."""
    both = scales[0]
    bias = b2[r] * scales[1]
    for l in range(lanes):
        V[row, l] = V[row, l] * both + bias
    for e in range(W2_pointers[r], W2_pointers[r + 1]):
        weight = W2_values[e]
        unit = W2_indices[e]
        for l in range(lanes):
            V[row, l] += weight * H[unit, l]
    unscale = scales[2]
    for l in range(lanes):
        V[row, l] *= unscale


@_inline
def _lane_feed_forward(pointers, indices, values, b1, W2_pointers, W2_indices, W2_values, b2,
                       read, rows, touch, first, second, bounds, scales, limit, V, H, lanes,
                       lane_bits,
                       lane_max, lane_top, lane_bad, lane_ok) -> None:
    """V[rows] += W2 relu(W1 V[read] + b1) + b2 on `lanes` columns at once (lanes contiguous,
    so each weight is applied to all of them in one vector sweep), exact on every lane left
    in `lane_ok`.

    Why it is exact: a lane's values are multiples of 2^-G (G its `lane_bits`), and so is
    every product with the integer weight numerators and every partial sum; `bounds` holds
    the layer's largest absolute row sums of those numerators (biases apart), so with the
    lane's largest |value| and largest hidden unit each partial sum, in any order, is below
    `limit` times 2^-G: an exact float in the run's dtype, as in the full pass."""
    bias2, sum2 = bounds[2], bounds[3]
    _first_bound(V, touch, bounds[0], bounds[1], limit, lanes, lane_bits, lane_max, lane_top,
                 lane_bad, lane_ok)
    for u in range(len(pointers) - 1):
        _lane_unit(u, pointers, indices, values, b1, read, V, H, lanes)
        _lane_relu(u, H, lanes, lane_top)
    _second_bound(first, second, bias2, sum2, limit, lanes, lane_bits, lane_max, lane_top,
                  lane_ok)
    for r in range(len(rows)):
        row = rows[r]
        _lane_output_row(r, row, W2_pointers, W2_indices, W2_values, b2, scales, V, H, lanes)


@_inline
def _lane_feed_forward_junk(pointers, indices, values, b1, W2_pointers, W2_indices, W2_values,
                            b2, read, rows, touch, first, second, bounds, scales, limit, V, H, Low,
                            High,
                            junk, kind, source, lanes, lane_bits, lane_max, lane_top, lane_bad,
                            lane_ok) -> None:
    """`_lane_feed_forward` on scratch columns that hold the same averaged rows (`junk`,
    zero in V, each lane's interval in Low and High), with `_feed_forward_junk`'s rules: a
    hidden unit reading such a row must be below zero over the whole interval on every lane
    (exact 0 after the ReLU), or be +-row alone (a unit with no other term and no bias,
    kind +-1), and each averaged row must come out as row - relu(row) + relu(-row) = 0 with
    nothing else added. A rule broken by the weights clears every lane."""
    bias2, sum2 = bounds[2], bounds[3]
    _first_bound(V, touch, bounds[0], bounds[1], limit, lanes, lane_bits, lane_max, lane_top,
                 lane_bad, lane_ok)
    weight_scale = _two_to(-first)
    for u in range(len(pointers) - 1):
        averaged = 0
        plain = 0
        for e in range(pointers[u], pointers[u + 1]):
            if junk[read[indices[e]]]:
                averaged += 1
                source[u] = read[indices[e]]
                kind[u] = 1 if values[e] > 0 else -1
                if abs(values[e] * weight_scale) != 1.0:
                    kind[u] = 2
            else:
                plain += 1
        if averaged == 0:
            kind[u] = 0
        elif averaged == 1 and plain == 0 and b1[u] == 0.0 and kind[u] != 2:
            for l in range(lanes):
                H[u, l] = 0.0
            continue
        else:
            kind[u] = 0
        _lane_unit(u, pointers, indices, values, b1, read, V, H, lanes)
        if averaged == 0:
            _lane_relu(u, H, lanes, lane_top)
            continue
        for l in range(lanes):
            upper = H[u, l] * weight_scale
            size = abs(b1[u]) * weight_scale
            for e in range(pointers[u], pointers[u + 1]):
                row = read[indices[e]]
                weight = values[e] * weight_scale
                if junk[row]:
                    low, high = weight * Low[row, l], weight * High[row, l]
                    upper += max(low, high)
                    size += max(abs(low), abs(high))
                else:
                    size += abs(weight * V[row, l])
            lane_ok[l] = lane_ok[l] & (upper + size * _two_to(-10) < 0.0)
            H[u, l] = 0.0
    _second_bound(first, second, bias2, sum2, limit, lanes, lane_bits, lane_max, lane_top,
                  lane_ok)
    coefficient_scale = _two_to(-second)
    for r in range(len(rows)):
        row = rows[r]
        plus = 0
        minus = 0
        foreign = False
        for e in range(W2_pointers[r], W2_pointers[r + 1]):
            unit = W2_indices[e]
            if kind[unit] == 0:
                continue
            coefficient = W2_values[e] * coefficient_scale
            if source[unit] != row:
                foreign = True
            elif kind[unit] == 1 and coefficient == -1.0:
                plus += 1
            elif kind[unit] == -1 and coefficient == 1.0:
                minus += 1
            else:
                foreign = True
        if foreign:
            for l in range(lanes):
                lane_ok[l] = False
        if junk[row]:
            if plus != 1 or minus != 1 or b2[r] != 0.0:
                for l in range(lanes):
                    lane_ok[l] = False
            for l in range(lanes):
                V[row, l] = 0.0
            for e in range(W2_pointers[r], W2_pointers[r + 1]):
                if kind[W2_indices[e]] == 0:
                    for l in range(lanes):
                        lane_ok[l] = lane_ok[l] & (H[W2_indices[e], l] == 0.0)
            continue
        if plus != 0 or minus != 0:
            for l in range(lanes):
                lane_ok[l] = False
        _lane_output_row(r, row, W2_pointers, W2_indices, W2_values, b2, scales, V, H, lanes)


@_inline
def _lanes_in(V, states, lane_program, lane_slot, touch, lanes) -> None:
    """The touched rows of each lane's column (`states`: every program's evaluated columns,
    float64) into V. Where V's dtype cannot hold a value exactly (float32 lanes), the lane
    gets NaN instead, which `_lane_bits` finds on no grid: the lane is refused rather than
    computed on a rounded value."""
    for j in range(len(touch)):
        row = touch[j]
        for l in range(lanes):
            value = states[lane_program[l], row, lane_slot[l]]
            V[row, l] = value
            if V[row, l] != value:
                V[row, l] = np.nan


@_inline
def _lanes_back(lanes, lane_program, lane_slot, lane_ok, written, V, states, evaluated_columns,
                start) -> None:
    """Each kept lane's written rows back into its program's column (`states`: every
    program's evaluated columns); a refused lane leaves its program's pass unproven."""
    for l in range(lanes):
        b = lane_program[l]
        if not lane_ok[l]:
            evaluated_columns[b - start] = 0
            continue
        for r in range(len(written)):
            states[b, written[r], lane_slot[l]] = V[written[r], l]


@_bare
def _attention_programs(L, start, stop, made, evaluated_columns, X, cache, att, layer_groups,
                        groups, lams, targets, reach, mirror_max, group_mirror, own_bound, mirror,
                        own, XT, self_query, zero_scratch, extras_layer, slots, bound, skip_bound,
                        limit, work) -> None:
    """Layer L's attention for every running program of start..stop-1 in one call: its
    dozens of array arguments are passed once a layer, not once a program and layer."""
    for b in range(start, stop):
        m = evaluated_columns[b - start]
        if made[b - start] >= 0 or m == 0:
            continue
        evaluated_columns[b - start] = _attention_layer(
            L, b, X, cache, att, layer_groups, groups, lams, targets, reach, mirror_max,
            group_mirror, own_bound, mirror, own, XT, self_query, zero_scratch, extras_layer,
            slots, bound, skip_bound, limit,
            (work[0][b], work[1][b], work[2][b], work[11][b], work[12][b], work[4][b],
             work[5][b], work[6][b], work[7][b], work[10][b], work[13][b], work[14][b],
             work[16][b]), m)


@_bare
def _lockstep(start, stop, count, record, pc_rows, X, cache, present, att_read, att_pointers,
              att_indices, att_values, att_bits, att_off, att_lattice, layer_groups, groups, lams,
              targets, ffn_read, W1_pointers, W1_indices, W1_values, ffn_b1, ffn_rows, W2_pointers,
              W2_indices, W2_values, ffn_b2, ffn_bits, working, reach, mirror_rows, mirror_scale,
              mirror_max, group_mirror, own_bound, head_rows, att_rows, ffn_touch, ffn_bounds,
              lane_W1, lane_b1, lane_W2, lane_b2, lane_scales, mirror, own, XT, dirty, work,
              lane_work, block, self_query, zero_scratch, extras_layer, capacity, bound, skip_bound, limit,
              log, log_columns, log_values, log_start, done) -> None:
    """Up to `count` passes of programs start..stop-1, in lockstep: each layer's attention
    program by program, then its ReLU layer on every evaluated column of every program at
    once, the columns gathered into lanes (`_lane_feed_forward`; scratch columns holding
    the same averaged rows by `_lane_feed_forward_junk`, any other by `_feed_forward_junk`).
    A program whose pass is not proven so is evaluated again on its own (`_one_pass`); one
    that is not proven there either stops, as in `_program`. Counts the passes proven in
    lockstep and those evaluated again in `lane_work[9][block]`."""
    rows = X.shape[0]
    slots = capacity + 1
    att = (att_read, att_pointers, att_indices, att_values, att_rows, att_bits, att_off,
           att_lattice)
    ffn = (ffn_read, W1_pointers, W1_indices, W1_values, ffn_b1, ffn_rows, W2_pointers,
           W2_indices, W2_values, ffn_b2, ffn_bits)
    V, H, lane_program, lane_slot = (lane_work[0][block], lane_work[1][block],
                                     lane_work[2][block], lane_work[3][block])
    lane_bits, lane_max, lane_top, lane_bad, lane_ok = (lane_work[4][block], lane_work[5][block],
                                                        lane_work[6][block], lane_work[7][block],
                                                        lane_work[8][block])
    tally = lane_work[9][block]
    Low, High, kind, source = (lane_work[13][block], lane_work[14][block], lane_work[15][block],
                               lane_work[16][block])
    first_lane = lane_work[17][block]
    made, evaluated_columns, position = (lane_work[10][block], lane_work[11][block],
                                         lane_work[12][block])
    for b in range(start, stop):
        scratch = work[15][b]
        for r in range(rows):
            scratch[r] = X[r, b, 0]
        made[b - start] = -1
        position[b - start] = 0
    for step in range(count):
        running = 0
        for b in range(start, stop):
            if made[b - start] >= 0:
                continue
            running += 1
            if log:
                log_start[b, step] = position[b - start]
            scratch, A, junk = work[15][b], work[0][b], work[11][b]
            for i in range(len(pc_rows)):
                record[step, i, b] = scratch[pc_rows[i]]
            junk[:] = False
            for r in range(rows):
                A[r, 0] = scratch[r]
            evaluated_columns[b - start] = 1
        if running == 0:
            break
        for L in range(len(present)):
            if present[L]:
                _attention_programs(L, start, stop, made, evaluated_columns, X, cache, att,
                                    layer_groups, groups, lams, targets, reach, mirror_max,
                                    group_mirror, own_bound, mirror, own, XT, self_query,
                                    zero_scratch, extras_layer, slots, bound, skip_bound, limit,
                                    work)
            if len(ffn_rows[L]) == 0:
                continue
            touch, written = ffn_touch[L], ffn_rows[L]
            lanes = 0
            reference = -1
            for b in range(start, stop):
                if made[b - start] >= 0 or evaluated_columns[b - start] == 0:
                    continue
                junk = work[11][b]
                first_lane[b - start] = 0
                if _marked(junk) == 0:
                    continue
                first_lane[b - start] = 1
                if reference < 0:
                    reference = b
                if _differing(junk, work[11][reference]) == 0:
                    lane_program[lanes] = b
                    lane_slot[lanes] = 0
                    lanes += 1
                elif not _column_feed_forward(L, 0, ffn_read, W1_pointers, W1_indices,
                                              W1_values, ffn_b1, ffn_rows, W2_pointers,
                                              W2_indices, W2_values, ffn_b2, ffn_bits,
                                              work[0][b], junk, work[4][b], work[5][b],
                                              work[3][b], work[8][b], work[9][b], work[2][b],
                                              limit):
                    evaluated_columns[b - start] = 0
            if lanes > 0:
                junk = work[11][reference]
                _lanes_in(V, work[0], lane_program, lane_slot, touch, lanes)
                for j in range(len(touch)):
                    row = touch[j]
                    for l in range(lanes):
                        Low[row, l] = work[4][lane_program[l], row]
                        High[row, l] = work[5][lane_program[l], row]
                _lane_feed_forward_junk(W1_pointers[L], W1_indices[L], lane_W1[L], lane_b1[L],
                                        W2_pointers[L], W2_indices[L], lane_W2[L], lane_b2[L],
                                        ffn_read[L], written, touch, ffn_bits[L, 0],
                                        ffn_bits[L, 1], ffn_bounds[L], lane_scales[L], limit,
                                        V, H, Low, High, junk, kind, source, lanes, lane_bits,
                                        lane_max, lane_top, lane_bad, lane_ok)
                _lanes_back(lanes, lane_program, lane_slot, lane_ok, written, V, work[0],
                            evaluated_columns, start)
                for l in range(lanes):
                    if lane_ok[l]:
                        for r in range(len(written)):
                            work[11][lane_program[l], written[r]] = False
            lanes = 0
            for b in range(start, stop):
                m = evaluated_columns[b - start]
                if made[b - start] >= 0 or m == 0:
                    continue
                for c in range(first_lane[b - start], m):
                    lane_program[lanes] = b
                    lane_slot[lanes] = c
                    lanes += 1
            if lanes == 0:
                continue
            _lanes_in(V, work[0], lane_program, lane_slot, touch, lanes)
            _lane_feed_forward(W1_pointers[L], W1_indices[L], lane_W1[L], lane_b1[L],
                               W2_pointers[L], W2_indices[L], lane_W2[L], lane_b2[L],
                               ffn_read[L], ffn_rows[L], touch, ffn_bits[L, 0], ffn_bits[L, 1],
                               ffn_bounds[L], lane_scales[L], limit, V, H, lanes, lane_bits,
                               lane_max, lane_top, lane_bad, lane_ok)
            _lanes_back(lanes, lane_program, lane_slot, lane_ok, written, V, work[0],
                        evaluated_columns, start)
        for b in range(start, stop):
            if made[b - start] >= 0:
                continue
            A, P, cols, scratch = work[0][b], work[1][b], work[10][b], work[15][b]
            m = evaluated_columns[b - start]
            if m > 0 and not _pass_proven(present, att_read, att_pointers, att_indices, att_values,
                                          att_rows, att_bits, att_off, att_lattice, layer_groups,
                                          groups, working, self_query, limit, A, P, work[2][b],
                                          work[11][b], work[12][b], m):
                m = 0
            if m > 0:
                tally[0] += 1
            else:
                tally[1] += 1
                m = _one_pass(b, X, cache, present, att, layer_groups, groups, lams, targets,
                              ffn, working, reach, mirror_max, group_mirror, own_bound, mirror,
                              own, XT, self_query, zero_scratch, extras_layer, slots, bound,
                              skip_bound, limit, work)
            if m == 0 or (log and position[b - start] + m > log_columns.shape[1]):
                made[b - start] = step
                continue
            position[b - start] = _commit(b, m, X, cache, mirror, own, XT, dirty, mirror_rows,
                                          mirror_scale, head_rows, A, P, cols, scratch, log,
                                          log_columns, log_values, position[b - start])
    for b in range(start, stop):
        scratch = work[15][b]
        for r in range(rows):
            X[r, b, 0] = scratch[r]
        _write_back(b, X, XT, dirty)
        if made[b - start] < 0:
            made[b - start] = count
            if log:
                log_start[b, count] = position[b - start]
        done[b] = made[b - start]


@_jit
def _rollback(X, done, least, log_columns, log_values, log_start):
    """Programs that made more than `least` passes get their columns back as they were
    before pass `least`, newest logged column first."""
    rows = X.shape[0]
    for b in range(X.shape[1]):
        for e in range(log_start[b, done[b]] - 1, log_start[b, least] - 1, -1):
            column = log_columns[b, e]
            for r in range(rows):
                X[r, b, column] = log_values[b, e, r]
