"""The degree a fixed error needs, measured: it grows with the score bound B."""

from __future__ import annotations

import pytest

from vm.attention.rope.boundary import smallest_degree
from vm.attention.rope.fast import fast_gradient
from vm.attention.rope.gradient import exact_gradient
from vm.attention.rope.instance import random_instance
from vm.attention.rope.polynomial import rank


def test_required_degree_grows_with_the_bound():
    degrees = []
    for bound in (0.5, 1.0, 2.0, 4.0):
        inst = random_instance(40, 4, bound, "rotary", seed=5)
        degree, _ = smallest_degree(inst, exact_gradient(inst).dx, "rotary", bound, 1e-6)
        degrees.append(degree)
    assert None not in degrees
    assert degrees == sorted(degrees) and degrees[-1] >= degrees[0] + 6
    assert rank(4, degrees[-1]) > 10 * rank(4, degrees[0])


def test_smallest_degree_is_bracketed_by_a_measured_failure():
    inst = random_instance(30, 4, 2.0, "rotary", seed=2)
    exact = exact_gradient(inst).dx
    degree, errors = smallest_degree(inst, exact, "rotary", 2.0, 1e-5)
    assert errors[degree] <= 1e-5 < errors[degree - 1]
    direct = fast_gradient(inst, "rotary", degree - 1, 2.0).dx
    assert float((direct - exact).norm() / exact.norm()) > 1e-5


def test_unreachable_target_gives_none():
    inst = random_instance(12, 4, 4.0, "rotary", seed=1)
    degree, errors = smallest_degree(inst, exact_gradient(inst).dx, "rotary", 4.0, 1e-9,
                                     max_degree=6)
    assert degree is None and max(errors) == 6 and min(errors.values()) > 1e-9


def test_a_zero_exact_gradient_has_no_smallest_degree_to_search():
    """One token: the exact gradient is 0, every error came out inf, and the search answered
    None (no degree reaches the target) after trying them all."""
    inst = random_instance(1, 4, 1.0, "rotary", seed=0)
    with pytest.raises(ValueError, match="relative error is undefined"):
        smallest_degree(inst, exact_gradient(inst).dx, "rotary", 1.0, 1e-6)
