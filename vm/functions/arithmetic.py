"""add and sub (Lemmas 8-9): elementwise on matrices up to d x d.

Layer 1 attention moves A's and B's column k into C's column k (two exact
heads); its ReLU layer writes A ± B into the result, one float rounding,
the same as numpy in the run's dtype.
"""

from __future__ import annotations

import numpy as np

from vm.functions.base import BlockContext, Domain, FunctionBlock, Shape, register
from vm.functions.moves import gather_operand

UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float64": 2.0 ** -53}


class Elementwise(FunctionBlock):
    """A ± B on operands of one shape."""

    arity = 2
    sign = 1.0
    integer_preserving = True

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        if a != b:
            raise ValueError(f"operands must have the same shape, got {a[0]}x{a[1]} and "
                             f"{b[0]}x{b[1]}")
        return a

    def domain(self) -> Domain:
        return Domain("all reals")

    def error_bound(self, dtype: str) -> float:
        return 0.0

    def relative_error_bound(self, dtype: str) -> float:
        """One rounding of the result (operands arrive exactly)."""
        return UNIT_ROUNDOFF[dtype]

    def private_fields(self, d: int) -> list[tuple[str, int]]:
        return [("xa", d), ("xb", d)]

    def depth(self, d: int) -> int:
        return 1

    def build(self, ctx: BlockContext) -> None:
        gather_operand(ctx, 0, "A", "xa")
        gather_operand(ctx, 0, "B", "xb")
        for r in range(ctx.d):
            ctx.emit_result(0, r, {ctx.row("xa", r): 1.0, ctx.row("xb", r): self.sign})


@register
class Add(Elementwise):
    name = "add"
    summary = "C = A + B, elementwise"
    lemma = "Lemma 8"

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return a + b


@register
class Sub(Elementwise):
    name = "sub"
    summary = "C = A - B, elementwise"
    lemma = "Lemma 9"
    sign = -1.0

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return a - b
