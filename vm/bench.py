"""Steps per second of the transformer beside the reference interpreter.

Benchmark programs never halt (every jump stays inside the program and the
last instruction jumps back), so every pass of the transformer and every
step of the interpreter does real work; both run for a fixed time budget.
Weights are built before timing starts, as in any real run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from assembler.program import Program
from assembler.punchcard import geometry_for
from vm.executor import EngineConfig, TransformerExecutor
from vm.reference import ReferenceMachine
from vm.workloads import looping_programs, workload_geometry


@dataclass(frozen=True)
class BenchRow:
    columns: int
    batch: int
    device: str
    dtype: str
    attention: str
    transformer_steps_per_second: float
    reference_steps_per_second: float

    @property
    def ratio(self) -> float:
        return self.transformer_steps_per_second / self.reference_steps_per_second


def _timed(work: Callable[[int], None], chunk: int, budget: float) -> float:
    """Items per second of `work(chunk)`, repeated for about `budget` seconds."""
    work(chunk)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < budget or done == 0:
        work(chunk)
        done += chunk
    return done / (time.perf_counter() - start)


def reference_speed(program: Program, budget: float) -> float:
    machine = ReferenceMachine(program)

    def work(steps: int) -> None:
        for _ in range(steps):
            machine.step()
    return _timed(work, 1000, budget)


def transformer_speed(program: Program, batch: int, config: EngineConfig,
                      budget: float) -> float:
    """Program steps per second (passes x batch) of the looped transformer."""
    executor = TransformerExecutor(geometry_for(program), config)
    X = executor.load([program] * batch)

    def work(passes: int) -> None:
        executor.run(X, passes)
        if config.device.startswith("cuda"):
            torch.cuda.synchronize()
    return _timed(work, 64, budget) * batch


def bench(columns: list[int], batches: list[int], config: EngineConfig, budget: float,
          progress: Callable[[str], None] = lambda _: None) -> list[BenchRow]:
    rows = []
    for n in columns:
        program = looping_programs(workload_geometry(n), 1)[0]
        reference = reference_speed(program, budget)
        for batch in batches:
            progress(f"n={n} batch={batch} on {config.device} ...")
            speed = transformer_speed(program, batch, config, budget)
            rows.append(BenchRow(n, batch, config.device, config.dtype, config.attention,
                                 speed, reference))
    return rows


def format_table(rows: list[BenchRow]) -> str:
    lines = ["| n | batch | device | dtype | attention | transformer steps/s | "
             "reference steps/s | ratio |",
             "|---:|---:|---|---|---|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row.columns} | {row.batch} | {row.device} | {row.dtype} | "
                     f"{row.attention} | {row.transformer_steps_per_second:,.0f} | "
                     f"{row.reference_steps_per_second:,.0f} | {row.ratio:.3f} |")
    return "\n".join(lines)
