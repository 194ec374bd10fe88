"""Feeding one layer's parts to the oracle, H'L' single-head problems per call.

Every part needs its two steps; the steps of all jobs of all heads of the layer form one
stream that is cut into consecutive groups of g = H'L' problems, one oracle call per group
(Lemma 3.3), so a layer with S problems costs ceil(S / g) calls. The problems of one layer
do not depend on each other. The stream is consumed lazily, `calls_per_run` calls at a time
(handed to the oracle as one batch), and a job batch is folded into its head's
`PartCombiner` as soon as its last problem is answered, which keeps memory bounded.

Problem k of a job batch with P parts per job is step k % 2 of part (k // 2) % P of job
k // 2P. A call's problems are padded to the longest of them with known-score rows.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from vm.attention.chunked.jobs import JobBatch
from vm.attention.chunked.merge import PartCombiner
from vm.attention.chunked.model import HeadWeights
from vm.attention.chunked.oracle import AttentionOracle
from vm.attention.chunked.packing import run_packed
from vm.attention.chunked.parts import (Step, projections, read_normalizer, read_values, tokens,
                                        with_synthetic)


@dataclass
class _Pending:
    """A job batch whose problems are being answered, and the answers so far."""

    batch: JobBatch
    log_a: Tensor
    values: Tensor
    unanswered: int
    taken: int = 0

    def locate(self, problems: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(job, part, step) of problem indices."""
        parts = self.batch.keys.shape[1]
        return problems // (2 * parts), (problems // 2) % parts, problems % 2


@dataclass
class _Run:
    """Problems taken from the stream, one row list each, padded to a common length."""

    keys: Tensor
    queries: Tensor
    lengths: Tensor
    steps: Tensor
    heads: Tensor
    pieces: list[tuple[_Pending, Tensor]]


