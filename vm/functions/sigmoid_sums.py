"""Elementwise functions as sums of sigmoids realized by attention (Lemma 5).

A softmax over two keys is a sigmoid: a query column holding x, a key whose
score is w x + b and a null key scoring 0 give weight sigmoid(w x + b) to the
first; with value c it adds c * sigmoid(w x + b). One head per term, all in
one layer, add up f(x) ~ c0 + sum_i c_i sigmoid(w_i x + b_i) (coefficients
from vm.functions.sigmoid_fit).

Every entry of a d x d operand needs its own query column, so the block has
d^2 "vector" columns V_{r,k} besides A, B, C and the two key columns:

  layer 1  V_{r,k} gathers A's column k (exact head); its ReLU layer keeps row
           r (offset-gated selection, exact)
  layer 2  the term heads; the ReLU layer adds c0
  layer 3  C's column k gathers row r from V_{r,k} for every r (d exact heads);
           the ReLU layer writes the result, masked to the instruction's shape
"""

from __future__ import annotations

import numpy as np

from vm.functions.arithmetic import UNIT_ROUNDOFF
from vm.functions.base import (GATE_BIG, BlockContext, Domain, FunctionBlock, Parameter, Shape,
                               register)
from vm.functions.moves import emit_entries, gather_entries
from vm.functions.sigmoid_fit import WEIGHT_FLOOR, SigmoidFit, cached_fit


