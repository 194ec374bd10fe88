"""Elementwise functions as sums of sigmoids realized by attention (Lemma 5), refined by
Newton steps (vm/functions/newton.py).

A softmax over two keys is a sigmoid: a query column holding x, a key whose
score is w x + b and a null key scoring 0 give weight sigmoid(w x + b) to the
first; with value c it adds c * sigmoid(w x + b). One head per term, all in
one layer, add up f(x) ~ c0 + sum_i c_i sigmoid(w_i x + b_i) (coefficients
from vm.functions.sigmoid_fit): a start good to a few percent.

Every entry of a d x d operand needs its own query column, so the block has
d^2 "vector" columns V_{r,k} besides A, B, C, the two key columns and the
Newton products' anchor column:

  layer 1  V_{r,k} gathers A's column k (exact head); its ReLU layer keeps row
           r (offset-gated selection, exact)
  layer 2  the term heads; the ReLU layer puts the start y = c0 + sum in row r
           of `qy`
  then     `steps` Newton steps (2 layers each for inv, 3 for rsqrt and sqrt,
           plus one for sqrt's final a * rsqrt(a)), all exact-product layers
  last     C's column k gathers row r from V_{r,k} for every r (d exact heads);
           the ReLU layer writes the result, masked to the instruction's shape
"""

from __future__ import annotations

import math

import numpy as np

from vm.functions import newton
from vm.functions.arithmetic import UNIT_ROUNDOFF
from vm.functions.base import (GATE_BIG, BlockContext, Domain, FunctionBlock, Parameter, Shape,
                               register)
from vm.functions.moves import emit_entries, gather_entries
from vm.functions.sigmoid_fit import WEIGHT_FLOOR, SigmoidFit, cached_fit