class LayerScheduler:
    """Runs the job batches of one layer through the oracle and combines their answers."""

    def __init__(self, x_heads: Tensor, heads: Sequence[HeadWeights], oracle: AttentionOracle,
                 calls_per_run: int) -> None:
        self.x_heads, self.oracle = x_heads, oracle
        self.group = oracle.heads * oracle.layers
        self.run_size = calls_per_run * self.group
        self.projections = {(h, step): projections(head, step)
                            for h, head in enumerate(heads) for step in Step}
        n, width = x_heads.shape[1], x_heads.shape[2]
        self.combiners = [PartCombiner(n, width, x_heads.dtype) for _ in heads]
        self.amplification = 1.0
        self._queue: deque[_Pending] = deque()
        self._queued = 0

    def run(self, batches: Iterable[JobBatch]) -> None:
        """Answer every job of the layer."""
        dtype, width = self.x_heads.dtype, self.x_heads.shape[2]
        for batch in batches:
            if batch.problems == 0:
                continue
            shape = batch.keys.shape
            self._queue.append(_Pending(batch, torch.empty(shape, dtype=dtype),
                                        torch.empty(*shape, width, dtype=dtype), batch.problems))
            self._queued += batch.problems
            while self._queued >= self.run_size:
                self._answer(self._take(self.run_size))
        if self._queued:
            self._answer(self._take(self._queued))

    def _take(self, count: int) -> _Run:
        """The next `count` problems of the stream, with their rows."""
        pieces, rows = [], []
        while count:
            pending = self._queue[0]
            end = min(pending.batch.problems, pending.taken + count)
            problems = torch.arange(pending.taken, end)
            rows.append(self._rows(pending, problems))
            pieces.append((pending, problems))
            count -= len(problems)
            self._queued -= len(problems)
            pending.taken = end
            if end == pending.batch.problems:
                self._queue.popleft()
        width = max(keys.shape[1] for keys, *_ in rows)
        keys, queries, lengths, steps, heads = zip(*rows)
        return _Run(keys=torch.cat([_pad(k, width) for k in keys]),
                    queries=torch.cat([_pad(q, width) for q in queries]),
                    lengths=torch.cat(lengths), steps=torch.cat(steps), heads=torch.cat(heads),
                    pieces=pieces)

    @staticmethod
    def _rows(pending: _Pending, problems: Tensor) -> tuple[Tensor, ...]:
        """Keys, queries, natural lengths, steps and heads of some problems of one batch.

        Step 1 rows start with the synthetic token; step 2 rows get one padding row at the
        end instead, so that both have the same width (it is cut off again unless the
        call needs it)."""
        job, part, step = pending.locate(problems)
        keys, queries = pending.batch.keys[job, part], pending.batch.queries[job, part]
        first = (step == Step.NORMALIZER).unsqueeze(1)
        with_token = with_synthetic(keys, queries)
        keys = torch.where(first, with_token[0], _pad(keys, keys.shape[1] + 1))
        queries = torch.where(first, with_token[1], _pad(queries, queries.shape[1] + 1))
        lengths = keys.shape[1] - 1 + first.squeeze(1).long()
        return keys, queries, lengths, step, torch.full_like(step, pending.batch.head)

    def _answer(self, run: _Run) -> None:
        """Answer the run's calls, full groups first, and store the answers."""
        total, group = len(run.lengths), self.group
        log_a = torch.full(run.keys.shape, float("-inf"), dtype=self.x_heads.dtype)
        values = torch.zeros(*run.keys.shape, self.x_heads.shape[2], dtype=self.x_heads.dtype)
        full = total // group
        if full:
            calls = torch.arange(full * group).reshape(full, group)
            self._answer_calls(run, calls, log_a, values)
        if total % group:
            self._answer_calls(run, torch.arange(full * group, total).unsqueeze(0), log_a, values)
        self._store(run, log_a, values)

    def _answer_calls(self, run: _Run, calls: Tensor, log_a: Tensor, values: Tensor) -> None:
        """Answer calls of equal group size (calls x group problem indices), one oracle batch
        per (length, slot weights) signature."""
        lengths = run.lengths[calls].amax(dim=1)
        codes = run.heads[calls] * 2 + run.steps[calls]
        signatures, bucket = torch.unique(torch.cat([lengths.unsqueeze(1), codes], 1), dim=0,
                                          return_inverse=True)
        for index, (length, *slots) in enumerate(signatures.tolist()):
            members = calls[bucket == index]
            keys, queries = run.keys[members, :length], run.queries[members, :length]
            rows = tokens(self.x_heads, run.heads[members].flatten(), keys.flatten(0, 1),
                          queries.flatten(0, 1)).unflatten(0, members.shape)
            weights = [self.projections[code // 2, Step(code % 2)] for code in slots]
            outputs = run_packed(self.oracle, rows, weights)
            for slot, code in enumerate(slots):
                where, answer = members[:, slot], (outputs[:, slot], keys[:, slot],
                                                   queries[:, slot], self.oracle.causal)
                if Step(code % 2) is Step.NORMALIZER:
                    log_a[where, :length] = read_normalizer(*answer)
                else:
                    values[where, :length] = read_values(*answer)

    def _store(self, run: _Run, log_a: Tensor, values: Tensor) -> None:
        """Copy the answers into their job batches; combine the batches that are complete."""
        offset = 0
        for pending, problems in run.pieces:
            n = pending.batch.keys.shape[2]
            mine = torch.arange(offset, offset + len(problems))
            job, part, step = pending.locate(problems)
            first = step == Step.NORMALIZER
            pending.log_a[job[first], part[first]] = log_a[mine[first], 1:n + 1]
            pending.values[job[~first], part[~first]] = values[mine[~first], :n]
            pending.unanswered -= len(problems)
            offset += len(problems)
            if pending.unanswered == 0:
                self._combine(pending)

    def _combine(self, pending: _Pending) -> None:
        batch = pending.batch
        queries = batch.queries[:, 0]
        result = batch.combine(queries, pending.log_a, pending.values)
        asked = queries >= 0
        self.combiners[batch.head].add(queries[asked], result.log_normalizer[asked],
                                       result.values[asked])
        self.amplification = max(self.amplification, result.amplification)


def _pad(rows: Tensor, width: int) -> Tensor:
    """Append known-score rows without queries (-1) up to `width` rows."""
    return torch.cat([rows, torch.full((rows.shape[0], width - rows.shape[1]), -1)], dim=1)
