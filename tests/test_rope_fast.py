"""The almost-linear gradient of Section 6 against the exact closed form."""

from __future__ import annotations

import math

import pytest
import torch

from vm.attention.rope import fast as fast_module
from vm.attention.rope.fast import fast_gradient, working_bytes
from vm.attention.rope.forward import general_attention, rotary_attention, support
from vm.attention.rope.gradient import exact_gradient, scores, toeplitz_index
from vm.attention.rope.instance import random_instance
from vm.attention.rope.polynomial import exp_coefficients, exp_error_bound
from vm.attention.rope.toeplitz import fft_size


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("form, degree", [("rotary", 8), ("rotary", 5), ("general", 4)])
@pytest.mark.parametrize("n", [2, 13, 64])
def test_fast_gradient_is_within_the_documented_bound(form, n, degree):
    # docs/rope_attention.md: relative error at most 100 x exp's relative error on [-B, B]
    inst = random_instance(n, 4, 1.0, form, seed=n)
    exact = exact_gradient(inst)
    fast = fast_gradient(inst, form, degree, 1.0)
    assert relative(fast.dx, exact.dx) <= 100 * exp_error_bound(1.0, degree)
    assert fast.loss == pytest.approx(exact.loss, rel=100 * exp_error_bound(1.0, degree))


def test_degree_eight_meets_the_target_at_d4_b1():
    inst = random_instance(300, 4, 1.0, "rotary", seed=7)
    assert relative(fast_gradient(inst, "rotary", 8, 1.0).dx, exact_gradient(inst).dx) < 1e-6


@pytest.mark.parametrize("form", ["rotary", "general"])
def test_fast_output_is_the_attention_forward(form):
    inst = random_instance(20, 4, 1.0, form, seed=1)
    q, k, v = inst.a1 @ inst.x1, inst.a2 @ inst.x2, inst.a3 @ inst.y
    exact = (rotary_attention(q, k, v) if form == "rotary"
             else general_attention(q, k, v, inst.offsets))
    assert torch.allclose(fast_gradient(inst, form, 6, 1.0).output, exact, atol=1e-5)


def test_error_grows_as_the_bound_leaves_the_bounded_regime():
    errors = []
    for bound in (0.5, 1.0, 2.0, 4.0):
        inst = random_instance(48, 4, bound, "rotary", seed=3)
        fast = fast_gradient(inst, "rotary", 4, bound)
        errors.append(relative(fast.dx, exact_gradient(inst).dx))
    assert errors == sorted(errors)
    assert errors[-1] > 100 * errors[0]


@pytest.mark.parametrize("degree", [1, 3])
def test_general_route_is_the_exact_gradient_of_the_polynomial_attention(degree):
    # The FFT route computes Lemma 5.3's closed form with exp replaced by the polynomial P:
    # the same formula with P applied to the dense scores must agree to rounding.
    n, d, bound = 19, 4, 1.0
    inst = random_instance(n, d, bound, "general", seed=4)
    coef = torch.tensor(exp_coefficients(bound, degree), dtype=torch.float64)
    scores_ = scores(inst, inst.x)
    a = sum(c * scores_ ** power for power, c in enumerate(coef))
    v = inst.a3 @ inst.y
    s = a / a.sum(1, keepdim=True)
    ell = s @ v - inst.e
    gamma1 = s * (ell @ v.T)
    gamma = gamma1 - gamma1.sum(1, keepdim=True) * s
    index = toeplitz_index(n)
    dense = torch.zeros(d, d, d, d, dtype=torch.float64)
    for r, c in support(inst.offsets):
        dense[:, :, r, c] = inst.a1.T @ (gamma * inst.offsets[:, r, c][index]) @ inst.a2 / d
    fast = fast_gradient(inst, "general", degree, bound)
    assert relative(fast.dx, dense.reshape(d * d, d * d)) < 1e-10
    assert fast.loss == pytest.approx(0.5 * float((ell ** 2).sum()), rel=1e-10)


