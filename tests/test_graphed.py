"""Active passes in chunks (vm/runtime/graphed.py) against the full pass, on the CPU (the
chunk runs as Python calls) and, where a GPU is present, captured as CUDA graphs."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch

from assembler.subleq import assemble_file
from vm.common.errors import PrecisionError
from vm.common.geometry import Geometry
from vm.isa import FLEQ
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.machines.subleq.punchcard import geometry_for
from vm.machines.subleq.reference import run_reference
from vm.runtime.active import ActiveEvaluator, _GuardFailure
from vm.runtime.active_fleq import FleqActiveEvaluator
from vm.runtime.executor import EngineConfig, TransformerExecutor
from vm.runtime.graphed import FleqGraphedPasses, GraphedPasses
from vm.tools.bench import fleq_workload
from vm.tools.workloads import looping_programs
from vm.transformer import layers
from vm.transformer.layers import flush_denormals, to_internal

ROOT = Path(__file__).resolve().parents[1]
SUBLEQ_PROGRAMS = sorted((ROOT / "programs" / "subleq").glob("*.sq"))
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, CUDA])]


def geometry(columns: int, bits: int) -> Geometry:
    memory = max(3, columns // 4)
    return Geometry(1, memory, columns - 1 - memory, bits)


def chunked(executor: TransformerExecutor, cards: torch.Tensor, chunks: int, length: int,
            strict: bool = True) -> tuple[GraphedPasses, int]:
    """`chunks` chunks of `length` passes beside the full pass: X equal after each chunk and
    the recorded program counters those of the full pass before each of its passes. A chunk
    the graph cannot prove is run pass by pass on the torch active pass instead. Returns
    the compiled form and how many chunks it made (not the first: that one builds the
    cache and learns the run's query pattern on the torch pass)."""
    machine = executor.machine
    evaluator = ActiveEvaluator(executor.model, machine.weights, machine.layout,
                                executor.geometry.scratch)
    graphed = evaluator.fused = GraphedPasses(evaluator, length)
    pc = np.arange(executor.layout["pc"].start, executor.layout["pc"].stop)
    with torch.inference_mode(), flush_denormals():
        full, active = to_internal(cards), to_internal(cards)
        run = evaluator.start(active, strict=strict, fused=True)
        record = torch.empty((length, len(pc), active.shape[1]), dtype=active.dtype,
                             device=active.device)
        step = made = 0
        for chunk in range(chunks):
            counters = []
            for _ in range(length):
                counters.append(full[pc, :, 0].clone())
                executor.model.step_(full)
            if run.fused_steps(length, record, pc) == length:
                made += 1
                assert torch.equal(record, torch.stack(counters)), f"pcs of chunk {chunk}"
            else:
                for _ in range(length):
                    run.step(step)
                    step += 1
            assert torch.equal(full, active), f"X differs after chunk {chunk}"
    return graphed, made


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("length", [1, 8])
def test_chunks_are_bit_identical_to_the_full_pass(device, length):
    shape = geometry(64, 8)
    executor = TransformerExecutor(shape, EngineConfig(device=device))
    cards = executor.load(looping_programs(shape, 4, seed=11))
    graphed, made = chunked(executor, cards, 200 // length, length)
    assert made == 200 // length - 1, "every chunk after the first (which builds the cache)"
    assert graphed.captures == 1, "a run whose cache was never rebuilt needs one graph"


def test_the_captured_chunk_goes_with_its_run():
    """The evaluator outlives runs (executors share it): the chunk, which holds copies of X
    and the cache (and on a GPU the graph's memory), must be freed with its run."""
    shape = geometry(64, 8)
    executor = TransformerExecutor(shape, EngineConfig())
    machine = executor.machine
    evaluator = ActiveEvaluator(executor.model, machine.weights, machine.layout, 1)
    evaluator.fused = GraphedPasses(evaluator, 4)
    pc = np.arange(executor.layout["pc"].start, executor.layout["pc"].stop)
    with torch.inference_mode(), flush_denormals():
        X = to_internal(executor.load(looping_programs(shape, 2, seed=2)))
        run = evaluator.start(X, fused=True)
        run.step(0)
        record = torch.empty((4, len(pc), 2), dtype=X.dtype)
        assert run.fused_steps(4, record, pc) == 4
        chunk = weakref.ref(run.graph)
        del run
        gc.collect()
    assert chunk() is None


@pytest.mark.parametrize("device", DEVICES)
def test_a_chunk_that_is_not_proven_leaves_x_as_it_was(device):
    """At temperature 1 some pass changes a column it does not write: the chunk's passes
    ran (on the CPU, as calls), so only the restore brings X, cache and own scores back."""
    shape = geometry(64, 8)
    executor = TransformerExecutor(shape, EngineConfig(device=device, temperature=1.0,
                                                       checked=False))
    cards = executor.load(looping_programs(shape, 1, seed=1))
    machine = executor.machine
    evaluator = ActiveEvaluator(executor.model, machine.weights, machine.layout, 1)
    evaluator.fused = GraphedPasses(evaluator, 4)
    pc = np.arange(executor.layout["pc"].start, executor.layout["pc"].stop)
    with torch.inference_mode(), flush_denormals():
        X = to_internal(cards)
        run = evaluator.start(X, fused=True)
        run._rebuild()
        with pytest.raises(_GuardFailure):
            run._active_pass()
        assert all(key in run.zero_queries for key in run.self_query)
        before = [X.clone(), run.cache.clone(), *[s.clone() for s in run.own_scores.values()]]
        record = torch.empty((4, len(pc), X.shape[1]), dtype=X.dtype, device=X.device)
        assert run.fused_steps(4, record, pc) == 0
        after = [X, run.cache, *run.own_scores.values()]
        assert all(torch.equal(a, b) for a, b in zip(before, after))
    with pytest.raises(PrecisionError):
        chunked(executor, cards, 1, 1)


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("path", SUBLEQ_PROGRAMS, ids=lambda path: path.stem)
def test_every_subleq_program_runs_bit_identically_in_graphs(path):
    program = assemble_file(path)
    executor = TransformerExecutor(geometry_for(program), EngineConfig(device="cuda"))
    assert chunked(executor, executor.load([program]), 400, 1)[1] == 399
    assert chunked(executor, executor.load([program]), 12, 32)[1] == 11


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize(("columns", "bits", "batch", "dtype"), [
    (16, 8, 1, "float32"), (64, 16, 4, "float64"), (256, 8, 16, "float32"),
    (1024, 16, 4, "float32"), (1024, 8, 64, "float64"),
])
def test_random_looping_programs_run_bit_identically_in_graphs(columns, bits, batch, dtype):
    shape = geometry(columns, bits)
    executor = TransformerExecutor(shape, EngineConfig(device="cuda", dtype=dtype))
    cards = executor.load(looping_programs(shape, batch, seed=columns + bits + batch))
    assert chunked(executor, cards, 1000, 1)[1] == 999
    assert chunked(executor, cards, 32, 32)[1] == 31


@pytest.mark.gpu
@CUDA
def test_gpu_runs_use_graphs_by_default_and_agree_with_full_runs_and_the_reference():
    program = assemble_file(ROOT / "programs" / "subleq" / "bubble_sort.sq")
    shape = geometry_for(program)
    graphed = TransformerExecutor(shape, EngineConfig(device="cuda"))
    full = TransformerExecutor(shape, EngineConfig(device="cuda", evaluation="full"))
    runner = graphed.runner(graphed.load([program] * 3))
    assert runner.evaluation == "fused"
    assert isinstance(graphed.active.fused, GraphedPasses)
    runner.advance(5000)
    runs = [runner.result(), full.run(full.load([program] * 3), 5000)]
    assert torch.equal(runs[0].X, runs[1].X)
    assert np.array_equal(runs[0].steps, runs[1].steps) and runs[0].halted.all()
    assert graphed.fallbacks == 0
    assert graphed.results(runs[0])[0].memory == run_reference(program).memory


FLEQ_PROGRAMS = sorted((ROOT / "programs" / "fleq").glob("*.fleq"))


def fleq_graphs(program, device: str, dtype: str = "float64"
                ) -> tuple[TransformerExecutor, FleqActiveEvaluator, torch.Tensor]:
    """A FLEQ executor (full), an evaluator whose compiled form is FleqGraphedPasses (built
    here, so the CPU has one too), and the program's punchcard in the internal layout."""
    shape = fleq_geometry_for(program)
    executor = TransformerExecutor(shape, EngineConfig(device=device, dtype=dtype,
                                                       checked=False, evaluation="full"))
    machine = executor.machine
    evaluator = FleqActiveEvaluator(executor.model, machine.weights, machine.layout, shape,
                                    dtype, machine.moves_are_exact(dtype))
    evaluator.fused = FleqGraphedPasses(evaluator)
    return executor, evaluator, to_internal(executor.load([program]))


def fleq_lockstep(executor: TransformerExecutor, run, passes: int) -> int:
    """`passes` passes of the graphs beside the full pass, one call each: X and the recorded
    program counters equal after every pass; a pass the graphs decline runs on the eager
    step. Returns the passes the graphs made."""
    X = run.X
    pc = np.arange(executor.layout["pc"].start, executor.layout["pc"].stop)
    record = torch.empty((1, len(pc), X.shape[1]), dtype=X.dtype, device=X.device)
    full, made = X.clone(), 0
    with torch.inference_mode(), flush_denormals():
        for step in range(passes):
            counters = full[pc, :, 0].clone()
            executor.model.step_(full)
            if run.fused_steps(1, record, pc) == 1:
                made += 1
                assert torch.equal(record[0], counters), f"pcs before pass {step}"
            else:
                run.step(step)
            assert torch.equal(X, full), f"X differs after pass {step}"
    return made


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", FLEQ_PROGRAMS, ids=lambda path: path.stem)
def test_fleq_graphs_are_bit_identical_to_the_full_pass(path, device):
    """Every pass by the graphs except the ones the guard sends to the full pass (some of
    chunked_attention's, whose operands exceed its bound); one control graph and one graph
    per set of blocks the run selected."""
    program = FLEQ.assemble_file(path)
    executor, evaluator, X = fleq_graphs(program, device)
    steps = int(executor.run(executor.load([program]), 60).steps[0])
    run = evaluator.start(X, fused=True)
    made = fleq_lockstep(executor, run, steps + 2)
    assert made == steps + 2 or (path.stem == "chunked_attention" and made >= steps // 2)
    assert run.fallbacks == steps + 2 - made
    if device == "cuda":
        assert evaluator.fused.captures == 1 + len(run.graph.rests)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["calculator", "inverse-d8"])
def test_fleq_graphs_with_heads_in_small_chunks_are_bit_identical(name, device, monkeypatch):
    """Every layer's heads in chunks of at most 1 MiB of scores (what a big batch meets on a
    GPU, `DEVICE_SCORES_BYTES`), captured as graphs where there is a GPU."""
    monkeypatch.setattr(layers, "DEVICE_SCORES_BYTES", 1 << 20)
    monkeypatch.setattr(layers, "CACHED_SCORES_BYTES", 1 << 16)
    program = fleq_workload(name)
    executor, evaluator, X = fleq_graphs(program, device)
    steps = int(executor.run(executor.load([program]), 60).steps[0])
    assert fleq_lockstep(executor, evaluator.start(X, fused=True), steps) == steps


@pytest.mark.parametrize("device", DEVICES)
def test_a_fleq_pass_the_guard_declines_leaves_x_as_it_was(device):
    """Operands beyond the guard's bound: the control graph ran, so only the restore brings
    X back; the eager step then runs the pass in full, or raises when strict."""
    executor, evaluator, X = fleq_graphs(fleq_workload("calculator"), device)
    shape = executor.machine.geometry
    X[executor.layout["mem"], 0, shape.memory_start:shape.instruction_start] = 4 * evaluator.bound
    before = X.clone()
    pc = np.arange(executor.layout["pc"].start, executor.layout["pc"].stop)
    record = torch.empty((1, len(pc), 1), dtype=X.dtype, device=X.device)
    with torch.inference_mode():
        assert evaluator.start(X, fused=True).fused_steps(1, record, pc) == 0
        assert torch.equal(X, before)
        with pytest.raises(PrecisionError):
            evaluator.start(X, strict=True, fused=True).step(0)
    assert fleq_lockstep(executor, evaluator.start(X, fused=True), 2) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_fleq_block_sets_beyond_the_limit_run_uncaptured_and_identical(device):
    executor, evaluator, X = fleq_graphs(fleq_workload("calculator"), device)
    evaluator.fused.max_sets = 2
    run = evaluator.start(X, fused=True)
    assert fleq_lockstep(executor, run, 9) == 9
    assert len(run.graph.rests) == 2
    if device == "cuda":
        assert evaluator.fused.captures == 3


def test_fleq_runs_on_the_cpu_have_no_graphs():
    program = fleq_workload("calculator")
    executor = TransformerExecutor(fleq_geometry_for(program), EngineConfig(evaluation="fused"))
    assert executor.active.fused is None
    assert executor.runner(executor.load([program])).evaluation == "active"


@pytest.mark.gpu
@CUDA
def test_gpu_fleq_runs_use_graphs_by_default_and_agree_with_full_runs():
    program = fleq_workload("calculator")
    shape = fleq_geometry_for(program)
    graphed = TransformerExecutor(shape, EngineConfig(device="cuda"))
    full = TransformerExecutor(shape, EngineConfig(device="cuda", evaluation="full"))
    cards = graphed.load([program] * 2)
    runner = graphed.runner(cards)
    assert runner.evaluation == "fused"
    assert isinstance(graphed.active.fused, FleqGraphedPasses)
    expected = full.run(full.load([program] * 2), 100)
    captures = []
    for _ in range(2):  # a restart keeps the run's graphs and captures none
        runner.advance(100)
        captures.append(graphed.active.fused.captures)
        end = runner.result()
        assert torch.equal(end.X, expected.X)
        assert np.array_equal(end.steps, expected.steps) and end.halted.all()
        assert graphed.fallbacks == 0 and runner.active.graph is not None
        runner.restart(cards)
    assert captures[1] == captures[0] > 0
