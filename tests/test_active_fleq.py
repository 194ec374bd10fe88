"""FleqActiveEvaluator: every pass bit-identical to the full Eq. (1) pass; the guard falls back
(or raises when strict) on states it cannot prove."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vm.common.errors import PrecisionError
from vm.functions.base import GATE_BIG
from vm.isa import FLEQ
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.runtime import active_fleq
from vm.runtime.active_fleq import CONTROL_LAYERS, FleqActiveEvaluator
from vm.runtime.executor import EngineConfig, TransformerExecutor
from vm.tools.bench import fleq_workload
from vm.transformer.layers import flush_denormals, to_internal
from vm.transformer.threads import cpu_threads

PROGRAMS = sorted((Path(__file__).resolve().parents[1] / "programs" / "fleq").glob("*.fleq"))
PASSES = 120
"""Passes compared per program (the longer ones are cut here to keep the suite fast)."""


def _setup(program, dtype: str,
           device: str = "cpu") -> tuple[TransformerExecutor, FleqActiveEvaluator, torch.Tensor]:
    geometry = fleq_geometry_for(program)
    executor = TransformerExecutor(geometry, EngineConfig(dtype=dtype, checked=False,
                                                          evaluation="full", device=device))
    machine = executor.machine
    evaluator = FleqActiveEvaluator(executor.model, machine.weights, machine.layout, geometry,
                                    dtype, machine.moves_are_exact(dtype))
    assert evaluator.unsupported is None
    return executor, evaluator, to_internal(executor.load([program]))


def _bits(X: torch.Tensor) -> torch.Tensor:
    return X.view(torch.int64 if X.dtype == torch.float64 else torch.int32)


def _compare(executor: TransformerExecutor, evaluator: FleqActiveEvaluator, X: torch.Tensor,
             passes: int, strict: bool = False) -> int:
    """Run both evaluations side by side, comparing bits after every pass; passes skipped."""
    full = X.clone()
    skipped = 0
    with torch.inference_mode(), flush_denormals(), cpu_threads(X.shape[2], 1):
        for step in range(passes):
            skipped += evaluator.step_(X, step, strict)
            executor.model.step_(full)
            assert torch.equal(_bits(X), _bits(full)), f"pass {step} differs"
    return skipped


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                        reason="needs a CUDA device")])])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("path", PROGRAMS, ids=lambda path: path.stem)
def test_every_pass_of_every_program_is_bit_identical(path: Path, dtype: str,
                                                      device: str) -> None:
    """Every pass skips unselected blocks except some of chunked_attention's, whose oracle
    block (values scaled by e^40) the guard's interval bounds cannot clear for operands
    above 4.7: those passes run in full."""
    program = FLEQ.assemble_file(path)
    executor, evaluator, X = _setup(program, dtype, device)
    steps = int(executor.run(executor.load([program]), PASSES).steps[0])
    skipped = _compare(executor, evaluator, X, steps)
    assert skipped == steps or (path.stem == "chunked_attention" and skipped >= steps // 2)


def test_a_batch_selects_the_union_of_its_programs_blocks() -> None:
    programs = [FLEQ.assemble_file(path) for path in PROGRAMS if path.stem == "calculator"] * 2
    executor, evaluator, _ = _setup(programs[0], "float64")
    X = to_internal(executor.load(programs))
    memory = executor.layout["mem"]
    X[memory, 1] *= -3.0
    assert _compare(executor, evaluator, X, 7) == 7


def _calculator(dtype: str = "float64"):
    return _setup(fleq_workload("calculator"), dtype)


def test_a_state_that_is_not_finite_runs_in_full() -> None:
    executor, evaluator, X = _calculator()
    X[executor.layout["mem"], 0, -3] = float("nan")
    assert _compare(executor, evaluator, X, 1) == 0


def _huge_operands(executor: TransformerExecutor, evaluator: FleqActiveEvaluator,
                   X: torch.Tensor) -> None:
    """Every memory cell of program 0 beyond the guard's operand bound."""
    geometry = executor.machine.geometry
    cells = slice(geometry.memory_start, geometry.instruction_start)
    X[executor.layout["mem"], 0, cells] = 4.0 * evaluator.bound


def test_operands_beyond_the_bound_run_in_full_and_still_match() -> None:
    executor, evaluator, X = _calculator()
    _huge_operands(executor, evaluator, X)
    assert _compare(executor, evaluator, X, 3) == 0


def test_a_changed_constant_row_runs_in_full() -> None:
    executor, evaluator, X = _calculator()
    X[executor.layout.row("gblock0"), 0, 0] = 0.0
    assert _compare(executor, evaluator, X, 2) == 0


@pytest.mark.parametrize("strict", [False, True])
def test_a_result_mask_off_its_offsets_is_caught_after_the_control_layers(strict: bool) -> None:
    executor, evaluator, X = _calculator()
    first = executor.machine.geometry.instruction_column(0)
    X[executor.layout.row("i_dh", 0), 0, first] = 0.25
    assert evaluator.problem(X) is None
    if strict:
        with pytest.raises(PrecisionError, match="result mask"):
            _compare(executor, evaluator, X, 1, strict=True)
    else:
        assert _compare(executor, evaluator, X, 1) == 0


