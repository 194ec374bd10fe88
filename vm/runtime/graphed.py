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
        self._bound: tuple | None = None
        self._replay: Callable[[], None] | None = None

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
            self._bind(run, pc_rows)
            self._replay()
            if not bool(self._proven):
                self._restore()
                break
            record[done:done + self.length].copy_(self._record)
            done += self.length
        return done, False

    def _bind(self, run: ActiveRun, pc_rows: np.ndarray) -> None:
        """Capture the chunk for this run's tensors unless the current graph already has
        them (a rebuild replaces the cache and own scores, so it needs a new graph)."""
        key = (run, run.cache, run.own_scores, tuple(pc_rows))
        if self._bound is not None and all(a is b for a, b in zip(self._bound[:3], key[:3])) \
                and self._bound[3] == key[3]:
            return
        self._bound = None
        X = run.X
        self._live = [X, run.cache, *run.own_scores.values()]
        self._saved = [tensor.clone() for tensor in self._live]
        self._proven = torch.ones((), dtype=torch.bool, device=X.device)
        self._record = torch.empty((self.length, len(pc_rows), X.shape[1]), dtype=X.dtype,
                                   device=X.device)
        self._pc = torch.as_tensor(pc_rows, device=X.device)
        """Kept here: a graph does not keep alive the tensors it reads."""

        def chunk() -> None:
            for saved, live in zip(self._saved, self._live):
                saved.copy_(live)
            self._proven.fill_(True)
            for i in range(self.length):
                self._record[i].copy_(X.index_select(0, self._pc)[:, :, 0])
                run._active_pass(self._proven)

        self._replay = self._capture(chunk)
        self._bound = key
        self.captures += 1

    def _capture(self, chunk: Callable[[], None]) -> Callable[[], None]:
        """The chunk as a CUDA graph's replay, after the warm-up run that capture needs
        (on a side stream, undone); on other devices the chunk itself."""
        if self.evaluator.device.type != "cuda":
            return chunk
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            chunk()
        torch.cuda.current_stream().wait_stream(side)
        self._restore()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            chunk()
        return graph.replay

    def _restore(self) -> None:
        """X, cache and own scores as they were before the last chunk."""
        for saved, live in zip(self._saved, self._live):
            live.copy_(saved)
