"""The oracle: Eq. (1a) attention layers, its length limit, its call counter, Lemma 3.3 packing.

Expected values come from a plain numpy transcription of Eq. (1a), not from the package.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vm.attention.chunked.oracle import AttentionOracle, OracleHead, OracleInputTooLong
from vm.attention.chunked.packing import run_packed
from vm.attention.chunked.parts import Projections


def numpy_layer(x: np.ndarray, heads: list[tuple], causal: bool) -> np.ndarray:
    """X + sum_h softmax(mask((X Wq)(X Wk)^T)) (X Wv) written into the head's target columns."""
    update = np.zeros_like(x)
    n = x.shape[0]
    for query, key, value, target in heads:
        scores = (x @ query) @ (x @ key).T
        if causal:
            scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        update[:, target:target + value.shape[1]] += weights @ (x @ value)
    return x + update


def random_heads(rng: np.random.Generator, width: int, count: int) -> list[tuple]:
    return [(rng.normal(size=(width, 3)), rng.normal(size=(width, 3)),
             rng.normal(size=(width, 2)), int(rng.integers(0, width - 1)))
            for _ in range(count)]


def as_oracle_heads(heads: list[tuple]) -> list[OracleHead]:
    return [OracleHead(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), t)
            for q, k, v, t in heads]


@pytest.mark.parametrize("causal", [False, True])
def test_two_layers_match_equation_1a(causal: bool) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(7, 6))
    layers = [random_heads(rng, 6, 2), random_heads(rng, 6, 2)]
    expected = numpy_layer(numpy_layer(x, layers[0], causal), layers[1], causal)
    oracle = AttentionOracle(max_length=7, heads=2, layers=2, causal=causal)
    got = oracle(torch.from_numpy(x), [as_oracle_heads(layer) for layer in layers])
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_causal_mask_hides_later_tokens() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(5, 4))
    heads = as_oracle_heads(random_heads(rng, 4, 1))
    oracle = AttentionOracle(max_length=5, causal=True)
    full = oracle(torch.from_numpy(x), [heads])
    changed = x.copy()
    changed[4] += 10.0
    again = oracle(torch.from_numpy(changed), [heads])
    np.testing.assert_array_equal(full[:4].numpy(), again[:4].numpy())
    assert not np.allclose(full[4].numpy(), again[4].numpy())


def test_rejects_inputs_longer_than_m_and_does_not_count_them() -> None:
    oracle = AttentionOracle(max_length=4)
    heads = as_oracle_heads(random_heads(np.random.default_rng(3), 5, 1))
    oracle(torch.zeros(4, 5, dtype=torch.float64), [heads])
    with pytest.raises(OracleInputTooLong, match="5 tokens.*M=4"):
        oracle(torch.zeros(5, 5, dtype=torch.float64), [heads])
    assert oracle.calls == 1


def test_counts_each_call_and_each_batched_sequence() -> None:
    oracle = AttentionOracle(max_length=3)
    heads = as_oracle_heads(random_heads(np.random.default_rng(4), 4, 1))
    for _ in range(3):
        oracle(torch.ones(3, 4, dtype=torch.float64), [heads])
    oracle(torch.ones(6, 2, 4, dtype=torch.float64), [heads])
    assert oracle.calls == 3 + 6


def test_refuses_more_heads_or_layers_than_it_has() -> None:
    heads = as_oracle_heads(random_heads(np.random.default_rng(5), 4, 3))
    oracle = AttentionOracle(max_length=3, heads=2, layers=1)
    x = torch.ones(2, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="heads"):
        oracle(x, [heads])
    with pytest.raises(ValueError, match="layers"):
        oracle(x, [heads[:1], heads[1:2]])


@settings(max_examples=25, deadline=None)
@given(heads=st.integers(1, 3), layers=st.integers(1, 3), n=st.integers(1, 6),
       causal=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_packed_problems_are_answered_independently(heads: int, layers: int, n: int,
                                                    causal: bool, seed: int) -> None:
    """Lemma 3.3: each of H'L' problems in one call gets its own single-head answer."""
    rng = np.random.default_rng(seed)
    group = int(rng.integers(1, heads * layers + 1))
    calls, width, out_width = 2, 5, 3
    problems = rng.normal(size=(calls, group, n, width))
    slots = [(rng.normal(size=(width, 2)), rng.normal(size=(width, 2)),
              rng.normal(size=(width, out_width))) for _ in range(group)]
    oracle = AttentionOracle(max_length=n, heads=heads, layers=layers, causal=causal)
    got = run_packed(oracle, torch.from_numpy(problems),
                     [Projections(*(torch.from_numpy(w) for w in slot)) for slot in slots])
    assert oracle.calls == calls
    for c in range(calls):
        for s, (query, key, value) in enumerate(slots):
            alone = np.concatenate([problems[c, s], np.zeros((n, out_width))], axis=1)
            value_full = np.vstack([value, np.zeros((out_width, out_width))])
            expected = numpy_layer(alone, [(np.vstack([query, np.zeros((out_width, 2))]),
                                            np.vstack([key, np.zeros((out_width, 2))]),
                                            value_full, width)], causal)[:, width:]
            np.testing.assert_allclose(got[c, s].numpy(), expected, rtol=1e-10, atol=1e-12)
