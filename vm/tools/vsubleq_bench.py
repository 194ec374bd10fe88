"""Steps per second of the standard SUBLEQ transformer beside its reference interpreter.

The workload is a counting loop that never halts (`mem[count] -= 1`, then back to 0 by
either branch), padded with zeros to the memory size m being measured, so every pass and
every reference step does real work whatever the budget. The tapes are empty (no input,
a zero-length output tape): the columns measured are the memory's, plus the cpu column
and the input tape's end-of-input sentinel. Weights are built before timing starts; the
first passes (the cache build and the first fused pass, which compiles when numba's cache is
cold) and one more are timed apart as the warm-up (see `vm.tools.bench.timed`).
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch

from vm.common.errors import InputError, RunFailure
from vm.common.limits import is_whole_number
from vm.machines.vsubleq.layout import MAX_MEMORY
from vm.machines.vsubleq.reference import MAX_BITS, Image, Reference
from vm.machines.vsubleq.punchcard import geometry_for
from vm.machines.vsubleq.run import DTYPES, TransformerRun
from vm.runtime.config import EngineConfig
from vm.runtime.executor import evaluator_for
from vm.runtime.graphed import chunk_of
from vm.tools.bench import STARTING_PASSES, ReferenceSlices, drift_cell, figure, timed
from vm.transformer.memory import check_dense_memory

COUNTING_LOOP = [6, 7, 0,   # 0: mem[7] -= mem[6] (1); <= 0: jump to 0
                 8, 8, 0,   # 3: Z - Z = 0: jump to 0
                 1, 0, 0]   # 6: one, 7: count, 8: Z
"""Never halts: every step subtracts, every pass of the transformer does a whole step."""
MIN_WORDS = 16
"""The smallest power of two that holds the loop."""


def counting_loop(words: int, bits: int) -> Image:
    """The counting loop padded to `words` cells (a power of two that N-bit words address)."""
    for option, value in (("--words", words), ("--bits", bits)):  # 16.0 failed in `&`
        if not is_whole_number(value):
            raise InputError(f"{option} takes whole numbers, got {value!r:.40}")
    if words < MIN_WORDS or words & (words - 1) or words > MAX_MEMORY:
        raise InputError(f"--words must be powers of two from {MIN_WORDS} to {MAX_MEMORY}, "
                         f"got {words}")
    if not 4 <= bits <= MAX_BITS:
        raise InputError(f"--bits must be between 4 and {MAX_BITS}, got {bits}")
    if words > 1 << (bits - 1):
        raise InputError(f"{words} words are more than {bits}-bit words can address "
                         f"({1 << (bits - 1)}): raise --bits or lower --words")
    return Image.from_words(COUNTING_LOOP + [0] * (words - len(COUNTING_LOOP)), bits,
                            "counting loop")


@dataclass(frozen=True)
class VsubleqBenchRow:
    words: int
    bits: int
    columns: int
    rows: int
    layers: int
    heads: int
    device: str
    dtype: str
    attention: str
    evaluation: str
    """What ran: fused, active (only the columns a pass can change) or full."""
    build_seconds: float
    transformer_steps_per_second: float
    warmup_seconds: float
    reference_steps_per_second: float
    """The reference's rate in slices between the row's chunks (`ReferenceSlices`)."""
    reference_drift: float
    """The reference's rate over the second half of its slices over the first, minus 1."""

    @property
    def ratio(self) -> float:
        return self.transformer_steps_per_second / self.reference_steps_per_second

    def as_dict(self) -> dict:
        return {**self.__dict__, "ratio": self.ratio}


def reference_steps(image: Image) -> Callable[[int], None]:
    """`steps(k)`: k more steps of the reference interpreter on `image`."""
    machine = Reference(image)

    def steps(count: int) -> None:
        for _ in range(count):
            machine.step()
    return steps


def bench_vsubleq(words: list[int], bits: int, budget: float, dtype: str = "float32",
                  attention: str = "masked", device: str = "cpu", evaluation: str = "auto",
                  progress: Callable[[str], None] = lambda _: None) -> list[VsubleqBenchRow]:
    """One row per memory size: the transformer's steps/s and the reference's, same run.
    Every argument is checked before any work: a NaN budget timed chunks doubling without
    end, evaluation 'bogus' ran as 'active' and 'fused' without numba as 'active' too."""
    EngineConfig(dtype=dtype, device=device, attention=attention, evaluation=evaluation)
    if (not isinstance(budget, numbers.Real) or isinstance(budget, bool)
            or not math.isfinite(budget) or budget <= 0):
        raise InputError(f"the time budget must be a positive number of seconds, got "
                         f"{budget!r:.40}")
    if isinstance(words, (str, bytes)) or not isinstance(words, Iterable):
        raise InputError(f"--words must be a list of memory sizes, got {type(words).__name__}")
    images = [counting_loop(size, bits) for size in words]  # refuse bad sizes before work
    if attention == "dense":  # as TransformerRun refuses it, but before any row is timed
        for image in images:
            check_dense_memory(geometry_for(image, 0, 0).columns, DTYPES[dtype], device,
                               "image")
    rows = []
    for image in images:
        progress(f"m={image.size} N={bits} on {device} ...")
        start = time.perf_counter()
        run = TransformerRun(image, dtype, attention, device=device, max_output=0,
                             checked=False,
                             accelerate=partial(evaluator_for, evaluation=evaluation))
        built = time.perf_counter() - start

        def work(passes: int) -> None:
            run.advance(passes)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            if run.halted:  # the loop never halts: a halted machine would time nothing,
                # in chunks doubling until they overflowed
                raise RunFailure(f"the counting loop halted on the transformer at "
                                 f"m = {image.size}, N = {bits} ({dtype}, {run.evaluation}): "
                                 "it never halts, so this run is wrong and its rate would "
                                 "time nothing")
        start = time.perf_counter()
        work(STARTING_PASSES)
        starting = time.perf_counter() - start
        slices = ReferenceSlices(reference_steps(image))
        timing = timed(work, budget, unit=chunk_of(run.active), beside=slices)
        reference = slices.rate()
        weights = run.machine.weights
        rows.append(VsubleqBenchRow(
            image.size, bits, weights.columns, weights.rows, len(weights.layers),
            max(weights.heads), device, dtype, attention, run.evaluation, built,
            timing.per_second, starting + timing.warmup_seconds, reference.per_second,
            reference.drift))
    return rows


def format_vsubleq_table(rows: list[VsubleqBenchRow]) -> str:
    lines = ["| m | N | n | rows | layers | heads | device | dtype | attention | evaluation | "
             "build s | transformer steps/s | warm-up s | reference steps/s | reference drift | "
             "ratio |",
             "|---:|---:|---:|---:|---:|---:|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row.words} | {row.bits} | {row.columns} | {row.rows} | {row.layers} | "
                     f"{row.heads} | {row.device} | {row.dtype} | {row.attention} | "
                     f"{row.evaluation} | {row.build_seconds:.2f} | "
                     f"{figure(row.transformer_steps_per_second, ',.1f')} | "
                     f"{row.warmup_seconds:.3f} | "
                     f"{figure(row.reference_steps_per_second, ',.0f')} | "
                     f"{drift_cell(row.reference_drift)} | {figure(row.ratio, '.3f')} |")
    return "\n".join(lines)