@pytest.mark.parametrize("field", ["mem", "gblock0"])
def test_strict_runs_raise_instead_of_falling_back(field: str) -> None:
    executor, evaluator, X = _calculator()
    if field == "mem":
        _huge_operands(executor, evaluator, X)
    else:
        X[executor.layout[field], 0, -1] = 1.0
    with pytest.raises(PrecisionError):
        _compare(executor, evaluator, X, 1, strict=True)


def test_runs_use_it_by_default_and_end_where_full_runs_end() -> None:
    program = fleq_workload("calculator")
    geometry = fleq_geometry_for(program)
    ends = {}
    for evaluation in ("auto", "full"):
        executor = TransformerExecutor(geometry, EngineConfig(evaluation=evaluation))
        runner = executor.runner(executor.load([program]))
        runner.advance(50)
        ends[evaluation] = (runner.evaluation, runner.fallbacks, runner.state())
    assert ends["auto"][:2] == ("active", 0) and ends["full"][0] == "full"
    assert torch.equal(_bits(ends["auto"][2]), _bits(ends["full"][2]))


def test_the_bound_propagation_sums_every_heads_absolute_values() -> None:
    """`_prepare` adds up |V| over the rows each head writes (whole matrices took 1.5 s of a
    3,453-unit training machine's build); the sum must be that of the heads' whole |V|."""
    executor, evaluator, _ = _setup(fleq_workload("inverse-d8"), "float64")
    layers = executor.machine.weights.layers[CONTROL_LAYERS:]
    prepared = evaluator._prepare(lambda part: None)
    assert any(len(layer.heads) > 1 for layer in layers)
    for layer, part in zip(layers, prepared):
        if layer.heads:
            whole = sum(np.abs(head.V) for head in layer.heads)
            assert np.array_equal(part["V"], whole)


@pytest.mark.parametrize("chunk", [1, 100, 2 ** 18])
def test_the_constant_rows_maxima_are_those_of_the_whole_product(monkeypatch, chunk: int
                                                                  ) -> None:
    """`_constant_maxima` works on a column of each pattern, a few rows at a time (the whole
    W1 @ C took 150 MB and a second of a 3,453-unit training machine's build); its maxima are
    the bounds the operand bound rests on, so they must be those of the whole product, bit
    for bit, in every layer the bounds cover."""
    monkeypatch.setattr(active_fleq, "CHUNK_ENTRIES", chunk)
    executor, evaluator, _ = _setup(fleq_workload("inverse-d8"), "float64")
    constant, outside = evaluator._constant_mask, evaluator._outside()
    C = evaluator._constants[constant]
    gated = 0
    for layer in executor.machine.weights.layers[CONTROL_LAYERS:]:
        W1 = layer.ffn.W1
        offsets = W1[:, constant] @ C
        worst = np.full(len(W1), -np.inf)
        gates = [(np.flatnonzero(W1[:, row]), outside[block])
                 for row, block in evaluator._gate_rows().items()]
        for units, columns in gates:
            if len(units):
                worst[units] = offsets[np.ix_(units, columns)].max(axis=1)
                gated += len(units)
        expected = (offsets.max(axis=1), np.abs(offsets).max(axis=1), worst,
                    (np.abs(W1[:, constant]) @ np.abs(C)).max(axis=1))
        found = active_fleq._constant_maxima(W1[:, constant], C, gates)
        for old, new in zip(expected, found, strict=True):
            assert old.tobytes() == new.tobytes()
    assert gated > 0


def test_the_checkpoint_is_called_inside_the_checks_and_stops_them_by_raising() -> None:
    """The checks on the weights took 5 s of a 20-sample --hidden 16 training build, past
    `ltvm train --max-seconds` in one piece: the checkpoint now sees each layer's structure,
    each part of its bounds and each try of the operand bound, and stops them by raising."""
    executor, evaluator, _ = _setup(fleq_workload("inverse-d8"), "float64")
    machine, geometry = executor.machine, executor.geometry
    arguments = (executor.model, machine.weights, machine.layout, geometry, "float64",
                 machine.moves_are_exact("float64"))
    parts: list[str] = []
    assert FleqActiveEvaluator(*arguments, checkpoint=parts.append).bound == evaluator.bound
    layers = len(machine.weights.layers)
    assert parts[:layers] == [f"checking layer {i} of {layers}" for i in range(1, layers + 1)]
    assert f"bounding the units of layer {layers} of {layers}, part 2 of 2" in parts
    tries = [part for part in parts if part.startswith("searching the operand bound")]
    assert len(tries) > 5 and tries[-1] == f"searching the operand bound, try {len(tries)}"

    class Stop(Exception):
        pass

    stop = parts.index(f"bounding the units of layer {layers} of {layers}, part 1 of 2")
    seen: list[str] = []

    def stop_there(part: str) -> None:
        seen.append(part)
        if len(seen) == stop + 1:
            raise Stop

    with pytest.raises(Stop):
        FleqActiveEvaluator(*arguments, checkpoint=stop_there)
    assert seen == parts[:stop + 1]
