"""The polynomial method (Lemma 3.4): exp on [-B, B] by a degree-g polynomial, and the
monomial feature map that turns P(<a, b>) into a dot product of two feature vectors.

The polynomial is the Chebyshev interpolant of exp on [-B, B] (near-minimax: its error is
about 2 (B/2)^(g+1) e^B / (g+1)!, far below the Taylor remainder B^(g+1) e^B / (g+1)! as B
grows), converted to monomial coefficients c_0..c_g. Since
(a . b)^k = sum over multi-indices |alpha| = k of k!/alpha! a^alpha b^alpha, the features
phi(a)[alpha] = c_|alpha| |alpha|!/alpha! a^alpha and psi(b)[alpha] = b^alpha give
P(a . b) = phi(a) . psi(b) with C(d+g, g) features: the rank of the factors U V^T.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from math import comb, factorial, isfinite

import numpy as np
import torch


MAX_DEGREE = 64
"""The most degree g: the interpolation solves a (g+1) x (g+1) system (g = 10^6 asked numpy
for 7.3 TiB), and past 28 the conversion to monomials stops gaining (boundary.py)."""


def check_polynomial(bound: float, degree: int) -> None:
    """ValueError unless B > 0 is finite and g is a whole number up to MAX_DEGREE."""
    if not (isinstance(degree, numbers.Integral) and 0 <= degree <= MAX_DEGREE):
        raise ValueError(f"the degree must be a whole number from 0 to {MAX_DEGREE}, got "
                         f"{degree!r}")
    if not (isfinite(bound) and bound > 0):
        raise ValueError(f"the bound B must be positive and finite, got {bound}")


def exp_coefficients(bound: float, degree: int) -> np.ndarray:
    """Monomial coefficients c_0..c_g of the Chebyshev interpolant of exp on [-B, B];
    ValueError where they are not finite numbers: every gradient built on them was NaN
    (B = 0, B = 1e-50 at g = 8, B = 1000)."""
    check_polynomial(bound, degree)
    with np.errstate(all="ignore"):  # overflow is refused below, not warned about
        cheb = np.polynomial.Chebyshev.interpolate(np.exp, degree, domain=[-bound, bound])
        coef = cheb.convert(kind=np.polynomial.Polynomial).coef
    if not np.isfinite(coef).all():
        raise ValueError(f"exp's degree-{degree} polynomial on [-{bound:g}, {bound:g}] has "
                         "coefficients past float64's range; use a bound nearer 1")
    return np.pad(coef, (0, degree + 1 - len(coef)))


def rank(d: int, degree: int) -> int:
    """The number of monomials of degree <= g in d variables: C(d+g, g)."""
    return comb(d + degree, degree)


def monomials(d: int, degree: int) -> tuple[list[torch.Tensor], list[torch.Tensor],
                                            torch.Tensor, torch.Tensor]:
    """Every multiset of variables of size 1..g, built one variable at a time.

    Returns, per degree k >= 1, the parent (a degree k-1 monomial's index) and the appended
    variable of each degree-k monomial (variables never decrease, so each multiset appears
    once), plus the degree and the multinomial k!/alpha! of all C(d+g, g) monomials.
    """
    parents, variables = [], []
    last = [-1]                                   # the degree-0 monomial ends "before" 0
    counts = [np.zeros(d, dtype=np.int64)]
    degrees, multinomials = [0], [1]
    previous = list(range(1))
    for k in range(1, degree + 1):
        parent, variable, current = [], [], []
        for index in previous:
            for t in range(max(last[index], 0), d):
                parent.append(index - previous[0])
                variable.append(t)
                alpha = counts[index].copy()
                alpha[t] += 1
                counts.append(alpha)
                last.append(t)
                current.append(len(counts) - 1)
                degrees.append(k)
                multinomials.append(factorial(k) // int(np.prod([factorial(a) for a in alpha])))
        parents.append(torch.tensor(parent))
        variables.append(torch.tensor(variable))
        previous = current
    return (parents, variables, torch.tensor(degrees),
            torch.tensor(multinomials, dtype=torch.float64))


FEATURE_BLOCK_ENTRIES = 1 << 21
"""Entries of the features formed at once (16 MiB): the general route's Toeplitz features
(2^18 x 715 at n = 2^17, d = 2, g = 8) took 11 s in one silent call, and joining whole
levels held them twice."""


def features(rows: torch.Tensor, degree: int,
             report: Callable[[float], None] | None = None) -> torch.Tensor:
    """All monomials rows^alpha, |alpha| <= g, of each row: n x C(d+g, g), a block of rows at
    a time; `report` is told the fraction of rows done after each block."""
    parents, variables, _, _ = monomials(rows.shape[1], degree)
    n = rows.shape[0]
    out = torch.empty(n, rank(rows.shape[1], degree), dtype=torch.float64)
    block = max(1, FEATURE_BLOCK_ENTRIES // out.shape[1])
    for start in range(0, n, block):
        part = rows[start:start + block]
        level = torch.ones(len(part), 1, dtype=torch.float64)
        out[start:start + block, 0] = 1.0
        column = 1
        for parent, variable in zip(parents, variables):
            level = level[:, parent] * part[:, variable]
            out[start:start + block, column:column + level.shape[1]] = level
            column += level.shape[1]
        if report is not None:
            report(min(n, start + block) / n)
    return out


def weights(d: int, bound: float, degree: int) -> torch.Tensor:
    """c_|alpha| |alpha|!/alpha! for every monomial: phi(a) = weights * a^alpha."""
    _, _, degrees, multinomials = monomials(d, degree)
    coef = torch.tensor(exp_coefficients(bound, degree), dtype=torch.float64)
    return coef[degrees] * multinomials


def exp_error_bound(bound: float, degree: int, samples: int = 4001) -> float:
    """max |P(x) - e^x| / e^x over [-B, B], measured on a fine grid (relative error of A)."""
    grid = np.linspace(-bound, bound, samples)
    value = np.polynomial.Polynomial(exp_coefficients(bound, degree))(grid)
    return float(np.max(np.abs(value - np.exp(grid)) / np.exp(grid)))


def exponents(d: int, degree: int) -> torch.Tensor:
    """The exponent vector alpha of every monomial, in the order of `features`: C(d+g, g) x d."""
    parents, variables, _, _ = monomials(d, degree)
    level = torch.zeros(1, d, dtype=torch.int64)
    levels = [level]
    for parent, variable in zip(parents, variables):
        level = level[parent] + torch.nn.functional.one_hot(variable, d)
        levels.append(level)
    return torch.cat(levels, 0)
