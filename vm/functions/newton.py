"""Newton steps inside a sigmoid-sum block: exact-product layers that refine its start.

A sum of sigmoids gets 1/a or 1/sqrt(a) to a few percent (vm/functions/sigmoid_sums.py).
Newton's iteration doubles the correct digits per step, and each step needs only
products and affine maps, so the block appends a few layers that run it on every
entry column V_{r,k} (y there is the current estimate of entry (r, k)):

  inv    y <- y (2 - a y)                      two products a step
  rsqrt  y <- y (3 - (a y) y) / 2              three products a step
  sqrt   sqrt(a) = a rsqrt(a)                  rsqrt's steps, then one product

Each product is the linearized softmax of vm/functions/products.py (two head pairs at
±eps and ±2 eps, Richardson-extrapolated), with one change: every V_{r,k} query matches
exactly one key, column k of A (its entry a) or of C (where a move head puts the
current estimates, the matrix Y), because a `kmatch` key field adds -MATCH to every other
column's score (one term, 0 or -MATCH, so the matched score is exact). Their softmax
weights underflow to exactly 0, so each product is a single-key product: no coupling
with the other entries, and its error depends on its own score only.

Error of a product with result s (float64 or float32): rounding about
`product_error_bound(eps, C)` absolute (the softmax resolves scores to ulp(C)) plus
truncation 2 (eps s)^4 / 30 relative. Through a step the relative error e becomes
e^2 (inv) or 1.5 e^2 + 0.5 |e|^3 (rsqrt) plus the products' relative errors, which
`refined_error` propagates from the fit's documented start error.
"""

from __future__ import annotations

import math

import numpy as np

from vm.blocks.ffn import Form, form_sum
from vm.functions.arithmetic import UNIT_ROUNDOFF
from vm.functions.base import GATE_BIG, BlockContext, Parameter
from vm.functions.moves import collect_entries
from vm.functions.products import RICHARDSON, product_error_bound

MATCH = 800.0
"""Score penalty of a key column that does not match the query's k: e^-800 is exactly 0 in
float64 and float32."""
ANCHOR = 4.0
"""Score of the anchor key (as the products' default: small, so scores resolve finely)."""
STEPS = Parameter("steps", 3, "Newton steps after the sigmoid-sum start (each doubles the "
                  "correct digits; 0: the fit alone)")
SCALE = Parameter("scale", 1e-3, "eps of the Newton steps' products: rounding ~ulp(4) / eps "
                  "absolute against truncation 2 (eps s)^4 / 30 relative; 1e-3 suits float64, "
                  "3e-2 float32")
FIELDS = ("qt", "ky")
"""qt: the second factor in row r of V_{r,k} (the block's `qy` holds the estimate y there);
ky: Y in C's columns."""
PAIRS = tuple(name for _, _, plus, minus in RICHARDSON for name in (plus, minus))


def private_fields(d: int) -> list[tuple[str, int]]:
    return [(name, d) for name in FIELDS] + [(name, 1) for name in PAIRS]


def constant_fields(d: int, width: int, anchor_column: int) -> dict[str, np.ndarray]:
    """The anchor, the key restrictions to A's (`akeys`) and C's (`ckeys`) columns, the
    gate `offc` of every column but C's, and `kmatch`: -MATCH in row k of A's and C's
    columns i != k."""
    anchor = np.zeros((1, width))
    anchor[0, anchor_column] = 1.0
    restrictions = {}
    for name, first in (("akeys", 0), ("ckeys", 2 * d)):
        keys = np.full((1, width), -GATE_BIG)
        keys[0, first:first + d] = 0.0
        keys[0, anchor_column] = 0.0
        restrictions[name] = keys
    off_c = np.zeros((1, width))
    off_c[0, 2 * d:3 * d] = -GATE_BIG
    restrictions["offc"] = off_c
    match = np.zeros((d, width))
    for i in range(d):
        for k in range(d):
            if k != i:
                match[k, i] = match[k, 2 * d + i] = -MATCH
    return {"anchor": anchor, "kmatch": match, **restrictions}


