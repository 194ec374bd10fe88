"""Products by linearizing the softmax (Lemma 7): mul (Corollary 2), percentage (Corollary 3).

A head whose query column j holds eps * b_j and whose keys are A's columns
a_i scores eps * a_i . b_j; one more key, the anchor, scores C. For C large
the softmax weight of key i is e^(eps s) / (e^C + sum_k e^(eps s_k)), about
e^(eps s - C): with value e^C / eps the head returns e^(eps s) / eps. A
second head with -eps returns e^(-eps s) / eps, and half their difference is
sinh(eps s) / eps = s + eps^2 s^3 / 6 + ...: the product, with a truncation
error eps^2 |s|^3 / 6.

The anchor's share of the denominator scales the result by a known factor
when only one key carries a product (scalars; the other A columns hold zeros
and score exactly 0): the ReLU layer divides it out exactly to first order,
so C can stay small. That matters for precision: the softmax subtracts its
max, C, from every score, so eps s is resolved only to ulp(C), and the result
only to about (ulp(C) / 2 + 3 u) / eps for unit roundoff u. In float32 this
makes the linearized softmax a product with a narrow usable range of |s|
(docs/fleq_machine.md measures it); float64 has ample room.
"""

from __future__ import annotations

import math

import numpy as np

from vm.functions.base import (GATE_BIG, BlockContext, Domain, FunctionBlock, Parameter, Shape,
                               register)
from vm.functions.arithmetic import UNIT_ROUNDOFF
from vm.functions.moves import gather_operand

SCALE = Parameter("scale", 1e-3, "eps: scores are eps * a * b; smaller is more accurate until "
                  "the rounding of 1/eps dominates (use 1e-5 with float64)")
ANCHOR = Parameter("anchor", 10.0, "C: score of the anchor key; larger decouples keys "
                   "(matrices) but resolves scores only to ulp(C)")
MAX_ANCHOR = 60.0
"""e^C is a value coefficient; beyond e^60 it would overflow float32 with 1/eps."""


def ulp(value: float, dtype: str) -> float:
    """Spacing of floats of `dtype` at `value`."""
    return 2 * UNIT_ROUNDOFF[dtype] * 2.0 ** math.floor(math.log2(max(abs(value), 1e-300)))


def correction(anchor: float, d: int) -> float:
    """1 / (d/ds of the anchored head pair at s = 0) with one active key and d - 1 zero keys."""
    big = math.exp(anchor)
    return (big + d) ** 2 / (big * (big + d - 1))


def product_bound(scale: float, anchor: float, span: float, dtype: str) -> float:
    """Absolute error bound for |s| <= span (module docstring): truncation, the second-order
    anchor coupling, and score rounding at ulp(C)."""
    truncation = math.sinh(scale * span) / scale - span
    coupling = 4 * math.exp(-2 * anchor + 2 * scale * span) * span
    rounding = (ulp(anchor, dtype) + 8 * UNIT_ROUNDOFF[dtype]) / scale * math.cosh(scale * span)
    return 1.1 * truncation + coupling + 2 * rounding


