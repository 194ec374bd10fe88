"""Fit f(x) ~ c0 + sum_i c_i sigmoid(w_i x + b_i) on a domain (Lemmas 10-11).

Centers are spread so every sigmoid covers an equal share of f's variation
(weighted by 1/|f| for a relative fit), slopes are `sharpness` over the local
spacing, and the coefficients solve a weighted, lightly ridge-regularized
least-squares problem on a dense grid. Deterministic and fast: it runs when
weights are built, never while a program runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np

GRID = 20_000
RIDGE = 1e-10
WEIGHT_FLOOR = 1e-3


@dataclass(frozen=True)
class SigmoidFit:
    slopes: np.ndarray
    biases: np.ndarray
    coefficients: np.ndarray
    constant: float
    max_error: float
    """Largest |fit - f| on the fitting grid, in float64."""
    max_relative_error: float
    """Largest |fit - f| / max(|f|, WEIGHT_FLOOR) on the grid: the error is at most this
    times |f| + WEIGHT_FLOOR everywhere on it."""

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        return self.constant + _sigmoids(x, self.slopes, self.biases) @ self.coefficients


def _sigmoids(x: np.ndarray, slopes: np.ndarray, biases: np.ndarray) -> np.ndarray:
    z = np.clip(np.multiply.outer(x, slopes) + biases, -700, 700)
    return 1.0 / (1.0 + np.exp(-z))


def fitting_grid(low: float, high: float, gap: float | None) -> np.ndarray:
    """Dense points on [low, high], without (-gap, gap), denser near the gap's edges; an end
    of [low, high] inside the gap (0 for sqrt) stays a point."""
    points = np.linspace(low, high, GRID)
    if gap is not None:
        edge = np.geomspace(gap, max(abs(low), abs(high)), GRID // 2)
        points = np.concatenate([points, edge, -edge])
        inside = (points >= low) & (points <= high)
        points = points[inside & ((np.abs(points) >= gap) | (points == low) | (points == high))]
    return np.unique(points)


def fit_sigmoids(f: Callable[[np.ndarray], np.ndarray], low: float, high: float, terms: int,
                 sharpness: float, gap: float | None = None) -> SigmoidFit:
    x = fitting_grid(low, high, gap)
    fx = f(x)
    weight = 1.0 / np.maximum(np.abs(fx), WEIGHT_FLOOR)
    variation = np.concatenate([[0.0], np.cumsum(np.abs(np.diff(fx)) * weight[1:] + 1e-12)])
    quantiles = (np.arange(terms) + 0.5) / terms * variation[-1]
    centers = np.interp(quantiles, variation, x)
    spacing = np.gradient(centers) if terms > 1 else np.array([high - low])
    slopes = sharpness / np.maximum(np.abs(spacing), 1e-9)
    biases = -slopes * centers
    design = np.hstack([_sigmoids(x, slopes, biases), np.ones((len(x), 1))])
    weighted = design * weight[:, None]
    gram = weighted.T @ weighted
    gram += RIDGE * np.trace(gram) / len(gram) * np.eye(len(gram))
    solution = np.linalg.solve(gram, weighted.T @ (fx * weight))
    error = np.abs(design @ solution - fx)
    relative = float((error / np.maximum(np.abs(fx), WEIGHT_FLOOR)).max())
    return SigmoidFit(slopes, biases, solution[:-1], float(solution[-1]), float(error.max()),
                      relative)


@lru_cache(maxsize=64)
def cached_fit(name: str, f: Callable[[np.ndarray], np.ndarray], low: float, high: float,
               terms: int, sharpness: float, gap: float | None) -> SigmoidFit:
    """The fit for one block configuration, computed once per process."""
    return fit_sigmoids(f, low, high, terms, sharpness, gap)
