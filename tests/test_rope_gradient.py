"""The closed-form gradient of Lemma 5.3 against torch autograd, both forms, in float64."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from vm.attention.rope.forward import general_scores, rotary_attention, rotary_scores
from vm.attention.rope.gradient import (exact_gradient, exact_rotary_gradient,
                                        factor_gradients, loss)
from vm.attention.rope.instance import random_instance


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("form", ["rotary", "general"])
@pytest.mark.parametrize("n, d, bound", [(2, 2, 1.0), (6, 2, 0.5), (17, 4, 1.0),
                                         (11, 6, 2.0), (8, 8, 4.0)])
def test_closed_form_matches_autograd(form, n, d, bound):
    inst = random_instance(n, d, bound, form, seed=n + d)
    x = inst.x.clone().requires_grad_(True)
    loss(inst, x).backward()
    closed = exact_gradient(inst)
    assert closed.dx.shape == (d * d, d * d)
    assert relative(closed.dx, x.grad) <= 1e-10
    assert closed.loss == pytest.approx(float(loss(inst, inst.x)), rel=1e-12)


@pytest.mark.parametrize("form", ["rotary", "general"])
def test_one_token_has_zero_gradient(form):
    # softmax over a single key is 1 whatever the score: the loss does not depend on X
    inst = random_instance(1, 2, 1.0, form, seed=0)
    x = inst.x.clone().requires_grad_(True)
    loss(inst, x).backward()
    assert float(exact_gradient(inst).dx.abs().max()) == 0.0
    assert float(x.grad.abs().max()) < 1e-15


def test_closed_form_at_a_free_x_not_a_kronecker_product():
    inst = random_instance(7, 4, 1.0, "general", seed=3)
    x = (inst.x + 0.1 * torch.randn(16, 16, dtype=torch.float64)).requires_grad_(True)
    loss(inst, x).backward()
    assert relative(exact_gradient(inst, x.detach()).dx, x.grad) <= 1e-10


def test_row_blocks_and_the_rotary_baseline_give_the_same_gradient():
    inst = random_instance(23, 4, 1.0, "rotary", seed=5)
    whole = exact_gradient(inst)
    assert relative(exact_gradient(inst, block=5).dx, whole.dx) <= 1e-12
    assert relative(exact_rotary_gradient(inst, block=4).dx, whole.dx) <= 1e-12
    assert relative(exact_rotary_gradient(inst).gamma, whole.gamma) <= 1e-12


def test_chain_rule_to_the_query_and_key_weights_of_plain_rotary_attention():
    inst = random_instance(10, 4, 1.0, "rotary", seed=2)
    x1, x2 = inst.x1.clone().requires_grad_(True), inst.x2.clone().requires_grad_(True)
    out = rotary_attention(inst.a1 @ x1, inst.a2 @ x2, inst.a3 @ inst.y)
    (0.5 * ((out - inst.e) ** 2).sum()).backward()
    d1, d2 = factor_gradients(exact_gradient(inst).dx, inst.x1, inst.x2)
    assert relative(d1, x1.grad) <= 1e-10
    assert relative(d2, x2.grad) <= 1e-10


@pytest.mark.parametrize("route", [exact_gradient, exact_rotary_gradient])
@pytest.mark.parametrize("block", [0, -1, 2.5])
def test_a_block_of_no_rows_is_refused(route, block):
    """block = -1 looped over no rows and returned a gradient of zeros."""
    with pytest.raises(ValueError, match="block must be a whole number of rows"):
        route(random_instance(8, 4, 1.0, "rotary", seed=0), block=block)


def test_the_rotary_baseline_refuses_a_general_instance():
    """It reads only the rotations, so it gave a general instance another one's gradient."""
    with pytest.raises(ValueError, match="not the rotary form"):
        exact_rotary_gradient(random_instance(8, 4, 1.0, "general", seed=0))


@pytest.mark.parametrize("field, change, message", [
    ("offsets", lambda t: t[:-2], "offsets must be a 15 x 4 x 4"),    # n = 7's: IndexError
    ("offsets", lambda t: torch.cat([t, t[:4]]), "offsets must be"),  # n = 10's: another gradient
    ("a1", lambda t: t.float(), "a1 must be a 8 x 4 float64"),        # torch's dtype error
    ("e", lambda t: t[:, :2], "e must be a 8 x 4"),
    ("x1", lambda t: t[:3], "x1 must be a 4 x 4"),
    ("a2", lambda t: t.clone().fill_(math.nan), "a2 has entries that are not finite"),  # NaN
    ("a1", lambda t: t[0], "a1 must be an n x d matrix"),
])
def test_an_instance_whose_parts_disagree_is_refused(field, change, message):
    inst = random_instance(8, 4, 1.0, "general", seed=0)
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(inst, **{field: change(getattr(inst, field))})


@pytest.mark.parametrize("x, message", [
    (torch.zeros(3, 3, dtype=torch.float64), r"x must be a 16 x 16 float64 matrix"),  # reshape
    (torch.zeros(16, 16), "float64"),                                             # matmul
    (torch.full((16, 16), math.nan, dtype=torch.float64), "not finite"),          # NaN result
])
def test_a_free_parameter_x_that_is_not_a_finite_d2_by_d2_matrix_is_refused(x, message):
    inst = random_instance(6, 4, 1.0, "general", seed=0)
    with pytest.raises(ValueError, match=message):
        exact_gradient(inst, x=x)
    with pytest.raises(ValueError, match=message):
        loss(inst, x)


@pytest.mark.parametrize("form", ["rotary", "general"])
def test_scores_beyond_exp_s_range_give_the_true_gradient_not_nan(form):
    """exp(score) overflowed from scores of 710 on: B = 800 gave NaN gradients and loss."""
    inst = random_instance(9, 4, 800.0, form, seed=4)
    x1, x2 = inst.x1.clone().requires_grad_(True), inst.x2.clone().requires_grad_(True)
    q, k = inst.a1 @ x1, inst.a2 @ x2
    score = rotary_scores(q, k) if form == "rotary" else general_scores(q, k, inst.offsets)
    out = torch.softmax(score, 1) @ (inst.a3 @ inst.y)
    expected = 0.5 * ((out - inst.e) ** 2).sum()
    expected.backward()
    routes = [exact_gradient] + ([exact_rotary_gradient] if form == "rotary" else [])
    for route in routes:
        closed = route(inst)
        d1, d2 = factor_gradients(closed.dx, inst.x1, inst.x2)
        assert relative(d1, x1.grad) <= 1e-8 and relative(d2, x2.grad) <= 1e-8
        assert closed.loss == pytest.approx(float(expected.detach()), rel=1e-12)
    assert bool(torch.isfinite(rotary_attention(q, k, inst.a3 @ inst.y)).all())
