"""Steps per second of the transformer beside the reference interpreter, and the time of
one FLEQ pass.

SUBLEQ benchmark programs never halt (every jump stays inside the program and
the last instruction jumps back), so every pass of the transformer and every
step of the interpreter does real work. Weights are built before timing starts,
as in any real run. FLEQ passes are timed on built-in workloads or given programs, runs
restarted at each halt, beside the FLEQ reference interpreter on the same steps
(`bench_fleq`).

Every measurement is bounded: its first call (one pass) is timed apart as the
warm-up (allocation, caches, a JIT's compile), then chunks of passes grow only
while the next one fits in what is left of `--seconds`, so a cell takes about
warm-up + budget whatever the machine's load, and as long again for the reference
interpreter, which runs in slices between the chunks (`ReferenceSlices`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np
import torch

from vm.isa import FLEQ
from assembler.fleq_program import FleqProgram
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.machines.fleq.reference import FleqReference
from assembler.program import Program
from vm.machines.subleq.punchcard import geometry_for
from vm.common.errors import InputError, shown_path
from vm.runtime.executor import EngineConfig, TransformerExecutor
from vm.runtime.graphed import chunk_of
from vm.machines.subleq.reference import ReferenceMachine
from vm.tools.workloads import FLEQ_WORKLOADS, looping_programs, workload_geometry

PROGRAMS = Path(__file__).resolve().parents[2] / "programs" / "fleq"


@dataclass(frozen=True)
class Timing:
    """A bounded measurement: the rate after warm-up, and the warm-up itself."""

    per_second: float
    """Items (passes or steps) per second, first call excluded."""
    warmup_seconds: float
    """The first call, one item: allocation, caches, a JIT's compile."""
    items: int


SLICES = 20
"""A row's timed chunks grow only while one takes less than 1/SLICES of the budget, so that
the reference interpreter, run between them, alternates with the row about SLICES times."""


def timed(work: Callable[[int], None], budget: float,
          clock: Callable[[], float] = time.perf_counter, unit: int = 1,
          warmup: float | None = None,
          beside: Callable[[float], None] | None = None) -> Timing:
    """Time `work(k)` (k items) for about `budget` seconds after a one-unit warm-up.

    Chunks grow unit, 2 unit, 4 unit, ... while one takes under half of budget / SLICES,
    and the next one runs only if, at the rate so far, it ends within the budget: the
    wall time is warm-up + max(budget, one unit), never a fixed chunk that load can
    stretch to minutes. `unit`: the items the work does in one call at its own pace (a
    CUDA graph's passes; fewer run another way). `warmup`: the seconds of a warm-up the
    caller already ran and timed, which is then not run again. `beside` (the reference
    interpreter, `ReferenceSlices`) runs before the first timed chunk for budget / SLICES
    seconds and after each chunk for as long as that chunk took, outside the timing."""
    if warmup is None:
        start = clock()
        work(unit)
        warmup = clock() - start
    if beside is not None:
        beside(budget / SLICES)
    done, chunk, spent = 0, unit, 0.0
    while True:
        start = clock()
        work(chunk)
        took = clock() - start
        done += chunk
        spent += took
        if beside is not None:
            beside(took)
        if took < budget / SLICES / 2:
            chunk *= 2
        if spent + chunk * spent / done > budget:
            return Timing(done / spent, warmup, done)


@dataclass(frozen=True)
class ReferenceRate:
    """The reference interpreter's rate over one row (`ReferenceSlices`)."""

    per_second: float
    """Steps per second over every slice."""
    first: float
    """Over the first half of the slices (the first one ran just before the row's chunks)."""
    second: float
    """Over the second half (the last one ran just after them)."""

    @property
    def drift(self) -> float:
        """second / first - 1: how far the machine's own speed moved while the row ran."""
        return self.second / self.first - 1


