"""Attention heads that move data by matching ±1 positional codes (Lemmas 2-3).

Scores are lam * key . query; for ±1 codes of B bits the matching column
scores lam*B and a column at Hamming distance h scores lam*(B - 2h), so the
softmax puts weight 1 - O(n e^(-2 lam)) on the match.
"""

from __future__ import annotations

import numpy as np

from vm.transformer.layout import Layout
from vm.transformer.weights import HeadWeights


def _selector(layout: Layout, fields: list[str]) -> np.ndarray:
    """A (r, D) matrix summing the given equally sized fields row by row."""
    size = layout.size(fields[0])
    matrix = np.zeros((size, layout.rows))
    for name in fields:
        if layout.size(name) != size:
            raise ValueError(f"field '{name}' has {layout.size(name)} rows, expected {size}")
        matrix[np.arange(size), np.arange(layout[name].start, layout[name].stop)] = 1.0
    return matrix


def _copy(layout: Layout, sources: list[str], target: str) -> np.ndarray:
    """A (D, D) value matrix adding the sum of `sources` into `target`."""
    V = np.zeros((layout.rows, layout.rows))
    V[layout[target]] = _selector(layout, sources)
    return V


def read_head(layout: Layout, query: str, key: str, source: str, target: str, lam: float,
              role: str) -> HeadWeights:
    """target += source of the column whose `key` code equals this column's `query` code.

    Columns whose query field is zero attend uniformly and receive an average:
    the ReLU layer after the head must clear the target there.
    """
    return HeadWeights(_selector(layout, [query]), _selector(layout, [key]),
                       _copy(layout, [source], target), lam, role)


def write_head(layout: Layout, address: str, key: str, values: list[str], target: str,
               lam: float, role: str) -> HeadWeights:
    """The paper's half-self write: every column queries its own `key` code; the
    writing column offers `address` as its key (its own key field is zero).

    The addressed column then matches itself and the writer equally and gets
    (its values + the writer's values) / 2 in `target`; every other column
    matches only itself and gets its own values. `values` must be zero where
    the other side's are non-zero, so the ReLU layer can solve for the written value.
    """
    return HeadWeights(_selector(layout, [key]), _selector(layout, [key, address]),
                       _copy(layout, values, target), lam, role)
