"""The average-case estimator (Theorem 4.1): its samples, its assumptions and its guarantees.

The input is built so that the truth is known in closed form: every query q = (alpha, 0)
and key j = (sigma_j, 0) with sigma_j = +1 on the first half of the positions and -1 on the
second, so a_ij = exp(alpha sigma_j); values v_j = (1, lam sigma_j). Then
    normalizer = N cosh(alpha),  output = (1, lam tanh(alpha)),
    C = e^alpha,  D = cosh(alpha) sqrt(1 + lam^2 tanh^2 alpha) / (e^alpha sqrt(1 + lam^2)).
Sampling each block's keys from its own half instead of uniformly (no permutation) would
miss the normalizer by a factor 1 +- tanh(alpha) and the output by
lam (1 - tanh alpha) / sqrt(1 + lam^2 tanh^2 alpha), both far outside the bounds checked here.
"""

from __future__ import annotations

from math import cosh, exp, log, sqrt, tanh

import numpy as np
import pytest
import torch

from vm.attention.chunked.average_case import bounds, check_first_layer, head_constants
from vm.attention.chunked.memory import measure
from vm.attention.chunked.model import HeadWeights, LargeTransformer, Mask, random_instance
from vm.attention.chunked.sampled import block_sizes, plan_head
from vm.attention.chunked.simulate import simulate
from vm.common.errors import InputError

ALPHA, LAM = 0.5, 1.0
N, M = 4 * 1023, 1024
TRIALS = 20


