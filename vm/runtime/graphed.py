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

Without CUDA there are no graphs: the recorded passes run as Python calls, which is how the
tests on a CPU exercise everything here but the capture itself.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from vm.runtime.active import ActiveEvaluator, ActiveRun

GRAPH_PASSES = 32
"""Passes per graph: one host sync per this many passes, and the most passes a failed
chunk hands back to the eager pass."""


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

        self.replay = self._capture(passes, X.device)

    def binds(self, run: ActiveRun, pc_rows: np.ndarray) -> bool:
        """Was this chunk captured on the run's current cache and own scores?"""
        return (self.cache is run.cache and self.own_scores is run.own_scores
                and self.pc_rows == tuple(pc_rows))

    def _capture(self, passes: Callable[[], None], device: torch.device) -> Callable[[], None]:
        """The passes as a CUDA graph's replay, after the warm-up run that capture needs
        (on a side stream, undone); on other devices the passes themselves."""
        if device.type != "cuda":
            return passes
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            passes()
        torch.cuda.current_stream().wait_stream(side)
        self.restore()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            passes()
        return graph.replay

    def restore(self) -> None:
        """X, cache and own scores as they were before the last replay."""
        for saved, live in zip(self.saved, self.live):
            live.copy_(saved)
