"""FleqActiveEvaluator: every pass bit-identical to the full Eq. (1) pass, guard falls back."""

from __future__ import annotations

import pytest
import torch

from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.runtime.active_fleq import FleqActiveEvaluator
from vm.runtime.executor import EngineConfig, TransformerExecutor
from vm.tools.bench import fleq_workload
from vm.transformer.layers import flush_denormals, to_internal


def _setup(dtype: str) -> tuple[TransformerExecutor, FleqActiveEvaluator, torch.Tensor]:
    program = fleq_workload("calculator")
    geometry = fleq_geometry_for(program)
    executor = TransformerExecutor(geometry, EngineConfig(dtype=dtype, checked=False))
    machine = executor.machine
    evaluator = FleqActiveEvaluator(executor.model, machine.weights, machine.layout,
                                    len(geometry.blocks), machine.moves_are_exact(dtype))
    return executor, evaluator, to_internal(executor.load([program]))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_pass_is_bit_identical_to_the_full_pass(dtype: str) -> None:
    executor, evaluator, X = _setup(dtype)
    full = X.clone()
    bits = torch.int64 if dtype == "float64" else torch.int32
    with torch.inference_mode(), flush_denormals():
        for _ in range(30):
            evaluator.step_(X)
            executor.model.step_(full)
            assert torch.equal(X.view(bits), full.view(bits))


def test_a_state_that_is_not_finite_runs_in_full() -> None:
    executor, evaluator, X = _setup("float64")
    X[executor.layout["mem"], 0, -3] = float("nan")
    with torch.inference_mode(), flush_denormals():
        assert not evaluator.step_(X)
    assert evaluator.fallbacks == 1
