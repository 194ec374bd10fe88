"""Activation functions of a neural network and their derivatives, elementwise (Lemma 5).

sigmoid, tanh and their derivatives reuse the sum-of-sigmoids block
(`SigmoidSum`: one attention head per term, each a softmax over a key and a
null key), but with terms written down from identities instead of fitted:

- sigmoid(x) is one term, tanh(x) = 2 sigmoid(2x) - 1 is one term and a
  constant: both exact up to the softmax's rounding, on all reals;
- sigmoid'(x) and tanh'(x) = 4 sigmoid'(2x) are the fourth-order central
  difference (8 (s(x+h) - s(x-h)) - (s(x+2h) - s(x-2h))) / 12h of those
  terms: four sigmoids, truncation error below h^4 max|s^(5)| / 30 and
  rounding amplified by about 1.5 / h.

relu is one ReLU unit per entry (exact). relu_prime is a one-term sigmoid sum
at a huge slope, a hardmax: sigmoid(slope * x - 800) is exactly 0 for x <= 0
(e^-800 underflows) and exactly 1 for x >= 1600 / slope; in between it rises
from 0 to 1, so the step is exact outside (0, 1600 / slope) and takes the value
0 at x = 0, like torch's relu derivative.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from vm.functions.arithmetic import UNIT_ROUNDOFF
from vm.functions.base import (BlockContext, Domain, FunctionBlock, Parameter, Shape,
                               register)
from vm.functions.moves import gather_operand
from vm.functions.sigmoid_fit import SigmoidFit
from vm.functions.sigmoid_sums import SigmoidSum

CHECK_GRID = np.linspace(-40.0, 40.0, 160_001)
"""Where the truncation of an explicit sum is measured (beyond it every target and every
term is constant to far below the bound)."""
STEP_OFFSET = 800.0
"""relu_prime's score offset: e^-800 underflows to 0 in float32 and float64."""
CENTRAL_DIFFERENCE = ((1.0, 8.0), (-1.0, -8.0), (2.0, -1.0), (-2.0, 1.0))
"""(shift in steps h, weight) of the fourth-order central difference, over 12 h."""


