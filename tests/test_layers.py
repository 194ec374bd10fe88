"""The torch layers compute exactly Eq. (1): checked on random weights against numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vm.layers import MASK_AS_BIAS_MAX, LoopedTransformer, cpu_threads, mask_matrix, trace_pass
from vm.weights import FeedForwardWeights, HeadWeights, LayerWeights, MachineWeights


def random_machine(rng, rows: int, columns: int, heads: list[int], width: int = 7
                   ) -> MachineWeights:
    layers = []
    for count in heads:
        layer_heads = []
        for h in range(count):
            V = np.zeros((rows, rows))
            written = rng.choice(rows, size=3, replace=False)
            V[written] = rng.normal(size=(3, rows))
            layer_heads.append(HeadWeights(rng.normal(size=(2, rows)), rng.normal(size=(2, rows)),
                                           V, float(rng.uniform(0.5, 2.0)), f"h{h}"))
        ffn = FeedForwardWeights(rng.normal(size=(width, rows)), rng.normal(size=width),
                                 rng.normal(size=(rows, width)), rng.normal(size=rows))
        layers.append(LayerWeights(tuple(layer_heads), ffn, "random"))
    return MachineWeights(tuple(layers), rows, columns, mask_matrix(columns, 2))


def numpy_pass(machine: MachineWeights, X: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    for layer in machine.layers:
        A = X.copy()
        for head in layer.heads:
            scores = head.lam * (head.K @ X).T @ (head.Q @ X)
            if mask is not None:
                scores = np.where(mask, scores, -np.inf)
            weights = np.exp(scores - scores.max(axis=0))
            A += head.V @ X @ (weights / weights.sum(axis=0))
        f = layer.ffn
        X = A + f.W2 @ np.maximum(f.W1 @ A + f.b1[:, None], 0) + f.b2[:, None]
    return X


@pytest.mark.parametrize("columns", [9, MASK_AS_BIAS_MAX + 40])
@pytest.mark.parametrize("attention", ["dense", "masked"])
def test_a_pass_equals_eq1_computed_directly(columns, attention):
    rng = np.random.default_rng(columns)
    machine = random_machine(rng, rows=11, columns=columns, heads=[2, 0, 1])
    X = rng.normal(size=(3, 11, columns))
    model = LoopedTransformer(machine, torch.float64, attention=attention, scratch=2)
    got = model(torch.as_tensor(X)).numpy()
    mask = machine.mask if attention == "masked" else None
    for b in range(3):
        assert np.allclose(got[b], numpy_pass(machine, X[b], mask), rtol=1e-10, atol=1e-10)


def test_the_mask_lets_scratch_see_all_and_others_see_self_and_scratch():
    allowed = mask_matrix(5, 2)
    assert allowed[:, :2].all() and allowed[:2, :].all()
    assert allowed[2:, 2:].sum() == 3 and np.diag(allowed).all()


def test_a_pass_does_not_modify_its_input():
    rng = np.random.default_rng(0)
    machine = random_machine(rng, rows=6, columns=5, heads=[1])
    X = torch.as_tensor(rng.normal(size=(1, 6, 5)))
    before = X.clone()
    LoopedTransformer(machine, torch.float64)(X)
    assert torch.equal(X, before)


def test_cpu_threads_picks_one_thread_for_small_work_and_restores():
    torch.set_num_threads(2)
    with cpu_threads(100):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with cpu_threads(100, requested=2):
        assert torch.get_num_threads() == 2


def test_trace_pass_records_each_layer_and_matches_a_pass():
    rng = np.random.default_rng(3)
    machine = random_machine(rng, rows=8, columns=6, heads=[2, 0])
    X = torch.as_tensor(rng.normal(size=(8, 6)))
    for attention in ("dense", "masked"):
        model = LoopedTransformer(machine, torch.float64, attention=attention, scratch=2)
        records = trace_pass(model, X)
        assert len(records) == 2 and records[0].attention.shape == (2, 6, 6)
        assert torch.allclose(records[0].attention.sum(dim=2), torch.ones(2, 6, dtype=torch.float64))
        assert torch.allclose(records[-1].after, model(X[None])[0])
        assert records[1].attention.shape[0] == 0
    masked = records[0].attention
    assert float(masked[:, 3, 4].abs().max()) == 0.0  # column 3 may not see column 4
