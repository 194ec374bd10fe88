"""Active passes captured as CUDA graphs: the torch active pass, launched once per chunk.

On a GPU a SUBLEQ active pass is a few hundred small kernels; at small batches their
launches, not their arithmetic, set the pace, and each pass also waits for the host twice
(how many extras, whether the guard held). `GraphedPasses` records `length` passes of
`ActiveRun._active_pass` in its capturable form (no host sync: extras of the fixed width
`capacity`, every guard condition ANDed into one flag on the device) as one CUDA graph and
replays it, reading the flag once per replay.

The graph first copies X, the projection cache and the own scores aside. When the flag says
some pass of the chunk was not proven, they are copied back and the chunk is left to the
eager pass, which meets the same failure and runs that pass in full. A proven chunk computed
exactly the torch active passes (bit-identical to the full pass, docs/speed.md), launched
differently.

A FLEQ active pass reads, on the host, which blocks its instruction selected, so
`FleqGraphedPasses` makes it two graphs a pass around that one sync: the control layers,
then the rest of the pass for the selected blocks (one graph per set of blocks).

Without CUDA there are no graphs: the recorded passes run as Python calls, which is how the
tests on a CPU exercise everything here but the capture itself.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import numpy as np
import torch

from vm.runtime.active import ActiveEvaluator, ActiveRun
from vm.runtime.active_fleq import GUARD_CHECKS, FleqActiveEvaluator, FleqActiveRun

GRAPH_PASSES = 32
"""Passes per graph: one host sync per this many passes, and the most passes a failed
chunk hands back to the eager pass."""


MAX_BLOCK_SETS = 32
"""The most block sets a FLEQ run captures graphs for; a batch of different programs can meet
up to 2^blocks unions, and each graph costs a capture (a few ms). Further sets run eagerly."""


def captured(work: Callable[[], None], device: torch.device, undo: Callable[[], None],
             pool: tuple[int, int] | None = None) -> Callable[[], None]:
    """`work` as a CUDA graph's replay, after the warm-up run that capture needs (on a side
    stream, then `undo`ne: capture itself computes nothing); `pool`: a memory pool shared
    with the caller's other graphs, which are replayed one at a time and keep nothing in
    it between replays. On other devices `work` itself."""
    if device.type != "cuda":
        return work
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        work()
    torch.cuda.current_stream().wait_stream(side)
    undo()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        work()
    return graph.replay


def chunk_of(run: object) -> int:
    """Passes a run's compiled form makes per call at its own pace: a CUDA graph's length;
    1 without one (any run, or None) or for the CPU form, which makes any number
    (benchmarks time whole chunks)."""
    fused = getattr(run, "fused", None)
    return fused.length if isinstance(fused, GraphedPasses) else 1


class GraphedPasses:
    """The compiled form of an evaluator's pass on a GPU (`ActiveEvaluator.fused`)."""

    keeps_own_scores = True
    """Its passes are the torch pass's own: the cache and own scores stay current."""

    def __init__(self, evaluator: ActiveEvaluator, length: int = GRAPH_PASSES) -> None:
        if length < 1:
            raise ValueError(f"a graph holds at least one pass, not {length}")
        self.evaluator, self.length = evaluator, length
        self.unsupported = evaluator.unsupported
        self.captures = 0
        """Graphs captured so far: one per run and per rebuild of its cache."""

    def passes(self, run: ActiveRun, count: int, record: torch.Tensor, pc_rows: np.ndarray,
               threads: int | None = None) -> tuple[int, bool]:
        """Whole chunks of `length` passes of `run` while at least one fits in `count`, each
        pass after copying the program counters (rows `pc_rows` of the scratch column) into
        `record[i]`; stops, X restored, before the first chunk not proven for every program.
        Returns the passes made and False (nothing ran ahead). `threads` is the CPU form's."""
        if run.extras_layer is None or any(key not in run.zero_queries
                                           for key in run.self_query):
            return 0, False
        done = 0
        while count - done >= self.length:
            chunk = self._chunk(run, pc_rows)
            chunk.replay()
            if not bool(chunk.proven):
                chunk.restore()
                break
            record[done:done + self.length].copy_(chunk.record)
            done += self.length
        return done, False

    def _chunk(self, run: ActiveRun, pc_rows: np.ndarray) -> "_Chunk":
        """The run's captured chunk (kept on the run, so that it goes with it), captured
        anew when the run has none for its current cache: a rebuild replaces the cache and
        own scores."""
        chunk = run.graph
        if chunk is None or not chunk.binds(run, pc_rows):
            run.graph = None  # the old graph's memory goes before the new one is taken
            chunk = run.graph = _Chunk(run, self.length, pc_rows)
            self.captures += 1
        return chunk