def sigmoid(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return 0.5 * (1.0 + np.tanh(0.5 * x))


class ExplicitSigmoidSum(SigmoidSum):
    """A SigmoidSum whose terms come from an identity rather than a least-squares fit."""

    parameters: tuple[Parameter, ...] = ()

    def __init__(self, **values: float) -> None:
        FunctionBlock.__init__(self, **values)

    def terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """(slopes, biases, coefficients, constant)."""
        raise NotImplementedError

    @cached_property
    def fit(self) -> SigmoidFit:
        """The terms with their truncation measured on CHECK_GRID, once per block: bounds are
        asked for on every step of an error propagation (vm/apps/calc.py)."""
        slopes, biases, coefficients, constant = self.terms()
        fit = SigmoidFit(slopes, biases, coefficients, constant, 0.0, 0.0)
        error = float(np.abs(fit(CHECK_GRID) - self.target(CHECK_GRID)).max())
        return SigmoidFit(slopes, biases, coefficients, constant, error, 0.0)

    def domain(self) -> Domain:
        return Domain("all reals")

    def error_bound(self, dtype: str) -> float:
        """Truncation measured on a dense grid (10% margin) plus rounding: every term's
        softmax weight carries a few roundings, scaled by its coefficient."""
        fit = self.fit
        rounding = 8 * UNIT_ROUNDOFF[dtype] * (np.abs(fit.coefficients).sum() + abs(fit.constant))
        return 1.1 * fit.max_error + rounding

    def relative_error_bound(self, dtype: str) -> float:
        return 0.0


@register
class Sigmoid(ExplicitSigmoidSum):
    name = "sigmoid"
    summary = "c = 1 / (1 + e^-a), elementwise: one sigmoid term, exact up to rounding"
    lemma = "Lemma 5 (one term)"

    target = staticmethod(sigmoid)

    def terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        return np.array([1.0]), np.array([0.0]), np.array([1.0]), 0.0


@register
class Tanh(ExplicitSigmoidSum):
    name = "tanh"
    summary = "c = tanh(a) = 2 sigmoid(2a) - 1, elementwise: one term, exact up to rounding"
    lemma = "Lemma 5 (one term)"

    @staticmethod
    def target(x: np.ndarray) -> np.ndarray:
        return np.tanh(np.asarray(x, dtype=float))

    def terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        return np.array([2.0]), np.array([0.0]), np.array([2.0]), -1.0


class CentralDifference(ExplicitSigmoidSum):
    """f' for f = scale * sigmoid(slope * x) + constant, by the fourth-order central
    difference of its one term: four sigmoid terms."""

    parameters = (Parameter("step", 0.01, "h of the central difference: truncation "
                            "~h^4, rounding ~1/h"),)
    slope = 1.0
    scale = 1.0

    def __init__(self, **values: float) -> None:
        super().__init__(**values)
        if not 0 < self.values["step"] <= 1:
            raise ValueError(f"{self.name}.step must be in (0, 1]")

    def terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        h = self.values["step"]
        biases = np.array([self.slope * shift * h for shift, _ in CENTRAL_DIFFERENCE])
        coefficients = np.array([self.scale * weight / (12 * h)
                                 for _, weight in CENTRAL_DIFFERENCE])
        return np.full(4, self.slope), biases, coefficients, 0.0


@register
class SigmoidPrime(CentralDifference):
    name = "sigmoid_prime"
    summary = "c = sigmoid'(a) = sigmoid(a) (1 - sigmoid(a)), elementwise: four sigmoid terms"
    lemma = "Lemma 5 (central difference)"

    @staticmethod
    def target(x: np.ndarray) -> np.ndarray:
        s = sigmoid(x)
        return s * (1.0 - s)


@register
class TanhPrime(CentralDifference):
    name = "tanh_prime"
    summary = "c = tanh'(a) = 1 - tanh(a)^2, elementwise: four sigmoid terms"
    lemma = "Lemma 5 (central difference)"
    slope = 2.0
    scale = 2.0

    @staticmethod
    def target(x: np.ndarray) -> np.ndarray:
        return 1.0 - np.tanh(np.asarray(x, dtype=float)) ** 2


@register
class ReluPrime(ExplicitSigmoidSum):
    name = "relu_prime"
    summary = "c = 1 if a > 0 else 0, elementwise: one sigmoid term at a huge slope (hardmax)"
    integer_result = True
    lemma = "Lemma 5 (one term, hardmax)"
    parameters = (Parameter("slope", 1e12, "slope of the step: exact outside "
                            "(0, 1600 / slope)"),)

    def __init__(self, **values: float) -> None:
        super().__init__(**values)
        if not 1.0 <= self.values["slope"] <= 1e15:
            raise ValueError(f"{self.name}.slope must be in [1, 1e15]")

    @staticmethod
    def target(x: np.ndarray) -> np.ndarray:
        return (np.asarray(x, dtype=float) > 0).astype(float)

    @property
    def ramp(self) -> float:
        """Width of the interval (0, ramp) where the step is not exact."""
        return 2 * STEP_OFFSET / self.values["slope"]

    def terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        return np.array([self.values["slope"]]), np.array([-STEP_OFFSET]), np.array([1.0]), 0.0

    @cached_property
    def fit(self) -> SigmoidFit:
        slopes, biases, coefficients, constant = self.terms()
        return SigmoidFit(slopes, biases, coefficients, constant, 0.0, 0.0)

    def domain(self) -> Domain:
        return Domain(f"a <= 0 or a >= {self.ramp:.3g}", exclude_low=0.0,
                      exclude_high=self.ramp,
                      widen=f"a larger --param {self.name}.slope=S, which narrows the ramp")

    def error_bound(self, dtype: str) -> float:
        """Both weights of the softmax underflow or round to exactly 0 and 1 off the ramp."""
        return 0.0


@register
class Relu(FunctionBlock):
    name = "relu"
    arity = 1
    summary = "c = max(a, 0), elementwise: one ReLU unit per entry, exact"
    lemma = "ReLU layer of Eq. (1)"

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        return a

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return np.maximum(a, 0.0)

    def error_bound(self, dtype: str) -> float:
        return 0.0

    def relative_error_bound(self, dtype: str) -> float:
        """Exact on the operand as stored; against a float64 operand, its one rounding."""
        return UNIT_ROUNDOFF[dtype]

    def private_fields(self, d: int) -> list[tuple[str, int]]:
        return [("xa", d)]

    def depth(self, d: int) -> int:
        return 1

    def build(self, ctx: BlockContext) -> None:
        gather_operand(ctx, 0, "A", "xa")
        ffn = ctx.ffn(0)
        for r in range(ctx.d):
            ffn.relu_into({ctx.row("xa", r): 1.0, ctx.row("resmask", r): 1.0},
                          ctx.row("res", r), 1.0)


ACTIVATIONS = {"sigmoid": ("sigmoid", "sigmoid_prime"), "tanh": ("tanh", "tanh_prime"),
               "relu": ("relu", "relu_prime")}
"""Activation name -> (block of the function, block of its derivative)."""
