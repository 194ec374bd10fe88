"""Where the fast gradient stops paying off: the degree a target error needs, measured.

Lemma 3.4's degree g = Theta(max(log(1/eps)/log(log(1/eps)/B), B)) grows with the score
bound B, and the rank C(d+g, g) with it, so at a fixed error the fast method's cost grows
with B (and with d) until it no longer beats the exact O(n^2) gradient: the paper's
bounded-entry boundary (B = o(sqrt(log n)) for n^(1+o(1))). `smallest_degree` finds the
degree by measuring the fast gradient against the exact one, not from the bound.
"""

from __future__ import annotations

import torch

from vm.attention.rope.fast import fast_gradient
from vm.attention.rope.gradient import Instance
from vm.attention.rope.polynomial import exp_error_bound

MAX_SEARCH_DEGREE = 28
"""Past it the Chebyshev-to-monomial conversion stops gaining (about 1e-12 at B <= 8)."""


def relative_error(fast: torch.Tensor, exact: torch.Tensor) -> float:
    """Relative Frobenius error of `fast` against `exact`; ValueError where `exact` is 0 (one
    token): the error was inf or NaN, and `smallest_degree` said no degree reached a target."""
    scale = float(exact.norm())
    if scale == 0:
        raise ValueError("the exact gradient is 0 (a single token): a relative error is "
                         "undefined")
    return float((fast - exact).norm()) / scale


def degree_guess(bound: float, target: float) -> int:
    """The smallest degree whose exp error on [-B, B] is within `target`: a starting point
    (the gradient's measured error is 0.2 to 1 x exp's)."""
    for degree in range(MAX_SEARCH_DEGREE + 1):
        if exp_error_bound(bound, degree) <= target:
            return degree
    return MAX_SEARCH_DEGREE


def smallest_degree(inst: Instance, exact: torch.Tensor, form: str, bound: float,
                    target: float, max_degree: int = MAX_SEARCH_DEGREE
                    ) -> tuple[int | None, dict[int, float]]:
    """The smallest degree g <= max_degree whose fast gradient is within `target` relative
    of `exact` (None if none is), and the errors measured on the way (degree -> error).

    Starts two below `degree_guess` and walks down while it passes, up while it fails, so
    the answer is always bracketed by a measured failure at g - 1 (or g = 0).
    """
    errors: dict[int, float] = {}

    def error(degree: int) -> float:
        if degree not in errors:
            errors[degree] = relative_error(fast_gradient(inst, form, degree, bound).dx, exact)
        return errors[degree]

    degree = min(max(degree_guess(bound, target) - 2, 0), max_degree)
    if error(degree) <= target:
        while degree > 0 and error(degree - 1) <= target:
            degree -= 1
        return degree, errors
    while degree < max_degree:
        degree += 1
        if error(degree) <= target:
            return degree, errors
    return None, errors