class SigmoidSum(FunctionBlock):
    """Elementwise f(A) with f fitted by a sum of sigmoids on a domain."""

    arity = 1
    TERMS = Parameter("terms", 64, "number of sigmoid terms (attention heads)")
    SHARPNESS = Parameter("sharpness", 3.0, "slope of each sigmoid times its center spacing")

    def target(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def fit_range(self) -> tuple[float, float, float | None]:
        """(low, high, gap): fit on [low, high] without (-gap, gap)."""
        raise NotImplementedError

    def __init__(self, **values: float) -> None:
        super().__init__(**values)
        terms = self.values["terms"]
        if terms != int(terms) or not 1 <= terms <= 512:
            raise ValueError(f"{self.name}.terms must be an integer in 1..512")
        if self.values["sharpness"] <= 0:
            raise ValueError(f"{self.name}.sharpness must be positive")

    @property
    def fit(self) -> SigmoidFit:
        low, high, gap = self.fit_range()
        return cached_fit(self.name, type(self).target, low, high, int(self.values["terms"]),
                          self.values["sharpness"], gap)

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        return a

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return self.target(a)

    def error_bound(self, dtype: str) -> float:
        """Absolute part: the fit's relative error times the weight floor (5% margin for points
        between grid points), plus the rounding of summing the terms in the dtype."""
        fit = self.fit
        rounding = 4 * UNIT_ROUNDOFF[dtype] * (np.abs(fit.coefficients).sum() + abs(fit.constant))
        return 1.05 * fit.max_relative_error * WEIGHT_FLOOR + rounding

    def relative_error_bound(self, dtype: str) -> float:
        """The fit is weighted by 1/|f|, so its error is close to relative."""
        return 1.05 * self.fit.max_relative_error

    def extra_columns(self, d: int) -> int:
        return d * d + 2

    def depth(self, d: int) -> int:
        return 3

    def private_fields(self, d: int) -> list[tuple[str, int]]:
        return [("tmp", d), ("x", 1), ("y", 1), ("yt", d)]

    def constant_fields(self, d: int) -> dict[str, np.ndarray]:
        width = 3 * d + d * d + 2
        vr, vk = np.zeros((d, width)), np.zeros((d, width))
        vsel = np.full((d, width), -GATE_BIG)
        is_v, g_v = np.zeros((1, width)), np.full((1, width), -GATE_BIG)
        for r in range(d):
            for k in range(d):
                column = 3 * d + r * d + k
                vr[r, column] = vk[k, column] = is_v[0, column] = 1.0
                vsel[r, column] = g_v[0, column] = 0.0
        sigkey = np.zeros((1, width))
        sigkey[0, width - 2] = 1.0
        skeys = np.full((1, width), -GATE_BIG)
        skeys[0, width - 2:] = 0.0
        return {"vr": vr, "vk": vk, "vsel": vsel, "isV": is_v, "gV": g_v, "sigkey": sigkey,
                "skeys": skeys}

    def build(self, ctx: BlockContext) -> None:
        gather_entries(ctx, 0, "A", "tmp", "vsel", [ctx.row("x")] * ctx.d)
        self._terms(ctx)
        emit_entries(ctx, 2, "y", "yt")

    def _terms(self, ctx: BlockContext) -> None:
        fit = self.fit
        for term, (slope, bias, coefficient) in enumerate(zip(fit.slopes, fit.biases,
                                                              fit.coefficients)):
            queries = {ctx.row("x"): np.array([1.0, 0.0, 0.0]),
                       ctx.row("one"): np.array([0.0, 1.0, 1.0])}
            keys = {ctx.row("sigkey"): np.array([slope, bias, 0.0]),
                    ctx.row("skeys"): np.array([0.0, 0.0, 1.0])}
            values = {(ctx.row("y"), ctx.row("sigkey")): coefficient}
            ctx.add_head(1, queries, keys, values, 1.0, f"sigmoid term {term}")
        ctx.ffn(1).relu_into({ctx.row("isV"): 1.0}, ctx.row("y"), fit.constant)


@register
class Inverse(SigmoidSum):
    name = "inv"
    summary = "c = 1 / a, elementwise, as a sum of sigmoids"
    lemma = "Lemma 5, Lemma 10, Corollary 4"
    parameters = (SigmoidSum.TERMS, SigmoidSum.SHARPNESS,
                  Parameter("low", 0.1, "smallest |a| of the domain"),
                  Parameter("high", 100.0, "largest |a| of the domain"))

    @staticmethod
    def target(x: np.ndarray) -> np.ndarray:
        return 1.0 / np.asarray(x, dtype=float)

    def fit_range(self) -> tuple[float, float, float | None]:
        return -self.values["high"], self.values["high"], self.values["low"]

    def domain(self) -> Domain:
        low, high = self.values["low"], self.values["high"]
        return Domain(f"{low:g} <= |a| <= {high:g}", -high, high, -low, low)


@register
class Sqrt(SigmoidSum):
    name = "sqrt"
    summary = "c = sqrt(a), elementwise, as a sum of sigmoids"
    lemma = "Lemma 5, Lemma 11, Corollary 5"
    parameters = (SigmoidSum.TERMS, SigmoidSum.SHARPNESS,
                  Parameter("low", 0.01, "smallest positive a of the domain: sqrt's slope is "
                            "unbounded at 0, so (0, low) is left out (a = 0 is in)"),
                  Parameter("high", 100.0, "largest a of the domain"))

    @staticmethod
    def target(x: np.ndarray) -> np.ndarray:
        return np.sqrt(np.maximum(np.asarray(x, dtype=float), 0.0))

    def fit_range(self) -> tuple[float, float, float | None]:
        return 0.0, self.values["high"], self.values["low"]

    def domain(self) -> Domain:
        low, high = self.values["low"], self.values["high"]
        return Domain(f"a = 0 or {low:g} <= a <= {high:g}", 0.0, high, 0.0, low)


@register
class InverseSquareRoot(SigmoidSum):
    name = "rsqrt"
    summary = "c = 1 / sqrt(a), elementwise, as a sum of sigmoids"
    lemma = "Lemma 5"
    parameters = (Parameter("terms", 16, "number of sigmoid terms (attention heads); 16 give "
                            "about 3.5 % relative error, a first guess that Newton steps refine"),
                  SigmoidSum.SHARPNESS,
                  Parameter("low", 0.01, "smallest a of the domain"),
                  Parameter("high", 100.0, "largest a of the domain"))

    def __init__(self, **values: float) -> None:
        super().__init__(**values)
        if not 0 < self.values["low"] < self.values["high"]:
            raise ValueError("rsqrt needs 0 < low < high")

    @staticmethod
    def target(x: np.ndarray) -> np.ndarray:
        return 1.0 / np.sqrt(np.maximum(np.asarray(x, dtype=float), 1e-300))

    def fit_range(self) -> tuple[float, float, float | None]:
        """The gap makes the fitting grid geometric from low, where 1/sqrt(a) is steepest."""
        return self.values["low"], self.values["high"], self.values["low"]

    def domain(self) -> Domain:
        low, high = self.values["low"], self.values["high"]
        return Domain(f"{low:g} <= a <= {high:g}", low, high)