@pytest.mark.parametrize("form, degree, bound, message", [
    ("Rotary", 8, 1.0, "unknown form 'Rotary'"),          # took the general route
    ("rotary", 2.5, 1.0, "whole number from 0 to 64"),     # a TypeError from comb
    ("rotary", 8, 0.0, "positive and finite"),             # a NaN gradient
    ("general", 8, 1e-50, "past float64's range"),         # a NaN gradient
])
def test_fast_gradient_refuses_what_it_cannot_compute(form, degree, bound, message):
    inst = random_instance(8, 4, 1.0, "rotary", seed=0)
    with pytest.raises(ValueError, match=message):
        fast_gradient(inst, form, degree, bound)


@pytest.mark.parametrize("form", ["rotary", "general"])
def test_fast_gradient_refuses_scores_past_its_bound(form):
    """Scores up to 2 with B = 1: exp's polynomial holds on [-1, 1] only, and the gradient
    came back far from the exact one, without a word. (B = 4 needed degree 10: 2.7 s.)"""
    inst = random_instance(16, 4, 2.0, form, seed=5)
    with pytest.raises(ValueError, match=r"scores may reach [0-9.]+, past the bound B = 1\b"):
        fast_gradient(inst, form, 6, 1.0)
    fast = fast_gradient(inst, form, 7, 2.0)  # the instance's own bound is accepted
    assert relative(fast.dx, exact_gradient(inst).dx) <= 100 * exp_error_bound(2.0, 7)


def test_the_general_route_reports_progress_within_a_band():
    """At n = 2 the one frequency band is the whole contraction (6 s at d = 16): progress,
    and with it --max-seconds, came only at its end."""
    fractions = []
    fast_gradient(random_instance(2, 4, 1.0, "general", seed=0), "general", 2, 1.0,
                  fractions.append)
    assert len(fractions) > 1 and fractions == sorted(fractions)
    assert fractions[-1] == pytest.approx(1.0)


def test_the_rotary_route_refuses_a_general_instance():
    """It reads only the rotations: a general instance got a gradient 3.5 x the true one."""
    with pytest.raises(ValueError, match="not the rotary form"):
        fast_gradient(random_instance(16, 4, 1.0, "general", seed=0), "rotary", 8, 1.0)


def test_the_rotary_factor_memory_counts_only_the_rows_there_are():
    """A chunk of rows is at most n: at n = 1, d = 4, degree 8 it counted 33 MiB of features
    where the two 160 x 495 sides (each held twice, 2.4 MiB) and one row are all there is."""
    one = fast_gradient(random_instance(1, 4, 1.0, "rotary", seed=0), "rotary", 8, 1.0)
    many = fast_gradient(random_instance(4096, 4, 1.0, "rotary", seed=0), "rotary", 8, 1.0)
    sides = 4 * 160 * 495 * 8
    assert sides < one.factor_bytes < sides + 2 ** 16 < many.factor_bytes


def test_the_general_route_reports_progress_while_it_takes_its_spectra(monkeypatch):
    """The spectra took 25 s at n = 2^17, d = 2, g = 8 before the contraction reported
    anything: silent, and --max-seconds 5 stopped the run after 30 s."""

    class Stop(Exception):
        pass

    spectra_taken = []
    taking = fast_module._spectra
    monkeypatch.setattr(fast_module, "_spectra",
                        lambda *args: spectra_taken.append(1) or taking(*args))

    def stop(fraction: float) -> None:
        raise Stop

    with pytest.raises(Stop):
        fast_gradient(random_instance(64, 2, 1.0, "general", seed=0), "general", 3, 1.0, stop)
    assert len(spectra_taken) < 3   # stopped before the gradient's two sides were taken


def test_the_general_factor_memory_counts_the_toeplitz_features_of_every_offset():
    """The 2n-1 offsets' features were counted at n rows: d = 4, g = 8 at n = 2048 was put
    at 1.8 GiB and held 2.4, so runs past the 4 GiB limit passed the check."""
    n, d, degree = 2048, 4, 8
    toeplitz = math.comb(2 * d + degree + 1, degree + 1)   # monomials over |S| = 2d, <= g + 1
    marginals = math.comb(d + degree, degree)               # monomials over d, <= g
    bins = fft_size(n) // 2 + 1
    # alive during the contraction: the Toeplitz features and spectra, both sides' spectra
    held = 8 * (2 * n - 1) * toeplitz + 16 * bins * (toeplitz + 2 * marginals * (d + 1) * d)
    assert working_bytes(n, d, degree, "general") > held