@pytest.fixture(autouse=True)
def one_thread():
    """Small tensors: one torch thread avoids waiting on a busy second core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def two_halves(n: int) -> tuple[torch.Tensor, LargeTransformer]:
    sigma = torch.where(torch.arange(n) < n // 2, 1.0, -1.0).double()
    x = torch.stack([torch.ones(n, dtype=torch.float64), sigma], dim=1)
    head = HeadWeights(query=torch.tensor([[ALPHA, 0.0], [0.0, 0.0]], dtype=torch.float64),
                       key=torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.float64),
                       value=torch.tensor([[1.0, 0.0], [0.0, LAM]], dtype=torch.float64))
    return x, LargeTransformer(layers=((head,),), mask=Mask("none"))


def test_constants_of_theorem_4_1_on_a_known_input() -> None:
    x, model = two_halves(N)
    c, d = head_constants(x, model.layers[0][0])
    assert c == pytest.approx(exp(ALPHA), rel=1e-12)
    expected_d = (cosh(ALPHA) * sqrt(1 + LAM ** 2 * tanh(ALPHA) ** 2)
                  / (exp(ALPHA) * sqrt(1 + LAM ** 2)))
    assert d == pytest.approx(expected_d, rel=1e-9)


def test_stated_bounds_follow_the_proof() -> None:
    x, model = two_halves(N)
    check = check_first_layer(model, x, M)
    assert check.sample == 1023
    c2 = exp(2 * ALPHA)
    assert check.normalizer_bound == pytest.approx(c2 * sqrt(log(40 * N) / (2 * 1023)))
    assert check.output_bound == pytest.approx(max(
        sqrt(8 * c2 ** 2 * log(40 * N) / 1023),
        sqrt(128 * log(40 * 2 * N) / (1023 * check.d ** 2))))


def test_bounds_of_a_huge_c_are_infinite_not_an_overflow_error() -> None:
    """C = e^460 (float64 scores near 460) made `c ** 4` raise OverflowError: a traceback."""
    output, normalizer = bounds(exp(460), 0.5, 64, 12, 16)
    assert output == normalizer == float("inf")
    assert bounds(exp(200), 0.5, 64, 12, 16)[0] == float("inf")
    assert bounds(exp(200), 0.5, 64, 12, 16)[1] < float("inf")


def test_blocks_are_balanced_and_samples_partition_the_keys() -> None:
    assert block_sizes(10, 4) == [3, 3, 2, 2]
    assert block_sizes(9, 4) == [3, 3, 3]
    generator = torch.Generator().manual_seed(0)
    batch, = plan_head(1000, 64, Mask("none"), generator, head=0)
    keys, queries = batch.keys[:, 0], batch.queries[:, 0]
    assert sorted(keys[keys >= 0].tolist()) == list(range(1000))
    assert sorted(queries[queries >= 0].tolist()) == list(range(1000))
    assert keys.shape[1] <= 63
    again, = plan_head(1000, 64, Mask("none"), generator, head=0)
    assert not torch.equal(again.keys, batch.keys)


def test_normalizer_estimates_hold_their_bound_with_probability_095() -> None:
    """Step 1: every row within 1 +- eta (eta = C^2 sqrt(ln(40N) / 2n)) with prob. >= 0.95."""
    x, model = two_halves(N)
    eta = check_first_layer(model, x, M).normalizer_bound
    assert tanh(ALPHA) > 2 * eta, "a block-local sampler would pass: the input is too easy"
    truth = log(N * cosh(ALPHA))
    successes = 0
    for seed in range(TRIALS):
        result = simulate(model, x, "sampled", M, seed=seed)
        assert result.calls == 2 * 4
        error = float((result.log_normalizers[0, 0] - truth).exp().sub(1).abs().max())
        successes += error <= eta
    assert successes / TRIALS >= 0.95


def test_outputs_hold_the_theorem_bound_and_beat_block_local_sampling() -> None:
    """Theorem 4.1: every row within eps with probability >= 0.9; and the error is far below
    what samples drawn without the permutation would give."""
    x, model = two_halves(N)
    eps = check_first_layer(model, x, M).output_bound
    truth = np.array([1.0, LAM * tanh(ALPHA)])
    without_permutation = LAM * (1 - tanh(ALPHA)) / np.linalg.norm(truth)
    errors = []
    for seed in range(TRIALS):
        output = simulate(model, x, "sampled", M, seed=100 + seed).output.numpy()
        errors.append(float((np.linalg.norm(output - truth, axis=1) / np.linalg.norm(truth)).max()))
    assert np.mean(np.array(errors) <= eps) >= 0.9
    assert max(errors) < without_permutation / 4


def test_the_check_of_theorem_4_1_holds_one_chunk_of_scores_at_a_time():
    """Four chunk x N float64 copies (abs, shifted, weighted and the next chunk's scores)
    took 2 GiB at N = 65536, eight times the direct attention's chunk."""
    x, model = random_instance(8192, 1, 1, 8, Mask(), torch.float64, seed=0)
    _, taken = measure(lambda: head_constants(x, model.layers[0][0], row_chunk=2048))
    if taken.method != "rss-high-water-reset":
        pytest.skip("no resettable high-water mark: the peak would include earlier work")
    assert taken.peak_bytes < 1.6 * 2048 * 8192 * 8


@pytest.mark.parametrize("row_chunk", [0, -1, 2.5])
def test_the_check_of_theorem_4_1_refuses_a_chunk_of_no_rows(row_chunk):
    """row_chunk = -1 looked at no pair and returned C = 1, D = inf: every assumption met."""
    x, model = random_instance(8, 1, 1, 2, Mask(), torch.float64, seed=0)
    with pytest.raises(ValueError, match="row_chunk must be a whole number"):
        head_constants(x, model.layers[0][0], row_chunk=row_chunk)


@pytest.mark.parametrize("max_length, message", [
    (1, "at least 2"), (0, "positive"), (9, "exceeds the sequence length"),
    (2.5, "whole number"),
])
def test_the_check_of_theorem_4_1_refuses_an_oracle_length_the_simulation_refuses(max_length,
                                                                                  message):
    """M = 1 divided by zero, M = 0 took the smallest of no samples, M = 2.5 gave samples of
    one key."""
    x, model = random_instance(8, 1, 1, 2, Mask(), torch.float64, seed=0)
    with pytest.raises(InputError, match=message):
        check_first_layer(model, x, max_length)