class ReferenceSlices:
    """The reference interpreter run in slices between a row's timed chunks (`timed`'s
    `beside`), each about as long as the chunk before it, so that the row and the reference
    see the same seconds of a machine whose speed moves within seconds: with the reference
    timed half the budget before a row and half after, the ratios of five rounds spread
    13-40 %, with slices 5-9 % in the same minutes (docs/speed.md)."""

    def __init__(self, steps: Callable[[int], None],
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.steps, self.clock = steps, clock
        self.slices: list[tuple[int, float]] = []

    def __call__(self, seconds: float) -> None:
        """Run the reference for about `seconds`: the first slice in chunks doubling from
        one step until they add up to it (which also finds the rate), later ones in one
        call of as many steps as the rate so far makes in that time."""
        count, spent = 0, 0.0
        if self.slices:
            count = max(1, round(_steps_per_second(self.slices) * seconds))
            start = self.clock()
            self.steps(count)
            spent = self.clock() - start
        else:
            chunk = 1
            while spent < seconds or spent == 0:
                start = self.clock()
                self.steps(chunk)
                spent += self.clock() - start
                count += chunk
                chunk *= 2
        self.slices.append((count, spent))

    def rate(self) -> ReferenceRate:
        """The rate over every slice, and over each half of them (the first half ends
        before the middle slice of an odd count)."""
        half = len(self.slices) // 2
        return ReferenceRate(_steps_per_second(self.slices),
                             _steps_per_second(self.slices[:half]),
                             _steps_per_second(self.slices[half:]))


def _steps_per_second(slices: list[tuple[int, float]]) -> float:
    """The rate over (steps, seconds) slices; NaN over none."""
    spent = sum(seconds for _, seconds in slices)
    return sum(steps for steps, _ in slices) / spent if spent > 0 else math.nan


Row = TypeVar("Row", "BenchRow", "FleqBenchRow")


def median_round(rounds: list[Row]) -> Row:
    """One cell's rounds as one row: the round whose ratio is the median (the lower middle
    one of an even count), with the rounds' count, lowest and highest ratio, every round's
    full passes, and the first round's warm-up (the one that pays a compile or a capture).
    On a shared machine one round of the same command gave the ratio 0.561 in one run and
    0.637 in another minutes later (2026-11-27); the median of several and their spread
    say more."""
    ordered = sorted(rounds, key=lambda row: row.ratio)
    return replace(ordered[(len(ordered) - 1) // 2], rounds=len(rounds),
                   ratio_low=ordered[0].ratio, ratio_high=ordered[-1].ratio,
                   full_passes=sum(row.full_passes for row in rounds),
                   warmup_seconds=rounds[0].warmup_seconds)


def round_label(number: int, rounds: int) -> str:
    """' (round 2/5)' in a progress line where a cell has several rounds, else ''."""
    return f" (round {number}/{rounds})" if rounds > 1 else ""


@dataclass(frozen=True)
class BenchRow:
    columns: int
    batch: int
    device: str
    dtype: str
    attention: str
    evaluation: str
    threads: int
    transformer_steps_per_second: float
    warmup_seconds: float
    reference_steps_per_second: float
    """The reference's rate in slices between the row's chunks (`ReferenceSlices`)."""
    reference_drift: float
    """The reference's rate over the second half of its slices over the first, minus 1
    (`ReferenceRate`): how far the machine's speed moved during the row, which the ratio
    follows much less, as the row and the reference alternate."""
    full_passes: int
    """Timed passes the active evaluation ran in full (its guard failed), 0 for "full"."""
    rounds: int = 1
    """Rounds measured (`median_round`): the row is the one whose ratio is their median."""
    ratio_low: float = math.nan
    """The lowest ratio of the rounds (NaN where the row was not made by `median_round`)."""
    ratio_high: float = math.nan
    """The highest ratio of the rounds."""

    @property
    def ratio(self) -> float:
        return self.transformer_steps_per_second / self.reference_steps_per_second

    def as_dict(self) -> dict:
        return {**self.__dict__, "ratio": self.ratio}


def reference_steps(program: Program) -> Callable[[int], None]:
    """`steps(k)`: k more steps of the SUBLEQ reference interpreter on `program`."""
    machine = ReferenceMachine(program)

    def steps(count: int) -> None:
        for _ in range(count):
            machine.step()
    return steps


STARTING_PASSES = 2
"""Passes before timing starts, counted in the warm-up: a run's first pass builds the
active evaluation's cache in torch, its second is the first fused one (numba compiles it
when its cache on disk is cold). On a GPU the warm-up's next chunk captures the graph."""


def transformer_speed(program: Program, batch: int, config: EngineConfig, budget: float,
                      reference: ReferenceSlices | None = None
                      ) -> tuple[Timing, str, int, int]:
    """Program steps per second (passes x batch) of one sustained run of the looped
    transformer, the evaluation it used, how many of its passes the active evaluation
    had to run in full, and the CPU thread count most of its passes used (measured
    unless `config.threads` is given; 0 on a GPU).
    The run's set-up (the active evaluation projects every column once) falls in the
    warm-up. A fused run is timed in whole windows (its calls' own length, 128 passes)
    where one fits the budget: a short call pays for reloading each program's working
    set, about 13 us a program at n = 1024, so the doubling chunks' first calls of 1, 2, 4
    passes put batch 256 7 % below its sustained rate; a batch of 60,000, whose window
    took minutes, is timed in chunks of as many passes as the budget holds, whole CUDA
    graphs on a GPU (`fused_unit`). `reference` runs between the timed chunks."""
    executor = TransformerExecutor(geometry_for(program), config)
    runner = executor.runner(executor.load([program] * batch))

    def work(passes: int) -> None:
        runner.advance(passes)
        if config.device.startswith("cuda"):
            torch.cuda.synchronize()
    start = time.perf_counter()
    work(STARTING_PASSES)
    one = time.perf_counter()
    work(1)
    starting, one_pass = time.perf_counter() - start, time.perf_counter() - one
    unit = (fused_unit(runner.window, chunk_of(runner.active), budget, one_pass)
            if runner.evaluation == "fused" else 1)
    timing = timed(work, budget, unit=unit, beside=reference)
    return (Timing(timing.per_second * batch, starting + timing.warmup_seconds,
                   timing.items * batch), runner.evaluation, runner.fallbacks, runner.threads)


def fused_unit(window: int, pace: int, budget: float, one_pass: float) -> int:
    """Passes in each timed call of a fused run: a whole window where the budget holds one
    at the first pass's rate, else as many passes as it holds, in whole multiples of the
    compiled form's own call (`pace`: a CUDA graph's 32 passes, 1 on the CPU), and at least
    one such call. Without the rounding, an eager first pass of about 4 ms made a budget of
    0.5 s hold fewer than 128 passes, and a call of, say, 125 made 96 in graphs and 29 on
    the eager torch pass: batch 256 at n = 64 on an H100 measured 202,747-225,060 steps/s
    in such commands and 620,265-625,738 in the others (docs/speed.md, "On an H100")."""
    fits = min(window, int(budget / one_pass))
    return max(pace, fits // pace * pace)


MIN_COLUMNS = 6
"""The fewest columns a benchmark program fills: a scratch column, three memory cells, one
instruction and EOF (`workload_geometry` of fewer makes a program of 6 columns anyway)."""


def check_sizes(columns: list[int], batches: list[int], config: EngineConfig) -> None:
    """Refuse, before anything is timed, a column count or batch that cannot run, so a bad
    value late in a list does not throw away the rows measured before it (and a huge batch
    is refused before its list of programs is made)."""
    for n in columns:
        if n < MIN_COLUMNS:
            raise InputError(f"n = {n} columns is too few: a benchmark program needs at least "
                             f"{MIN_COLUMNS} (a scratch column, 3 memory cells, an instruction "
                             "and EOF)")
        TransformerExecutor(workload_geometry(n), config).check_memory(max(batches))


def bench(columns: list[int], batches: list[int], config: EngineConfig, budget: float,
          progress: Callable[[str], None] = lambda _: None, rounds: int = 1) -> list[BenchRow]:
    """A row per column count and batch, each once (`--columns 64,64` measured and printed
    n = 64 twice): `rounds` measurements in a row, each with the reference run between
    its chunks (`ReferenceSlices`), reported as their median round (`median_round`)."""
    columns, batches = list(dict.fromkeys(columns)), list(dict.fromkeys(batches))
    check_sizes(columns, batches, config)
    rows = []
    for n in columns:
        program = looping_programs(workload_geometry(n), 1)[0]
        for batch in batches:
            measured = []
            for number in range(1, rounds + 1):
                progress(f"n={n} batch={batch} on {config.device}"
                         f"{round_label(number, rounds)} ...")
                slices = ReferenceSlices(reference_steps(program))
                timing, evaluation, full_passes, threads = transformer_speed(
                    program, batch, config, budget, slices)
                reference = slices.rate()
                measured.append(BenchRow(n, batch, config.device, config.dtype,
                                         config.attention, evaluation, threads,
                                         timing.per_second, timing.warmup_seconds,
                                         reference.per_second, reference.drift, full_passes))
            rows.append(median_round(measured))
    return rows


@dataclass(frozen=True)
class Growth:
    """How the cost of a pass grows with n at one batch size: cost ~ n^exponent between the
    fewest and the most columns measured (issue 14's target reads the exponent from
    n = 64 to 4096 at batch 1; the rows' own rates, so it moves with the machine as they
    do)."""
    batch: int
    fewest: int
    most: int
    exponent: float
    exponent_against_reference: float
    """The same from the rows' ratios to the reference timed beside each (whose cost a step
    does not grow with n): on a shared machine whose speed moves between the rows, the
    rates' exponent moves with it (docs/speed.md: 0.32 from the rates, 0.27 from the
    ratios, in one run)."""

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def growth(rows: list[BenchRow]) -> list[Growth]:
    """A `Growth` for each batch size measured at two or more column counts, in the rows'
    order. A pass's cost is batch / steps per second, so at one batch the ratio of two
    rates is the inverse ratio of their costs; a rate that is not a positive finite
    number gives NaN."""
    by_batch: dict[int, list[BenchRow]] = {}
    for row in rows:
        by_batch.setdefault(row.batch, []).append(row)
    found = []
    for batch, measured in by_batch.items():
        fewest = min(measured, key=lambda row: row.columns)
        most = max(measured, key=lambda row: row.columns)
        if fewest.columns == most.columns:
            continue
        spread = math.log(most.columns / fewest.columns)
        found.append(Growth(batch, fewest.columns, most.columns,
                            _log_ratio(fewest.transformer_steps_per_second,
                                       most.transformer_steps_per_second) / spread,
                            _log_ratio(fewest.ratio, most.ratio) / spread))
    return found


def _log_ratio(first: float, second: float) -> float:
    """log(first / second) of two positive finite numbers, else NaN."""
    if all(0 < value < math.inf for value in (first, second)):
        return math.log(first / second)
    return math.nan


def format_growth(found: list[Growth]) -> str:
    """One line a batch size: 'batch 1: a pass costs ~ n^0.29 from n = 64 to 4096 (n^0.27
    against the reference beside each row)'."""
    return "\n".join(f"batch {item.batch}: a pass costs ~ n^{item.exponent:.2f} from "
                     f"n = {item.fewest} to {item.most} (n^"
                     f"{item.exponent_against_reference:.2f} against the reference beside "
                     "each row)" for item in found)


def figure(value: float, spec: str) -> str:
    """`value` in `spec`, or to 3 significant digits where `spec` would show a figure that is
    not zero as 0 (a ratio of 4.8e-05 read 0.000, 0.3 steps/s read 0)."""
    text = format(value, spec)
    if value != 0 and float(text.replace(",", "")) == 0:
        return format(value, ".3g")
    return text


def drift_cell(drift: float) -> str:
    """A reference drift as a signed percentage."""
    return f"{drift:+.1%}"


def spread_cell(row: BenchRow | FleqBenchRow, spec: str) -> str:
    """'5: 0.512-0.637' (rounds, lowest and highest ratio), or '1' for a single round."""
    if row.rounds == 1 or math.isnan(row.ratio_low):
        return str(row.rounds)
    return f"{row.rounds}: {figure(row.ratio_low, spec)}-{figure(row.ratio_high, spec)}"


def format_table(rows: list[BenchRow]) -> str:
    lines = ["| n | batch | device | dtype | attention | evaluation | threads | "
             "transformer steps/s | warm-up s | reference steps/s | reference drift | ratio | "
             "full passes | rounds: ratios |",
             "|---:|---:|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row.columns} | {row.batch} | {row.device} | {row.dtype} | "
                     f"{row.attention} | {row.evaluation} | {row.threads or '-'} | "
                     f"{figure(row.transformer_steps_per_second, ',.0f')} | "
                     f"{row.warmup_seconds:.3f} | "
                     f"{figure(row.reference_steps_per_second, ',.0f')} | "
                     f"{drift_cell(row.reference_drift)} | "
                     f"{figure(row.ratio, '.3f')} | "
                     f"{row.full_passes} | {spread_cell(row, '.3f')} |")
    return "\n".join(lines)


def inverse_workload(d: int = 8, seed: int = 0) -> str:
    """FLEQ source: `X = inverse(A, iters=3)` on a well-conditioned d x d matrix, then
    `y = inv(x)`: the inverse routine's blocks plus inv's sigmoid-sum heads."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.normal(size=(d, d)))
    v, _ = np.linalg.qr(rng.normal(size=(d, d)))
    matrix = u @ np.diag(np.linspace(2.0, 1.0, d)) @ v.T
    rows = ", ".join("[" + ", ".join(repr(float(x)) for x in row) + "]" for row in matrix)
    return (f".d {d}\n.data\nA: .matrix {d}x{d} [{rows}]\nX: .zeros {d}x{d}\nx: 2.0\n"
            f"y: 0.0\n.code\nX = inverse(A, iters=3)\ny = inv(x)\nhalt\n")


def fleq_workload(name: str) -> FleqProgram:
    """A built-in workload by name, or a .fleq file by path. A path that exists but is no
    file (a directory) is read, and so refused as it is, not as 'no file named'; '' names
    none (as Path('') it was the current directory: 'cannot read .: Is a directory'). A
    file without the .fleq suffix is refused by it: a .sq file was parsed as FLEQ and
    refused at its first instruction ("unexpected 'b'; expected ':', '='")."""
    if name == "calculator":
        return FLEQ.assemble_file(PROGRAMS / "calculator.fleq")
    if name == "inverse-d8":
        return FLEQ.assemble_text(inverse_workload(), "inverse-d8.fleq")
    path = Path(name)
    if not name or not path.exists():
        raise InputError(f"no FLEQ workload or file named '{name}' (built-in: "
                         f"{', '.join(FLEQ_WORKLOADS)})")
    if path.suffix not in FLEQ.suffixes:
        kind = repr(path.suffix) if path.suffix else "suffix-less"
        raise InputError(f"{shown_path(path)}: ltvm bench fleq times FLEQ programs (.fleq), "
                         f"not {kind} files")
    return FLEQ.assemble_file(path)


@dataclass(frozen=True)
class FleqBenchRow:
    program: str
    d: int
    rows: int
    columns: int
    layers: int
    heads: int
    batch: int
    device: str
    dtype: str
    attention: str
    evaluation: str
    threads: int
    seconds_per_pass: float
    warmup_seconds: float
    full_passes: int
    """Passes of the timed runs the active evaluation ran in full (its guard failed)."""
    reference_steps_per_second: float
    """The FLEQ reference interpreter's steps/s on one copy of the program (same restarts),
    in slices between the row's chunks (`ReferenceSlices`)."""
    reference_drift: float
    """The reference's rate over the second half of its slices over the first, minus 1."""
    rounds: int = 1
    """Rounds measured (`median_round`): the row is the one whose ratio is their median."""
    ratio_low: float = math.nan
    """The lowest ratio of the rounds (NaN where the row was not made by `median_round`)."""
    ratio_high: float = math.nan
    """The highest ratio of the rounds."""

    @property
    def program_steps_per_second(self) -> float:
        return self.batch / self.seconds_per_pass

    @property
    def ratio(self) -> float:
        return self.program_steps_per_second / self.reference_steps_per_second

    def as_dict(self) -> dict:
        return {**self.__dict__, "program_steps_per_second": self.program_steps_per_second,
                "ratio": self.ratio}


FLEQ_BENCH_STEPS = 1_000
"""A bench run restarts its program after this many passes if it has not halted by then."""


def fleq_pass_seconds(program: FleqProgram, batch: int, config: EngineConfig, budget: float,
                      reference: ReferenceSlices | None = None
                      ) -> tuple[TransformerExecutor, Timing, str, int, int]:
    """Seconds per pass of the FLEQ transformer on `batch` copies of the program, the
    evaluation the runs used, how many passes they ran in full and the CPU thread count
    most of the timed passes used (0 on a GPU).

    Passes are the program's own: runs from the loaded punchcard to the halt (at most
    FLEQ_BENCH_STEPS passes), restarted as often as the timing needs, through the run loop
    `ltvm run` uses (unchecked, so the configured evaluation is what runs). A halted
    program's passes are not timed: with the active evaluation they select no block.
    `reference` runs between the timed chunks.
    """
    executor = TransformerExecutor(fleq_geometry_for(program), replace(config, checked=False))
    X = executor.load([program] * batch)
    runner = executor.runner(X)

    def sync() -> None:
        if config.device.startswith("cuda"):
            torch.cuda.synchronize()
    # The warm-up: the first whole run, which also gives the run's length. (A second
    # runner, warmed up again, cost another run and its set-up: 70 s at n = 32,359.)
    start = time.perf_counter()
    runner.advance(FLEQ_BENCH_STEPS)
    sync()
    warmup = time.perf_counter() - start
    length = max(1, int(runner.result().steps.max()))

    def work(passes: int) -> None:
        done = 0
        while done < passes:
            runner.restart(X)
            count = min(length, passes - done)
            runner.advance(count)
            done += count
        sync()
    timing = timed(work, budget, unit=length, warmup=warmup, beside=reference)
    return executor, timing, runner.evaluation, runner.fallbacks, runner.threads


def fleq_reference_steps(program: FleqProgram) -> Callable[[int], None]:
    """`steps(k)`: k more steps of the FLEQ reference interpreter
    (vm/machines/fleq/reference.py) on the program's own steps, restarted at each halt as
    the transformer's runs are."""
    machine = FleqReference(program)

    def steps(count: int) -> None:
        for _ in range(count):
            if machine.halted:
                machine.reset()
            machine.step()
    return steps


def bench_fleq(names: list[str], batches: list[int], config: EngineConfig, budget: float,
               progress: Callable[[str], None] = lambda _: None,
               rounds: int = 1) -> list[FleqBenchRow]:
    """A row per program and batch: `rounds` measurements in a row, each with the FLEQ
    reference run between its chunks (`ReferenceSlices`), reported as their median round
    (`median_round`). A program or batch named twice is measured once."""
    names, batches = list(dict.fromkeys(names)), list(dict.fromkeys(batches))
    programs = [fleq_workload(name) for name in names]  # every file read before any timing
    for program in programs:
        TransformerExecutor(fleq_geometry_for(program), config).check_memory(max(batches))
    rows = []
    for name, program in zip(names, programs):
        for batch in batches:
            measured = []
            for number in range(1, rounds + 1):
                progress(f"{shown_path(name)} batch={batch} on {config.device}"
                         f"{round_label(number, rounds)} ...")
                slices = ReferenceSlices(fleq_reference_steps(program))
                executor, timing, evaluation, full, threads = fleq_pass_seconds(
                    program, batch, config, budget, slices)
                reference = slices.rate()
                weights = executor.machine.weights
                measured.append(FleqBenchRow(
                    name, program.d, weights.rows, weights.columns, len(weights.layers),
                    sum(weights.heads), batch, config.device, executor.dtype_name,
                    config.attention, evaluation, threads, 1.0 / timing.per_second,
                    timing.warmup_seconds, full, reference.per_second, reference.drift))
            rows.append(median_round(measured))
    return rows


def format_fleq_table(rows: list[FleqBenchRow]) -> str:
    lines = ["| program | d | rows | n | layers | heads | batch | device | dtype | attention | "
             "evaluation | threads | ms per pass | warm-up ms | program steps/s | "
             "reference steps/s | reference drift | ratio | full passes | rounds: ratios |",
             "|---|---:|---:|---:|---:|---:|---:|---|---|---|---|---:|---:|---:|---:|---:|---:|"
             "---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {shown_path(row.program)} | {row.d} | {row.rows} | {row.columns} | "
                     f"{row.layers} | {row.heads} | {row.batch} | {row.device} | {row.dtype} | "
                     f"{row.attention} | {row.evaluation} | {row.threads or '-'} | "
                     f"{row.seconds_per_pass * 1e3:,.3f} | {row.warmup_seconds * 1e3:,.1f} | "
                     f"{figure(row.program_steps_per_second, ',.1f')} | "
                     f"{figure(row.reference_steps_per_second, ',.1f')} | "
                     f"{drift_cell(row.reference_drift)} | "
                     f"{figure(row.ratio, '.4f')} | "
                     f"{row.full_passes} | {spread_cell(row, '.4f')} |")
    return "\n".join(lines)