class SigmoidSum(FunctionBlock):
    """Elementwise f(A): a sum of sigmoids fitted to `start` on a domain, then Newton steps
    (`refine`)."""

    arity = 1
    TERMS = Parameter("terms", 64, "number of sigmoid terms (attention heads)")
    SHARPNESS = Parameter("sharpness", 3.0, "slope of each sigmoid times its center spacing")
    LAYERS_PER_STEP = 0

    def target(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def start(self) -> object:
        """The function the sigmoids fit (a static function, the fit's cache key)."""
        return type(self).target

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
        if self.refinable:
            steps = self.values["steps"]
            if steps != int(steps) or not 0 <= steps <= 8:
                raise ValueError(f"{self.name}.steps must be an integer in 0..8")
            if not 0 < self.values["scale"] <= 0.1:
                raise ValueError(f"{self.name}.scale must be in (0, 0.1]")

    @property
    def refinable(self) -> bool:
        """True for blocks with Newton parameters (inv, sqrt, rsqrt): they get the anchor
        column and the Newton fields."""
        return "steps" in self.values

    @property
    def steps(self) -> int:
        return int(self.values.get("steps", 0))

    @property
    def fit(self) -> SigmoidFit:
        low, high, gap = self.fit_range()
        return cached_fit(self.name, self.start(), low, high, int(self.values["terms"]),
                          self.values["sharpness"], gap)

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        return a

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return self.target(a)

    def start_range(self) -> tuple[float, float]:
        """Smallest and largest |start(a)| on the domain."""
        raise NotImplementedError

    def start_error(self, dtype: str) -> float:
        """Relative error of the start: the fit's relative error (5% margin for points between
        grid points; relative to max(|f|, WEIGHT_FLOOR)) plus the rounding of summing the
        terms, both over the smallest |f|."""
        fit, (smallest, _) = self.fit, self.start_range()
        rounding = 4 * UNIT_ROUNDOFF[dtype] * (np.abs(fit.coefficients).sum() + abs(fit.constant))
        return (1.05 * fit.max_relative_error * max(1.0, WEIGHT_FLOOR / smallest)
                + rounding / smallest)

    def refined_error(self, dtype: str) -> float:
        """Relative error after the Newton steps (and any final product)."""
        raise NotImplementedError

    def error_bound(self, dtype: str) -> float:
        """Absolute part: without Newton steps, the fit's relative error times the weight
        floor (5% margin) plus the rounding of summing the terms; with them, 0 (the bound is
        relative, `refined_error`)."""
        if self.steps:
            return 0.0
        fit = self.fit
        rounding = 4 * UNIT_ROUNDOFF[dtype] * (np.abs(fit.coefficients).sum() + abs(fit.constant))
        return 1.05 * fit.max_relative_error * WEIGHT_FLOOR + rounding

    def relative_error_bound(self, dtype: str) -> float:
        """The fit is weighted by 1/|f|, so its error is close to relative; Newton squares it
        each step (`refined_error`)."""
        if self.steps:
            with np.errstate(over="ignore", invalid="ignore"):  # inf/nan: no bound, just below
                error = self.refined_error(dtype)  # (inv.high=1e300 warned on stderr)
            return error if error < 1 else math.inf  # Newton diverges: no bound (nan too)
        return 1.05 * self.fit.max_relative_error

    def extra_columns(self, d: int) -> int:
        return d * d + (3 if self.refinable else 2)

    def depth(self, d: int) -> int:
        return 3 + self.LAYERS_PER_STEP * self.steps

    def private_fields(self, d: int) -> list[tuple[str, int]]:
        own = [("tmp", d), ("x", 1), ("y", 1), ("yt", d), ("qy", d)]
        return own + (newton.private_fields(d) if self.refinable else [])

    def constant_fields(self, d: int) -> dict[str, np.ndarray]:
        width = 3 * d + self.extra_columns(d)
        key = 3 * d + d * d
        vr, vk = np.zeros((d, width)), np.zeros((d, width))
        vsel = np.full((d, width), -GATE_BIG)
        is_v, g_v = np.zeros((1, width)), np.full((1, width), -GATE_BIG)
        for r in range(d):
            for k in range(d):
                column = 3 * d + r * d + k
                vr[r, column] = vk[k, column] = is_v[0, column] = 1.0
                vsel[r, column] = g_v[0, column] = 0.0
        sigkey = np.zeros((1, width))
        sigkey[0, key] = 1.0
        skeys = np.full((1, width), -GATE_BIG)
        skeys[0, key:key + 2] = 0.0
        fields = {"vr": vr, "vk": vk, "vsel": vsel, "isV": is_v, "gV": g_v, "sigkey": sigkey,
                  "skeys": skeys}
        if self.refinable:
            fields.update(newton.constant_fields(d, width, width - 1))
        return fields

    def build(self, ctx: BlockContext) -> None:
        gather_entries(ctx, 0, "A", "tmp", "vsel", [ctx.row("x")] * ctx.d)
        self._terms(ctx)
        last = self.refine(ctx, 2)
        emit_entries(ctx, last, "qy", "yt", per_row=True)

    def refine(self, ctx: BlockContext, layer: int) -> int:
        """Add the Newton layers from `layer` on; return the next free layer (none here)."""
        return layer

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
        newton.assign(ctx, 1, "qy", {ctx.row("y"): 1.0}, fit.constant)


NEWTON = (newton.STEPS, newton.SCALE)


class RefinedSum(SigmoidSum):
    """A SigmoidSum with Newton steps: parameters `steps` and `scale`."""

    float32_values = {"scale": 3e-2}
    """float32 resolves the products' scores only to ulp(4) = 4.8e-7, so a Newton product is
    off by ~4e-6 / eps absolute (bound): a larger eps balances that against the truncation
    2 (eps s)^4 / 30. At 3e-2 the documented bounds are 1.4 % (inv), 0.28 % (rsqrt) and
    0.45 % (sqrt) relative, measured 0.07 %, 0.013 %, 0.016 %."""


def _inverse_steps(ctx: BlockContext, layer: int, steps: int, eps: float) -> int:
    """y <- y (2 - a y): z = a y (keys A) and Y moved into C's columns; then y t (keys C)."""
    for _ in range(steps):
        newton.move_to_keys(ctx, layer)
        newton.product(ctx, layer, "A", "qy", eps)
        newton.assign(ctx, layer, "qt", newton.product_form(ctx), 2.0, scale=-1.0)
        newton.clear(ctx, layer, newton.PAIRS)
        newton.product(ctx, layer + 1, "C", "qt", eps)
        newton.assign(ctx, layer + 1, "qy", newton.product_form(ctx))
        newton.clear(ctx, layer + 1, newton.PAIRS + ("ky",))
        layer += 2
    return layer


def _rsqrt_steps(ctx: BlockContext, layer: int, steps: int, eps: float) -> int:
    """y <- y (3 - a y^2) / 2: u = a y (keys A), w = u y and then y t (keys C)."""
    for _ in range(steps):
        newton.move_to_keys(ctx, layer)
        newton.product(ctx, layer, "A", "qy", eps)
        newton.assign(ctx, layer, "qt", newton.product_form(ctx))
        newton.clear(ctx, layer, newton.PAIRS)
        newton.product(ctx, layer + 1, "C", "qt", eps)
        newton.assign(ctx, layer + 1, "qt", newton.product_form(ctx), 1.5, scale=-0.5)
        newton.clear(ctx, layer + 1, newton.PAIRS)
        newton.product(ctx, layer + 2, "C", "qt", eps)
        newton.assign(ctx, layer + 2, "qy", newton.product_form(ctx))
        newton.clear(ctx, layer + 2, newton.PAIRS + ("ky",))
        layer += 3
    return layer


def _inverse_error(e: float, low: float, high: float, eps: float, steps: int,
                   dtype: str) -> float:
    """Relative error after `steps` of y (2 - a y) from relative error e, for |1/a| in
    [low, high]: y = (1 + e)/a, z = a y (1 + r1), y' = y (1 - e - ...)(1 + r2), so
    e' = e^2 + (1 + e) r1 + (1 + e) r2 (to first order in the r)."""
    for _ in range(steps):
        r1 = newton.product_relative_error(eps, 1 - e, 1 + e, dtype)
        r2 = newton.product_relative_error(eps, low * (1 - e), high * (1 + e), dtype)
        e = e * e + (1 + e) * (r1 + r2)
    return e


def _rsqrt_error(e: float, low: float, high: float, eps: float, steps: int,
                 dtype: str) -> float:
    """Relative error after `steps` of y (3 - a y^2) / 2 from relative error e, for
    1/sqrt(a) in [low, high]: e' = 1.5 e^2 + 0.5 |e|^3 plus the products' errors."""
    for _ in range(steps):
        r1 = newton.product_relative_error(eps, (1 - e) / high, (1 + e) / low, dtype)
        r2 = newton.product_relative_error(eps, (1 - e) ** 2, (1 + e) ** 2 * (1 + r1), dtype)
        r3 = newton.product_relative_error(eps, low * (1 - e), high * (1 + e), dtype)
        eta = (1 + e) ** 2 * (r1 + r2 + r1 * r2)
        e = (1.5 * e * e + 0.5 * e ** 3 + 0.5 * (1 + e) * eta) * (1 + r3) + r3
    return e


@register
class Inverse(RefinedSum):
    name = "inv"
    summary = "c = 1 / a, elementwise: a sum of sigmoids, then Newton steps y (2 - a y)"
    lemma = "Lemma 5, Lemma 10, Corollary 4; Lemma 7 (Newton's products)"
    LAYERS_PER_STEP = 2
    parameters = (SigmoidSum.TERMS, SigmoidSum.SHARPNESS,
                  Parameter("low", 0.1, "smallest |a| of the domain"),
                  Parameter("high", 100.0, "largest |a| of the domain"), *NEWTON)

    def __init__(self, **values: float) -> None:
        super().__init__(**values)
        if not 0 < self.values["low"] < self.values["high"]:
            raise ValueError("inv needs 0 < low < high")

    @staticmethod
    def target(x: np.ndarray) -> np.ndarray:
        return 1.0 / np.asarray(x, dtype=float)

    def fit_range(self) -> tuple[float, float, float | None]:
        return -self.values["high"], self.values["high"], self.values["low"]

    def domain(self) -> Domain:
        low, high = self.values["low"], self.values["high"]
        return Domain(f"{low:g} <= |a| <= {high:g}", -high, high, -low, low,
                      widen=f"--param {self.name}.low=L or --param {self.name}.high=H")

    def start_range(self) -> tuple[float, float]:
        return 1 / self.values["high"], 1 / self.values["low"]

    def refined_error(self, dtype: str) -> float:
        low, high = self.start_range()
        return _inverse_error(self.start_error(dtype), low, high, self.values["scale"],
                              self.steps, dtype)

    def refine(self, ctx: BlockContext, layer: int) -> int:
        return _inverse_steps(ctx, layer, self.steps, self.values["scale"])


@register
class Sqrt(RefinedSum):
    """With Newton steps the sigmoids fit 1/sqrt(a), refined as rsqrt's, and one more product
    gives a * rsqrt(a) (exactly 0 at a = 0); without them they fit sqrt(a) directly."""

    name = "sqrt"
    summary = "c = sqrt(a), elementwise: a rsqrt(a), from a sum of sigmoids and Newton steps"
    lemma = "Lemma 5, Lemma 11, Corollary 5; Lemma 7 (Newton's products)"
    LAYERS_PER_STEP = 3
    parameters = (SigmoidSum.TERMS, SigmoidSum.SHARPNESS,
                  Parameter("low", 0.01, "smallest positive a of the domain: sqrt's slope is "
                            "unbounded at 0, so (0, low) is left out (a = 0 is in)"),
                  Parameter("high", 100.0, "largest a of the domain"), *NEWTON)

    def __init__(self, **values: float) -> None:
        super().__init__(**values)
        if not 0 < self.values["low"] < self.values["high"]:
            raise ValueError("sqrt needs 0 < low < high")

    @staticmethod
    def target(x: np.ndarray) -> np.ndarray:
        return np.sqrt(np.maximum(np.asarray(x, dtype=float), 0.0))

    def start(self) -> object:
        return InverseSquareRoot.target if self.steps else Sqrt.target

    def fit_range(self) -> tuple[float, float, float | None]:
        if self.steps:
            return self.values["low"], self.values["high"], self.values["low"]
        return 0.0, self.values["high"], self.values["low"]

    def domain(self) -> Domain:
        low, high = self.values["low"], self.values["high"]
        return Domain(f"a = 0 or {low:g} <= a <= {high:g}", 0.0, high, 0.0, low,
                      widen=f"--param {self.name}.low=L or --param {self.name}.high=H")

    def start_range(self) -> tuple[float, float]:
        low, high = self.values["low"], self.values["high"]
        return (1 / math.sqrt(high), 1 / math.sqrt(low)) if self.steps else (math.sqrt(low),
                                                                              math.sqrt(high))

    def refined_error(self, dtype: str) -> float:
        low, high = self.start_range()
        eps = self.values["scale"]
        e = _rsqrt_error(self.start_error(dtype), low, high, eps, self.steps, dtype)
        final = newton.product_relative_error(eps, math.sqrt(self.values["low"]) * (1 - e),
                                              math.sqrt(self.values["high"]) * (1 + e), dtype)
        return e + (1 + e) * final

    def error_bound(self, dtype: str) -> float:
        """With Newton steps: the final product's rounding, absolute (it is all the error at
        a = 0, where the product's two head pairs cancel up to rounding)."""
        if self.steps:
            return newton.product_error_bound(self.values["scale"], newton.ANCHOR, dtype)
        return super().error_bound(dtype)

    def depth(self, d: int) -> int:
        return super().depth(d) + (1 if self.steps else 0)

    def refine(self, ctx: BlockContext, layer: int) -> int:
        if not self.steps:
            return layer
        eps = self.values["scale"]
        layer = _rsqrt_steps(ctx, layer, self.steps, eps)
        newton.product(ctx, layer, "A", "qy", eps)
        newton.assign(ctx, layer, "qy", newton.product_form(ctx))
        return layer + 1


@register
class InverseSquareRoot(RefinedSum):
    name = "rsqrt"
    summary = "c = 1 / sqrt(a), elementwise: a sum of sigmoids, then Newton steps"
    lemma = "Lemma 5; Lemma 7 (Newton's products)"
    LAYERS_PER_STEP = 3
    parameters = (Parameter("terms", 16, "number of sigmoid terms (attention heads); 16 give "
                            "about 3.5 % relative error, a start that Newton steps refine"),
                  SigmoidSum.SHARPNESS,
                  Parameter("low", 0.01, "smallest a of the domain"),
                  Parameter("high", 100.0, "largest a of the domain"), *NEWTON)

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
        return Domain(f"{low:g} <= a <= {high:g}", low, high,
                      widen=f"--param {self.name}.low=L or --param {self.name}.high=H")

    def start_range(self) -> tuple[float, float]:
        return 1 / math.sqrt(self.values["high"]), 1 / math.sqrt(self.values["low"])

    def refined_error(self, dtype: str) -> float:
        low, high = self.start_range()
        return _rsqrt_error(self.start_error(dtype), low, high, self.values["scale"],
                            self.steps, dtype)

    def refine(self, ctx: BlockContext, layer: int) -> int:
        return _rsqrt_steps(ctx, layer, self.steps, self.values["scale"])