class LinearizedProduct(FunctionBlock):
    """Shared construction: anchor column and the two ±eps product heads."""

    parameters = (SCALE, ANCHOR)
    span = 10.0
    """|product| up to which the documented bound holds."""

    def __init__(self, **values: float) -> None:
        super().__init__(**values)
        if not 0 < self.values["anchor"] <= MAX_ANCHOR:
            raise ValueError(f"{self.name}.anchor must be in (0, {MAX_ANCHOR}]")
        if not 0 < self.values["scale"] <= 1:
            raise ValueError(f"{self.name}.scale must be in (0, 1]")

    def extra_columns(self, d: int) -> int:
        return 1

    def constant_fields(self, d: int) -> dict[str, np.ndarray]:
        width = 3 * d + 1
        anchor = np.zeros((1, width))
        anchor[0, 3 * d] = 1.0
        keys = np.full((1, width), -GATE_BIG)
        keys[0, :d] = 0.0
        keys[0, 3 * d] = 0.0
        return {"anchor": anchor, "pkeys": keys}

    def private_fields(self, d: int) -> list[tuple[str, int]]:
        return [("qb", d), ("plus", d), ("minus", d)]

    def domain(self) -> Domain:
        return Domain(f"|result| <= {self.span:g}", -self.span, self.span,
                      applies_to="result")

    def error_bound(self, dtype: str) -> float:
        return product_bound(self.values["scale"], self.values["anchor"], self.span, dtype)

    def product_heads(self, ctx: BlockContext, layer: int,
                      query: dict[int, np.ndarray]) -> None:
        """plus/minus rows (d) of each C column j get e^(±eps a_i . q_j)/eps for every i,
        where q_j is given as {source row: vector over d dims} (unscaled)."""
        d, eps, anchor = ctx.d, self.values["scale"], self.values["anchor"]
        dims = d + 2  # d product dims, the anchor dim, the key-restriction dim
        for sign, target in ((1.0, "plus"), (-1.0, "minus")):
            queries = {row: np.concatenate([sign * eps * vector, [0.0, 0.0]])
                       for row, vector in query.items()}
            queries[ctx.row("one")] = queries.get(ctx.row("one"), np.zeros(dims)) + \
                np.eye(dims)[d] + np.eye(dims)[d + 1]
            keys = {ctx.row("rd", r): np.eye(dims)[r] for r in range(d)}
            keys[ctx.row("anchor")] = anchor * np.eye(dims)[d]
            keys[ctx.row("pkeys")] = np.eye(dims)[d + 1]
            values = {(ctx.row(target, i), ctx.row("kone", i)): math.exp(anchor) / eps
                      for i in range(d)}
            ctx.add_head(layer, queries, keys, values, 1.0,
                         f"linearized softmax, {'+' if sign > 0 else '-'}eps")

    def emit_product(self, ctx: BlockContext, layer: int) -> None:
        factor = 0.5 * correction(self.values["anchor"], ctx.d)
        for r in range(ctx.d):
            ctx.emit_result(layer, r, {ctx.row("plus", r): factor,
                                       ctx.row("minus", r): -factor})


@register
class Mul(LinearizedProduct):
    name = "mul"
    arity = 2
    summary = "c = a * b for scalars, by the linearized softmax"
    lemma = "Lemma 7, Corollary 2"
    span = 20.0

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        if a != (1, 1) or b != (1, 1):
            raise ValueError("mul multiplies scalars (use matmul for matrices)")
        return (1, 1)

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return a * b

    def depth(self, d: int) -> int:
        return 2

    def build(self, ctx: BlockContext) -> None:
        gather_operand(ctx, 0, "B", "qb")
        self.product_heads(ctx, 1, {ctx.row("qb", r): np.eye(ctx.d)[r] for r in range(ctx.d)})
        self.emit_product(ctx, 1)


@register
class Percentage(LinearizedProduct):
    name = "percentage"
    arity = 1
    summary = "c = a / 100 for scalars, a product with the constant 0.01 (Corollary 3)"
    lemma = "Lemma 7, Corollary 3"
    factor = 0.01
    span = 100.0

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        if a != (1, 1):
            raise ValueError("percentage takes a scalar")
        return (1, 1)

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return a * self.factor

    def error_bound(self, dtype: str) -> float:
        return product_bound(self.values["scale"], self.values["anchor"], self.span * self.factor,
                             dtype)

    def domain(self) -> Domain:
        return Domain(f"|a| <= {self.span:g}", -self.span, self.span)

    def depth(self, d: int) -> int:
        return 1

    def build(self, ctx: BlockContext) -> None:
        constant = np.zeros(ctx.d)
        constant[0] = self.factor
        self.product_heads(ctx, 0, {ctx.row("one"): constant})
        self.emit_product(ctx, 0)
