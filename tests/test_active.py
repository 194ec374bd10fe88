"""Active-column evaluation (vm/runtime/active.py) against the full pass, its definition.

Every lockstep test runs the full pass (`LoopedTransformer.step_`) on one copy of X and the
active evaluation on another and asserts the two X bit-identical after every pass, and that
the active passes really ran on the active columns (no fallback) where the guard should hold.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings

from vm.machines.subleq.punchcard import geometry_for
from assembler.subleq import assemble_file
from tests.strategies import programs as random_programs
from vm.runtime.active import ActiveEvaluator, exactness_bound
from vm.runtime.active_fleq import FleqActiveEvaluator
from vm.common.errors import InputError, PrecisionError
from vm.runtime.executor import AUTO_ACTIVE_CELLS, EngineConfig, TransformerExecutor
from vm.runtime.fused import FusedPass, available as fused_available
from vm.runtime.graphed import GraphedPasses
from vm.common.geometry import Geometry
from vm.transformer.layers import flush_denormals, to_internal
from vm.isa import FLEQ
from vm.tools.workloads import looping_programs

ROOT = Path(__file__).resolve().parents[1]
SUBLEQ_PROGRAMS = sorted((ROOT / "programs" / "subleq").glob("*.sq"))
FLEQ_PROGRAMS = sorted((ROOT / "programs" / "fleq").glob("*.fleq"))


NEEDS_NUMBA = pytest.mark.skipif(not fused_available(), reason="numba is not installed")
EVALUATIONS = ["torch", pytest.param("fused", marks=NEEDS_NUMBA), "graphed"]
"""The active pass in torch (vm/runtime/active.py), compiled (vm/runtime/fused.py), and in
the capturable form that CUDA graphs record (vm/runtime/graphed.py; here on the CPU, one
pass a chunk, so that X is compared after every pass)."""


def evaluator(executor: TransformerExecutor, capacity: int | None = None,
              evaluation: str = "torch") -> ActiveEvaluator:
    machine = executor.machine
    extra = {} if capacity is None else {"capacity": capacity}
    built = ActiveEvaluator(executor.model, machine.weights, machine.layout,
                            executor.geometry.scratch, machine.real_fields, **extra)
    if evaluation == "fused":
        built.fused = FusedPass(built, machine.weights)
    elif evaluation == "graphed":
        built.fused = GraphedPasses(built, length=1)
    assert built.fused is None or built.fused.unsupported is None
    return built


def lockstep(executor: TransformerExecutor, cards: torch.Tensor, passes: int,
             strict: bool = True, capacity: int | None = None,
             evaluation: str = "torch") -> int:
    """Run full and active passes side by side, X equal after each; returns the fallbacks.
    With a compiled evaluation (fused, graphed), also asserts that it computed at least one
    of the passes that did not fall back to the full pass (the others ran on the torch
    active pass)."""
    fused = evaluation != "torch"
    pc = np.arange(executor.layout["pc"].start, executor.layout["pc"].stop)
    with torch.inference_mode(), flush_denormals():
        full, active = to_internal(cards), to_internal(cards)
        run = evaluator(executor, capacity, evaluation).start(active, strict=strict,
                                                              fused=fused)
        record = torch.empty((1, len(pc), active.shape[1]), dtype=active.dtype)
        compiled = 0
        for step in range(passes):
            before = full[pc, :, 0].clone()
            executor.model.step_(full)
            if run.fused_steps(1, record, pc):
                compiled += 1
                assert torch.equal(record[0], before), "the recorded pc is not the pass's own"
            else:
                run.step(step)
            assert torch.equal(full, active), f"X differs after pass {step}"
        if fused and run.fallbacks < passes:
            assert compiled > 0
        return run.fallbacks


def geometry(columns: int, bits: int, scratch: int = 1) -> Geometry:
    """n columns: a quarter memory (at least 3 cells), the rest instructions."""
    memory = max(3, columns // 4)
    return Geometry(scratch, memory, columns - scratch - memory, bits)


@pytest.mark.parametrize("evaluation", EVALUATIONS)
@pytest.mark.parametrize("path", SUBLEQ_PROGRAMS, ids=lambda path: path.stem)
def test_every_subleq_program_runs_bit_identically(path, evaluation):
    program = assemble_file(path)
    executor = TransformerExecutor(geometry_for(program), EngineConfig())
    assert lockstep(executor, executor.load([program]), 400, evaluation=evaluation) == 0


RANDOM_CASES = [
    (16, 8, 1, "float32"), (16, 16, 4, "float64"), (16, 32, 4, "float32"),
    (64, 8, 4, "float64"), (64, 16, 1, "float32"), (64, 32, 4, "float64"),
    (256, 8, 4, "float32"), (256, 16, 4, "float64"), (256, 32, 1, "float64"),
]
"""(n, N, batch, dtype) of the 1000-pass runs of the torch and fused passes. The capturable
form differs from the torch pass only in its fixed extras width and where its guard's
verdict goes: it runs one batch-4 case (padding columns) of each n."""


@pytest.mark.parametrize(("columns", "bits", "batch", "dtype", "evaluation"),
                         [(*case, "torch") for case in RANDOM_CASES]
                         + [pytest.param(*case, "fused", marks=NEEDS_NUMBA)
                            for case in RANDOM_CASES]
                         + [(*RANDOM_CASES[i], "graphed") for i in (2, 3, 6)])
def test_random_looping_programs_run_bit_identically_for_1000_passes(columns, bits, batch, dtype,
                                                                     evaluation):
    shape = geometry(columns, bits)
    executor = TransformerExecutor(shape, EngineConfig(dtype=dtype))
    cards = executor.load(looping_programs(shape, batch, seed=columns + bits + batch))
    assert lockstep(executor, cards, 1000, evaluation=evaluation) == 0


@settings(max_examples=15, deadline=None, database=None)
@given(random_programs())
def test_halting_random_programs_run_bit_identically(program):
    """Random programs of the shared strategy (2- to 16-bit words): most halt early and then
    loop on EOF, which the active evaluation must leave unchanged too."""
    executor = TransformerExecutor(geometry_for(program), EngineConfig())
    for evaluation in ("torch", "fused") if fused_available() else ("torch",):
        assert lockstep(executor, executor.load([program] * 2), 60, evaluation=evaluation) == 0


@pytest.mark.parametrize("path", FLEQ_PROGRAMS, ids=lambda path: path.stem)
def test_fleq_programs_are_not_evaluated_on_active_columns(path):
    """FLEQ's function blocks round differently on a subset of columns: the column-skipping
    evaluator declines them; the executor uses the block-skipping one
    (vm/runtime/active_fleq.py) and its runs stay identical to `evaluation="full"`."""
    program = FLEQ.assemble_file(path)
    shape = FLEQ.geometry_for(program)
    active = TransformerExecutor(shape, EngineConfig())
    full = TransformerExecutor(shape, EngineConfig(evaluation="full"))
    assert isinstance(active.active, FleqActiveEvaluator)
    assert "real-valued" in evaluator(active).unsupported
    X = active.load([program])
    assert torch.equal(active.run(X, 40).X, full.run(X, 40).X)


@pytest.mark.parametrize("evaluation", EVALUATIONS)
@pytest.mark.parametrize(("columns", "temperature"), [(64, 1.0), (1024, 1.5)])
def test_the_guard_fires_where_skipping_would_be_wrong(columns, temperature, evaluation):
    """At these temperatures some pass changes a second non-scratch column of a program
    beside the cell it writes; the guard must refuse every active pass."""
    shape = geometry(columns, 8)
    executor = TransformerExecutor(shape, EngineConfig(temperature=temperature, checked=False))
    cards = executor.load(looping_programs(shape, 1, seed=1))
    changed = []
    with torch.inference_mode(), flush_denormals():
        X = to_internal(cards)
        for _ in range(10):
            before = X.clone()
            executor.model.step_(X)
            changed.append(int((before != X)[:, 0, shape.scratch:].any(0).sum()))
    assert max(changed) >= 2
    assert lockstep(executor, cards, 20, strict=False, evaluation=evaluation) == 20
    with pytest.raises(PrecisionError, match="precision error at step 0"):
        lockstep(executor, cards, 1, evaluation=evaluation)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_write_layer_keeps_every_column_within_the_skip_bound(dtype):
    """The bound behind SKIP_BOUND, on the machine's own write-layer ReLU module: a memory word
    comes back bit for bit from any write buffer within 1/4 of it, an instruction column's
    zero from any buffer within 1/8 (weight below 1/16 moves the buffer by at most 1/8);
    beyond those margins they do change."""
    shape = geometry(64, 8)
    executor = TransformerExecutor(shape, EngineConfig(dtype=dtype))
    layout, ffn = executor.layout, executor.model.layers[-1].ffn
    rng = np.random.default_rng(0)
    columns = 4000
    words = rng.choice([-1.0, 1.0], size=(shape.bits, columns))
    words[:, : columns // 4] = 0.0
    scales = np.where(rng.random((shape.bits, columns)) < 0.5, 1.0,
                      2.0 ** -rng.integers(1, 60, (shape.bits, columns)))

    def written(margin: float) -> np.ndarray:
        X = torch.zeros((layout.rows, 1, columns), dtype=executor.dtype)
        noise = rng.uniform(-margin, margin, (shape.bits, columns)) * scales
        X[layout["mem"], 0] = torch.as_tensor(words, dtype=executor.dtype)
        X[layout["wbuf"], 0] = torch.as_tensor(words + noise, dtype=executor.dtype)
        with torch.inference_mode():
            ffn(X)
        assert not X[layout["wbuf"]].any()
        return X[layout["mem"], 0].numpy()

    assert np.array_equal(written(1 / 8), words)
    assert not np.array_equal(written(0.3)[:, columns // 4:], words[:, columns // 4:])
    assert written(0.2)[:, : columns // 4].any()


@pytest.mark.parametrize("evaluation", EVALUATIONS)
def test_the_capacity_guard_falls_back_and_stays_identical(evaluation):
    """With room for no extra column, no pass can write memory on the active columns."""
    shape = geometry(64, 8)
    executor = TransformerExecutor(shape, EngineConfig())
    cards = executor.load(looping_programs(shape, 1))
    fallbacks = lockstep(executor, cards, 50, strict=False, capacity=0, evaluation=evaluation)
    assert fallbacks == 50
    with pytest.raises(PrecisionError, match="columns"):
        lockstep(executor, cards, 1, capacity=0, evaluation=evaluation)


@pytest.mark.parametrize("evaluation", EVALUATIONS)
def test_a_state_off_the_lattice_is_evaluated_in_full(evaluation):
    """A memory bit at 0.75 is off the lattice: that pass runs in full (whose write layer
    snaps every memory word back to ±1), the next ones on the active columns."""
    shape = geometry(64, 8)
    executor = TransformerExecutor(shape, EngineConfig())
    cards = executor.load(looping_programs(shape, 1)).clone()
    cards[0, executor.layout.row("mem", 0), shape.scratch + 5] = 0.75
    assert lockstep(executor, cards, 5, strict=False, evaluation=evaluation) == 1
    with pytest.raises(PrecisionError, match="field 'state'"):
        lockstep(executor, cards, 1, evaluation=evaluation)


def test_a_wider_scratchpad_is_evaluated_in_full():
    executor = TransformerExecutor(geometry(64, 8, scratch=2), EngineConfig())
    assert executor.active is None
    assert "scratchpad" in evaluator(executor).unsupported


def test_the_bound_is_a_quarter_ulp_of_one():
    assert exactness_bound(torch.float32) == 2.0 ** -26
    assert exactness_bound(torch.float64) == 2.0 ** -55


def test_active_runs_agree_with_full_runs():
    path = ROOT / "programs" / "subleq" / "bubble_sort.sq"
    program = assemble_file(path)
    shape = geometry_for(program)
    active = TransformerExecutor(shape, EngineConfig(evaluation="active"))
    full = TransformerExecutor(shape, EngineConfig(evaluation="full"))
    assert active.active is not None and full.active is None
    runs = [executor.run(executor.load([program] * 3), 5000) for executor in (active, full)]
    assert torch.equal(runs[0].X, runs[1].X)
    assert np.array_equal(runs[0].steps, runs[1].steps) and runs[0].halted.all()
    assert active.fallbacks == 0


def test_a_run_advanced_in_parts_equals_one_run():
    """The runner keeps the active evaluation's cache between parts; X and the step counts
    come out as from one uninterrupted run, halting programs included."""
    program = assemble_file(ROOT / "programs" / "subleq" / "gcd.sq")
    executor = TransformerExecutor(geometry_for(program), EngineConfig(evaluation="active"))
    X = executor.load([program] * 2)
    runner = executor.runner(X)
    for part in (1, 7, 30, 500):
        runner.advance(part)
    parts, whole = runner.result(), executor.run(X, 538)
    assert torch.equal(parts.X, whole.X) and np.array_equal(parts.steps, whole.steps)
    assert runner.evaluation == "active" and parts.halted.all()


def test_auto_evaluation_without_numba_chooses_active_columns_from_the_threshold_on(
        monkeypatch):
    shape = geometry(64, 8)
    executor = TransformerExecutor(shape, EngineConfig())
    monkeypatch.setattr(executor.active, "fused", None)
    small = AUTO_ACTIVE_CELLS // shape.columns - 1
    programs = looping_programs(shape, small + 1)
    assert executor.runner(executor.load(programs[:small])).evaluation == "full"
    assert executor.runner(executor.load(programs)).evaluation == "active"


@pytest.mark.skipif(not fused_available(), reason="numba is not installed")
def test_auto_evaluation_with_numba_is_fused_and_agrees_with_full_runs():
    program = assemble_file(ROOT / "programs" / "subleq" / "bubble_sort.sq")
    shape = geometry_for(program)
    auto = TransformerExecutor(shape, EngineConfig())
    full = TransformerExecutor(shape, EngineConfig(evaluation="full"))
    X = auto.load([program] * 2)
    runner = auto.runner(X)
    runner.advance(5000)
    assert runner.evaluation == "fused" and runner.result().halted.all()
    whole = full.run(X, 5000)
    assert torch.equal(runner.result().X, whole.X)
    assert np.array_equal(runner.result().steps, whole.steps)
    assert runner.active.fused_passes > 0


def test_fused_evaluation_without_numba_is_refused(monkeypatch):
    monkeypatch.setattr("vm.runtime.fused.available", lambda: False)
    with pytest.raises(InputError, match="numba"):
        EngineConfig(evaluation="fused")


@pytest.mark.parametrize("config", [EngineConfig(checked=True), EngineConfig(attention="dense")])
def test_checked_and_dense_runs_are_evaluated_in_full(config):
    program = assemble_file(ROOT / "programs" / "subleq" / "gcd.sq")
    assert TransformerExecutor(geometry_for(program), config).active is None


@pytest.mark.skipif(not fused_available(), reason="numba is not installed")
@pytest.mark.parametrize("count", [8, 300])
def test_programs_that_ran_ahead_of_an_unproven_pass_are_rolled_back(monkeypatch, count):
    """A batch's programs run a fused call's passes in lockstep blocks; when one stops early
    (here program 0, run as a block of its own, three passes before the end, as if its next
    pass were unproven), the others are rolled back from the undo log to the same pass, and
    the run goes on identical to the full pass. 300 passes outgrow the log kept for the
    executor's 128-pass windows."""
    from vm.runtime import fused as fused_module

    real = fused_module._lockstep

    def program_0_stops_early(start, stop, count, *arguments):
        real(start, start + 1, count - 3, *arguments)
        real(start + 1, stop, count, *arguments)

    shape = geometry(64, 8)
    executor = TransformerExecutor(shape, EngineConfig())
    cards = executor.load(looping_programs(shape, 4, seed=5))
    pc = np.arange(executor.layout["pc"].start, executor.layout["pc"].stop)
    with torch.inference_mode(), flush_denormals():
        full, active = to_internal(cards), to_internal(cards)
        run = evaluator(executor, evaluation="fused").start(active, fused=True)
        record = torch.empty((count, len(pc), active.shape[1]), dtype=active.dtype)
        run.step(0)
        executor.model.step_(full)
        assert run.fused_steps(1, record, pc, threads=1) == 1  # the log is made here
        executor.model.step_(full)
        monkeypatch.setattr(fused_module, "_lockstep", program_0_stops_early)
        assert run.fused_steps(count, record, pc, threads=1) == count - 3
        for _ in range(count - 3):
            executor.model.step_(full)
        assert torch.equal(full, active) and run.stale
        monkeypatch.setattr(fused_module, "_lockstep", real)
        for step in range(20):
            executor.model.step_(full)
            if not run.fused_steps(1, record, pc, threads=1):
                run.step(step)
            assert torch.equal(full, active), f"X differs after pass {step}"
    assert run.fallbacks == 0 and run.fused_passes > 0