def product(ctx: BlockContext, layer: int, keys: str, query: str, eps: float) -> None:
    """Pair rows of V_{r,k} get the four head outputs for s = query[r] * X[r, k], X = A
    (`keys` "A": the operand) or Y (`keys` "C": the estimates moved there)."""
    d = ctx.d
    key_rows = [ctx.row("rd" if keys == "A" else "ky", r) for r in range(d)]
    restriction = ctx.row("akeys" if keys == "A" else "ckeys")
    basis = np.eye(2 * d + 2)
    for factor, _, plus, minus in RICHARDSON:
        for sign, target in ((1.0, plus), (-1.0, minus)):
            queries = {ctx.row(query, r): sign * factor * eps * basis[r] for r in range(d)}
            queries.update({ctx.row("vk", k): basis[d + k] for k in range(d)})
            queries[ctx.row("one")] = basis[2 * d] + basis[2 * d + 1]
            key_map = {row: basis[r] for r, row in enumerate(key_rows)}
            key_map.update({ctx.row("kmatch", k): basis[d + k] for k in range(d)})
            key_map[ctx.row("anchor")] = ANCHOR * basis[2 * d]
            key_map[restriction] = basis[2 * d + 1]
            value = math.exp(ANCHOR) / (factor * eps)
            values = {(ctx.row(target), ctx.row("kone", i)): value for i in range(d)}
            ctx.add_head(layer, queries, key_map, values, 1.0,
                         f"Newton product, {sign * factor:+g} eps, keys {keys}")


def product_form(ctx: BlockContext) -> Form:
    """The product from the pair rows: one active key, so the first-order decoupling is the
    factor D^2 / (2 e^2C), D = e^C + 1, and Richardson weights remove the eps^2 terms."""
    big = math.exp(ANCHOR)
    gain = (big + 1) ** 2 / (2 * big ** 2)
    form: Form = {}
    for _, weight, plus, minus in RICHARDSON:
        form[ctx.row(plus)] = weight * gain
        form[ctx.row(minus)] = -weight * gain
    return form


def assign(ctx: BlockContext, layer: int, target: str, form: Form, constant: float = 0.0,
           scale: float = 1.0) -> None:
    """target[r] of every V_{r,k} := scale * form + constant (units gated to row r's entry
    columns by `vsel`; they add the difference to what the row holds)."""
    ffn = ctx.ffn(layer)
    for r in range(ctx.d):
        value = form_sum(form, scale=scale)
        if constant:
            value = form_sum(value, {ctx.row("isV"): constant})
        difference = form_sum(value, {ctx.row(target, r): -1.0})
        gated = form_sum(difference, {ctx.row("vsel", r): 1.0})
        ffn.relu_into(gated, ctx.row(target, r), 1.0)
        ffn.relu_into(form_sum(form_sum(difference, scale=-1.0), {ctx.row("vsel", r): 1.0}),
                      ctx.row(target, r), -1.0)


def clear(ctx: BlockContext, layer: int, names: tuple[str, ...]) -> None:
    """Every row of the named fields := 0 in the block's columns (exact: x + (-x))."""
    ffn = ctx.ffn(layer)
    for name in names:
        for row in ctx.rows(name):
            ffn.copy(row, row, sign=-1.0)


def move_to_keys(ctx: BlockContext, layer: int) -> None:
    """C column k, row r of `ky` gets qy[r] of V_{r,k}: the estimates as a matrix Y. Every
    other column's query also lands somewhere; the ReLU layer clears what it got, so the
    anchor's key stays 0."""
    collect_entries(ctx, layer, "qy", "ky", per_row=True, role="C gathers estimate row")
    ffn = ctx.ffn(layer)
    for row in ctx.rows("ky"):
        ffn.copy(row, row, gate=ctx.row("offc"), sign=-1.0)


def product_relative_error(eps: float, low: float, high: float, dtype: str) -> float:
    """Relative error of one Newton product whose result lies in [low, high] in magnitude:
    rounding (absolute, so largest at low), truncation at high, and the assignment's
    rounding."""
    if low <= 0:
        return math.inf
    rounding = product_error_bound(eps, ANCHOR, dtype) / low
    truncation = 2 * (eps * high) ** 4 / 30
    return rounding + truncation + 4 * UNIT_ROUNDOFF[dtype]
