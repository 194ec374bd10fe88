"""hadamard(A, B): the elementwise product, by the linearized softmax (Lemma 7).

Every entry needs its own query, so the block has d^2 "vector" columns
V_{r,k} (as the sigmoid sums do) and an anchor column:

  layer 1  V_{r,k} gathers B's column k (exact head); its ReLU layer keeps
           row r only, in query row r: q = B[r,k] e_r
  layer 2  two head pairs at +-eps and +-2 eps: the keys are A's columns i,
           so V_{r,k} gets R_i ~ A[r,i] B[r,k] for every i from each pair; the
           ReLU layer combines them into y = A[r,k] B[r,k]
  layer 3  C's column k gathers y from V_{r,k} for every r (d exact heads);
           the ReLU layer writes the result, masked to the instruction's shape

All d keys are active (A's other columns score A[r,i] B[r,k] too), so they
share the softmax denominator. To first order in eps the raw outputs are
R_i = e^C (s_i - S / D0) / D0 with S = sum_i s_i and D0 = e^C + d, which the
ReLU layer inverts exactly: s_k = (D0 / e^C) R_k + (D0 / e^2C) sum_i R_i.
The corrected estimate is even in eps, s + c2 eps^2 + ..., so Richardson
extrapolation (4 f(eps) - f(2 eps)) / 3 removes every eps^2 term (coupling
included), leaving about eps^4 |s|^5 / 30; what limits it is rounding: the
softmax resolves scores only to ulp(C), so an entry is off by about
(ulp(C) / 2 + 4 u) / eps. The head pairs and the rounding bound are the
ones every linearized product shares (vm/functions/products.py).
"""

from __future__ import annotations

import numpy as np

from vm.blocks.ffn import form_sum, scaled
from vm.functions.base import GATE_BIG, BlockContext, Domain, Parameter, Shape, register
from vm.functions.moves import emit_entries, gather_entries
from vm.functions.products import ANCHOR, LinearizedProduct, product_error_bound

SPAN = 10.0
"""Largest |entry| of A and B on which the documented bound holds."""


@register
class Hadamard(LinearizedProduct):
    name = "hadamard"
    arity = 2
    summary = "C = A * B elementwise, by the linearized softmax (d^2 query columns)"
    lemma = "Lemma 7 (per entry)"
    parameters = (Parameter("scale", 1e-5, "eps: scores are eps * a * b (the second pair uses "
                            "2 eps); 1e-5 suits float64, about 1e-3 float32"),
                  ANCHOR)

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        if a != b:
            raise ValueError(f"operands must have the same shape, got {a[0]}x{a[1]} and "
                             f"{b[0]}x{b[1]}")
        return a

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return a * b

    def domain(self) -> Domain:
        return Domain(f"|entries| <= {SPAN:g}", -SPAN, SPAN)

    def error_bound(self, dtype: str) -> float:
        """Rounding as for every linearized product (`product_error_bound`); truncation:
        twice eps^4 M^5 / 30 for M = SPAN^2, the largest score."""
        eps = self.values["scale"]
        largest = SPAN ** 2
        return (product_error_bound(eps, self.values["anchor"], dtype)
                + 2 * eps ** 4 * largest ** 5 / 30)

    def extra_columns(self, d: int) -> int:
        return d * d + 1

    def depth(self, d: int) -> int:
        return 3

    def private_fields(self, d: int) -> list[tuple[str, int]]:
        return super().private_fields(d) + [("tb", d), ("qb", d), ("y", 1), ("yt", d)]

    def constant_fields(self, d: int) -> dict[str, np.ndarray]:
        width = 3 * d + d * d + 1
        anchor_column = width - 1
        vr, vk = np.zeros((d, width)), np.zeros((d, width))
        rsel, ksel = np.full((d, width), -GATE_BIG), np.full((d, width), -GATE_BIG)
        g_v = np.full((1, width), -GATE_BIG)
        for r in range(d):
            for k in range(d):
                column = 3 * d + r * d + k
                vr[r, column] = vk[k, column] = 1.0
                rsel[r, column] = ksel[k, column] = g_v[0, column] = 0.0
        anchor = np.zeros((1, width))
        anchor[0, anchor_column] = 1.0
        keys = np.full((1, width), -GATE_BIG)
        keys[0, :d] = 0.0
        keys[0, anchor_column] = 0.0
        return {"anchor": anchor, "pkeys": keys, "vr": vr, "vk": vk, "rsel": rsel,
                "ksel": ksel, "gV": g_v}

    def build(self, ctx: BlockContext) -> None:
        """Layer 1 puts B[r, k] e_r in V_{r,k}'s query rows; layer 2 scores it against A's
        columns with the shared head pairs (`product_heads`): V_{r,k} row plus_i / minus_i
        gets the pair's output for s_i = A[r,i] B[r,k]."""
        rows = range(ctx.d)
        gather_entries(ctx, 0, "B", "tb", "rsel", [ctx.row("qb", r) for r in rows])
        self.product_heads(ctx, 1, [ctx.row("rd", r) for r in rows],
                           {ctx.row("qb", r): np.eye(ctx.d)[r] for r in rows})
        self._combine(ctx)
        emit_entries(ctx, 2, "y", "yt")

    def _combine(self, ctx: BlockContext) -> None:
        """y = the decoupled, extrapolated product k of V_{r,k}'s pair rows (`decoupled_form`),
        kept in column V_{r,k} by the ksel offset (two ReLU units per k, exact)."""
        ffn, y = ctx.ffn(1), ctx.row("y")
        for k in range(ctx.d):
            form, gate = self.decoupled_form(ctx, k), {ctx.row("ksel", k): 1.0}
            ffn.relu_into(form_sum(form, gate), y, 1.0)
            ffn.relu_into(form_sum(scaled(form, -1.0), gate), y, -1.0)
