"""Build a ReLU layer unit by unit, addressing X through layout field names.

A *form* is a linear combination of rows of X, `{row: coefficient}`; a unit
is relu(form + bias); each unit adds `coefficient * unit` to target rows.
Blocks compose these into exact piecewise-linear functions.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from vm.transformer.layout import Layout
from vm.transformer.weights import FeedForwardWeights

Form = dict[int, float]


def form_sum(*forms: Form, scale: float = 1.0) -> Form:
    """`scale` times the sum of `forms`."""
    total: defaultdict[int, float] = defaultdict(float)
    for form in forms:
        for row, coefficient in form.items():
            total[row] += coefficient * scale
    return dict(total)


def scaled(form: Form, factor: float) -> Form:
    """`factor` times `form`."""
    return {row: coefficient * factor for row, coefficient in form.items()}


class FeedForwardBuilder:
    """Accumulates hidden units; `build` returns the W1, b1, W2, b2 of Eq. (1b)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._inputs: list[Form] = []
        self._biases: list[float] = []
        self._outputs: list[Form] = []

    def row(self, field: str, index: int = 0) -> int:
        return self.layout.row(field, index)

    def rows(self, field: str) -> range:
        span = self.layout[field]
        return range(span.start, span.stop)

    def unit(self, form: Form, bias: float = 0.0) -> int:
        """Add a hidden unit relu(form . x + bias); return its index."""
        self._inputs.append(dict(form))
        self._biases.append(float(bias))
        self._outputs.append({})
        return len(self._inputs) - 1

    def emit(self, unit: int, row: int, coefficient: float) -> None:
        """Add `coefficient * unit` to output row `row` (on top of the residual)."""
        outputs = self._outputs[unit]
        outputs[row] = outputs.get(row, 0.0) + coefficient

    def relu_into(self, form: Form, row: int, coefficient: float, bias: float = 0.0) -> None:
        """Shorthand: one unit relu(form + bias) added to `row` with `coefficient`."""
        self.emit(self.unit(form, bias), row, coefficient)

    def build(self) -> FeedForwardWeights:
        rows, width = self.layout.rows, len(self._inputs)
        W1, W2 = np.zeros((width, rows)), np.zeros((rows, width))
        for unit, (inputs, outputs) in enumerate(zip(self._inputs, self._outputs)):
            for row, coefficient in inputs.items():
                W1[unit, row] += coefficient
            for row, coefficient in outputs.items():
                W2[row, unit] += coefficient
        return FeedForwardWeights(W1, np.array(self._biases), W2, np.zeros(rows))