class _Chunk:
    """`length` passes of one run, captured (on a GPU) with the copies that undo them."""

    def __init__(self, run: ActiveRun, length: int, pc_rows: np.ndarray) -> None:
        X = run.X
        self.cache, self.own_scores, self.pc_rows = run.cache, run.own_scores, tuple(pc_rows)
        self.live = [X, run.cache, *run.own_scores.values()]
        self.saved = [tensor.clone() for tensor in self.live]
        self.proven = torch.ones((), dtype=torch.bool, device=X.device)
        self.record = torch.empty((length, len(pc_rows), X.shape[1]), dtype=X.dtype,
                                  device=X.device)
        self.pc = torch.as_tensor(pc_rows, device=X.device)
        """Kept here: a graph does not keep alive the tensors it reads."""

        def passes() -> None:
            for saved, live in zip(self.saved, self.live):
                saved.copy_(live)
            self.proven.fill_(True)
            for i in range(length):
                self.record[i].copy_(X.index_select(0, self.pc)[:, :, 0])
                run._active_pass(self.proven)

        self.replay = captured(passes, X.device, self.restore)

    def binds(self, run: ActiveRun, pc_rows: np.ndarray) -> bool:
        """Was this chunk captured on the run's current cache and own scores?"""
        return (self.cache is run.cache and self.own_scores is run.own_scores
                and self.pc_rows == tuple(pc_rows))

    def restore(self) -> None:
        """X, cache and own scores as they were before the last replay."""
        for saved, live in zip(self.saved, self.live):
            live.copy_(saved)


class FleqGraphedPasses:
    """The compiled form of a FLEQ evaluator's pass on a GPU (`FleqActiveEvaluator.fused`).

    A FLEQ active pass asks the host, once, which blocks the instruction selected and
    whether the guard held (`FleqActiveEvaluator.control_`), so it cannot be a graph of many
    passes. Each pass is two graphs instead: the control layers (after copying X aside),
    then, after that one sync, the rest of the pass for the selected set of blocks, one
    graph per set the run meets. They are the eager pass's own modules on the same data.
    """

    def __init__(self, evaluator: FleqActiveEvaluator) -> None:
        self.evaluator = evaluator
        self.unsupported = evaluator.unsupported
        self.captures = 0
        """Graphs captured so far: per run, the control graph and one per block set."""
        self.max_sets = MAX_BLOCK_SETS

    def passes(self, run: FleqActiveRun, count: int, record: torch.Tensor,
               pc_rows: np.ndarray, threads: int | None = None) -> tuple[int, bool]:
        """Up to `count` passes of `run`, each after copying the program counters into
        `record[i]`; stops, X restored, before a pass whose guard fails. Returns the passes
        made and False (nothing ran ahead). `threads` is the CPU form's."""
        graphs = run.graph
        if graphs is None or graphs.pc_rows != tuple(pc_rows):
            run.graph = None
            graphs = run.graph = _FleqGraphs(run, pc_rows, self)
        for done in range(count):
            record[done].copy_(run.X.index_select(0, graphs.pc)[:, :, 0])
            graphs.control()
            problem, selected = self.evaluator.verdict(graphs.found.tolist())
            if problem is not None:
                graphs.restore()
                return done, False
            graphs.rest(selected)()
        return count, False


class _FleqGraphs:
    """One run's FLEQ graphs (`FleqGraphedPasses`): the control layers and, by block set,
    the rest of the pass, sharing one memory pool."""

    def __init__(self, run: FleqActiveRun, pc_rows: np.ndarray,
                 form: FleqGraphedPasses) -> None:
        X, evaluator = run.X, run.evaluator
        self.X, self.evaluator, self.form = X, evaluator, form
        self.pc_rows = tuple(pc_rows)
        self.pc = torch.as_tensor(pc_rows, device=X.device)
        self.saved = X.clone()
        self.found = torch.empty(GUARD_CHECKS + evaluator.blocks, dtype=torch.bool,
                                 device=X.device)
        self.pool = torch.cuda.graph_pool_handle() if X.device.type == "cuda" else None
        self.rests: dict[frozenset[int], Callable[[], None]] = {}

        def control() -> None:
            self.saved.copy_(X)
            self.found.copy_(evaluator.control_(X))

        self.control = self._captured(control)

    def rest(self, selected: frozenset[int]) -> Callable[[], None]:
        """The rest of the pass for this block set, captured the first time it is needed
        (X then stands after the control layers, as the capture's warm-up needs); run
        eagerly, uncaptured, once the run holds `form.max_sets` graphs."""
        if selected in self.rests:
            return self.rests[selected]
        work = partial(self.evaluator.rest_, self.X, selected)
        if len(self.rests) >= self.form.max_sets:
            return work
        self.rests[selected] = self._captured(work)
        return self.rests[selected]

    def _captured(self, work: Callable[[], None]) -> Callable[[], None]:
        before = self.X.clone() if self.X.device.type == "cuda" else None
        self.form.captures += before is not None
        return captured(work, self.X.device, lambda: self.X.copy_(before), self.pool)

    def restore(self) -> None:
        """X as it was before the last control graph."""
        self.X.copy_(self.saved)
