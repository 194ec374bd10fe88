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
from vm.machines.subleq.punchcard import geometry_for
from vm.machines.subleq.reference import run_reference
from vm.runtime.active import ActiveEvaluator, _GuardFailure
from vm.runtime.executor import EngineConfig, TransformerExecutor
from vm.runtime.graphed import GraphedPasses
from vm.tools.workloads import looping_programs
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
