"""The polynomial method: exp on [-B, B] and its monomial feature map."""

from __future__ import annotations

import math

import pytest
import torch

from vm.attention.rope.polynomial import (exp_coefficients, exp_error_bound, exponents,
                                          features, rank, weights)


def test_feature_count_is_the_number_of_monomials():
    for d, g in [(1, 3), (2, 2), (4, 8), (6, 3)]:
        assert features(torch.ones(1, d, dtype=torch.float64), g).shape[1] == rank(d, g)
    assert rank(4, 8) == math.comb(12, 8) == 495


def test_features_turn_the_polynomial_of_a_dot_product_into_a_dot_product():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(5, 3, dtype=torch.float64, generator=gen) * 0.5
    b = torch.randn(6, 3, dtype=torch.float64, generator=gen) * 0.5
    bound = float((a @ b.T).abs().max())
    approx = (features(a, 8) * weights(3, bound, 8)) @ features(b, 8).T
    assert torch.allclose(approx, (a @ b.T).exp(), rtol=1e-6)


def test_error_falls_with_the_degree_and_grows_with_the_bound():
    assert exp_error_bound(1.0, 8) < 1e-7 < exp_error_bound(1.0, 4)
    errors = [exp_error_bound(b, 4) for b in (0.5, 1.0, 2.0, 4.0)]
    assert errors == sorted(errors) and errors[-1] > 100 * errors[0]


def test_exponents_are_the_powers_features_take():
    gen = torch.Generator().manual_seed(3)
    x = torch.rand(4, 3, dtype=torch.float64, generator=gen) + 0.5
    alphas = exponents(3, 5)
    assert alphas.shape == (rank(3, 5), 3)
    assert int(alphas.sum(1).max()) == 5 and len({tuple(a) for a in alphas.tolist()}) == len(alphas)
    assert torch.allclose(features(x, 5), (x[:, None, :] ** alphas[None]).prod(-1), rtol=1e-14)


@pytest.mark.parametrize("bound, degree, message", [
    (0.0, 8, "positive and finite"),                       # NaN coefficients
    (math.nan, 8, "positive and finite"),
    (1e-50, 8, "past float64's range"),                    # inf: NaN gradients
    (1000.0, 8, "past float64's range"),                   # exp overflows
    (1.0, -1, "whole number from 0 to 64"),
    (1.0, 10 ** 6, "whole number from 0 to 64"),           # 7.3 TiB asked
])
def test_exp_coefficients_are_finite_or_refused(bound, degree, message):
    with pytest.raises(ValueError, match=message):
        exp_coefficients(bound, degree)


def test_features_of_many_rows_come_in_reported_blocks_with_the_same_powers():
    """The general route's Toeplitz features (2^18 x 715 at n = 2^17) took 11 s in one call
    that --max-seconds could not stop."""
    gen = torch.Generator().manual_seed(5)
    x = torch.rand(7000, 4, dtype=torch.float64, generator=gen) + 0.5
    fractions = []
    out = features(x, 9, fractions.append)
    assert len(fractions) > 2 and fractions == sorted(fractions) and fractions[-1] == 1.0
    alphas = exponents(4, 9)
    assert torch.allclose(out, (x[:, None, :] ** alphas[None]).prod(-1), rtol=1e-13)
