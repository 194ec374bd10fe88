"""Products by linearizing the softmax (Lemma 7): mul (Corollary 2), percentage (Corollary 3),
and the head-pair construction every product block shares (vm/functions/linalg.py).

A head whose query column j holds eps * q_j and whose keys are the A columns' k_i scores
eps * k_i . q_j; one more key, the anchor, scores C. For C large the softmax weight of key
i is e^(eps s_i) / Z, Z = e^C + sum_k e^(eps s_k): with value e^C / eps the head returns
e^(eps s_i) e^C / (eps Z). A second head with -eps returns the mirror image, and half their
difference is about s_i + eps^2 s_i^3 / 6: the product. Two refinements make it accurate:

- Coupling correction. The keys share the denominator Z. To first order the pair returns
  v_i = (2 e^C / D)(s_i - S / D), D = e^C + d, S = sum_k s_k (a scalar product has one
  active key and d - 1 keys scoring exactly 0); since sum_i v_i = (2 e^C / D) S e^C / D,
  s_i = (D / 2e^C)(v_i + e^-C sum_k v_k) exactly to first order: a fixed linear map on the
  d rows of one column, applied by the ReLU layer that writes the result.
- Richardson extrapolation. The corrected pair is an even function of eps,
  s + c2 eps^2 + c4 eps^4 + ..., coupling terms included; a second pair at 2 eps and
  (4 f(eps) - f(2 eps)) / 3 remove every eps^2 term, leaving about eps^4 s^5 / 30.

What remains is rounding: the softmax subtracts its max, C, from every score, so eps s is
resolved only to ulp(C) / 2 and the result to about (ulp(C) / 2 + 4 u) / eps for unit
roundoff u. A small C (4) is therefore more precise, and eps trades truncation against
rounding: mul (|s| <= 20) balances them at eps = 1e-4 in float64; float32 (ulp(4) = 4.8e-7)
needs eps near 5e-3 (`--param mul.scale=5e-3`).
"""

from __future__ import annotations

import math

import numpy as np

from vm.blocks.ffn import Form
from vm.functions.arithmetic import UNIT_ROUNDOFF
from vm.functions.base import (GATE_BIG, MOVE_TEMPERATURE, BlockContext, Domain, FunctionBlock,
                               Parameter, Shape, register)
from vm.functions.moves import gather_operand

SCALE = Parameter("scale", 1e-4, "eps: scores are eps * a * b (the second head pair uses "
                  "2 eps); 1e-4 suits float64 at |a * b| <= 20, 5e-3 float32")
ANCHOR = Parameter("anchor", 4.0, "C: score of the anchor key; the softmax resolves scores to "
                   "ulp(C), so a small C is more precise")
MAX_ANCHOR = 60.0
"""e^C is a value coefficient; beyond e^60 it would overflow float32 with 1/eps."""
MAX_BLOCK_SIZE = 16
"""Largest d the bounds are stated for (the assembler's limit)."""
RICHARDSON = ((1.0, 4 / 3, "p1", "m1"), (2.0, -1 / 3, "p2", "m2"))
"""(eps multiple, extrapolation weight, plus rows, minus rows) of the two head pairs."""


def ulp(value: float, dtype: str) -> float:
    """Spacing of floats of `dtype` at `value`."""
    return 2 * UNIT_ROUNDOFF[dtype] * 2.0 ** math.floor(math.log2(max(abs(value), 1e-300)))


def product_error_bound(scale: float, anchor: float, dtype: str) -> float:
    """Absolute part: rounding of the scores at ulp(C)/2 and of the weights (4u), divided by
    eps, through the Richardson weights (4/3 + 1/6) and the coupling map (1 + d e^-C), with a
    factor 2 of margin."""
    u = UNIT_ROUNDOFF[dtype]
    per_pair = (ulp(anchor, dtype) / 2 + 4 * u) / scale
    coupling = 1 + MAX_BLOCK_SIZE * math.exp(-anchor)
    return 2 * 1.5 * 2 * per_pair * coupling


def product_relative_bound(scale: float, span: float, dtype: str) -> float:
    """Relative part: the eps^4 truncation at the edge of the span (twice the leading term,
    which also covers the eps^4 coupling terms: for a scalar at C = 4 the exact coefficient is
    0.50-0.60 of it for d = 1..16, and within ±1 of it for C in [0.1, 30]) and the rounding of
    the linear map."""
    try:
        truncation = 2 * (scale * span) ** 4 / 30
    except OverflowError:  # a span of 1e300 has no bound: inf, not a traceback in inspect
        truncation = math.inf
    return truncation + 16 * UNIT_ROUNDOFF[dtype]


class LinearizedProduct(FunctionBlock):
    """Shared construction: the anchor column, two ±eps head pairs (at eps and 2 eps) and the
    ReLU layer that decouples and extrapolates them into the result."""

    parameters = (SCALE, ANCHOR)
    float32_scale = 1e-3
    """eps for float32 runs: scores resolve only to ulp(C) there, so a small eps amplifies
    rounding (`vm.functions.dtype_parameters` applies it)."""

    max_anchor, max_scale = MAX_ANCHOR, 1.0
    """The largest anchor and eps the block accepts (one check, so a subclass's tighter
    limits are the ones its messages name: matmul.anchor=0 said 'in (0, 60.0]', and 45
    then 'in (0, 30]')."""

    def __init__(self, **values: float) -> None:
        super().__init__(**values)
        if not 0 < self.values["anchor"] <= self.max_anchor:
            raise ValueError(f"{self.name}.anchor must be in (0, {self.max_anchor:g}]")
        if not 0 < self.values["scale"] <= self.max_scale:
            raise ValueError(f"{self.name}.scale must be in (0, {self.max_scale:g}]")

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
        return [(name, d) for _, _, plus, minus in RICHARDSON for name in (plus, minus)]

    def product_heads(self, ctx: BlockContext, layer: int, key_rows: list[int],
                      query: dict[int, np.ndarray]) -> None:
        """Four heads: rows p1/m1 (p2/m2) i of each C column j get e^(±eps' k_i . q_j) e^C /
        (eps' Z), eps' = eps (2 eps), where key k_i is A column i's `key_rows` and query q_j
        is given as {source row: vector over the key dims} (unscaled)."""
        eps, anchor = self.values["scale"], self.values["anchor"]
        dims = len(key_rows) + 2  # the key dims, the anchor dim, the key-restriction dim
        basis = np.eye(dims)
        one = ctx.row("one")
        for factor, _, plus, minus in RICHARDSON:
            for sign, target in ((1.0, plus), (-1.0, minus)):
                queries = {row: np.concatenate([sign * factor * eps * vector, [0.0, 0.0]])
                           for row, vector in query.items()}
                queries[one] = queries.get(one, np.zeros(dims)) + basis[-2] + basis[-1]
                keys = {row: basis[n] for n, row in enumerate(key_rows)}
                keys[ctx.row("anchor")] = anchor * basis[-2]
                keys[ctx.row("pkeys")] = basis[-1]
                value = math.exp(anchor) / (factor * eps)
                values = {(ctx.row(target, i), ctx.row("kone", i)): value
                          for i in range(ctx.d)}
                ctx.add_head(layer, queries, keys, values, 1.0,
                             f"linearized softmax, {sign * factor:+g} eps")

    def decoupled_form(self, ctx: BlockContext, i: int) -> Form:
        """Product i as a linear form of the pair rows: the sum over both pairs of Richardson
        weight * (D / 2e^C) * (diff_i + e^-C sum_k diff_k), diff = plus - minus."""
        big, d = math.exp(self.values["anchor"]), ctx.d
        gain = (big + d) / (2 * big)
        form: Form = {}
        for _, weight, plus, minus in RICHARDSON:
            for k in range(d):
                c = weight * gain * ((1.0 if k == i else 0.0) + 1 / big)
                form[ctx.row(plus, k)] = form.get(ctx.row(plus, k), 0.0) + c
                form[ctx.row(minus, k)] = form.get(ctx.row(minus, k), 0.0) - c
        return form

    def emit_product(self, ctx: BlockContext, layer: int) -> None:
        """Result row i of every C column = `decoupled_form` i."""
        for i in range(ctx.d):
            ctx.emit_result(layer, i, self.decoupled_form(ctx, i))

    def error_bound(self, dtype: str) -> float:
        return product_error_bound(self.values["scale"], self.values["anchor"], dtype)


SPAN = Parameter("span", 20.0, "largest |result| (the score) the bound covers")


class SpannedProduct(LinearizedProduct):
    """A product whose bound holds for |result| <= span: error_bound (rounding) plus
    relative_error_bound (truncation at the span's edge) times |result|; two layers."""

    parameters = (SCALE, ANCHOR, SPAN)

    def __init__(self, **values: float) -> None:
        super().__init__(**values)
        if not self.values["span"] > 0:
            raise ValueError(f"{self.name}.span must be positive")

    def domain(self) -> Domain:
        span = self.values["span"]
        return Domain(f"|result| <= {span:g}", -span, span, applies_to="result",
                      widen=f"--param {self.name}.span=N")

    def relative_error_bound(self, dtype: str) -> float:
        return product_relative_bound(self.values["scale"], self.values["span"], dtype)

    def depth(self, d: int) -> int:
        return 2


LEVEL_RATIO = 100.0
"""Each level of mul uses eps / LEVEL_RATIO of the one before and takes over at LEVEL_RATIO
times its threshold."""
FIRST_THRESHOLD = 10.0
"""|a b| up to which mul's first level (eps = scale) gives the result."""
LAST_LEVEL_REACH = 1e-2
"""Largest eps |a b| of mul's last level at |a b| = span (truncation 2 (1e-2)^4 / 30)."""
LEVELED_ANCHOR = 10.0
"""Largest anchor of a mul with several levels: a level past its range holds about
e^anchor / eps, which must stay far below the gate offset (2^60); at anchor 20 float32 runs
were measured far outside the bound."""
SWITCH_SHARPNESS = 1500.0
"""Score slope of a level switch times its threshold T: weights are exactly one-hot outside
[T (1 - 40 / 1500), T (1 + 750 / 1500)], and both levels are accurate inside."""


@register
class Mul(SpannedProduct):
    """Products whose eps fits their magnitude: level j computes the product at
    eps_j = scale / 100^j (one key, A's column 0, so no coupling), as many levels as take
    eps * |a b| below 1e-2 at the span; a softmax over the levels then picks level j for
    |a b| between thresholds T_(j-1) and T_j = 10 * 100^j, deciding each switch i by level
    i + 1's |a b| (accurate near T_i, and huge where that level is past its range). Small products keep the fine eps's accuracy, large ones get an eps
    small enough for their truncation, and the rounding ~ulp(4) / eps_j stays relative."""

    name = "mul"
    arity = 2
    summary = "c = a * b for scalars, by the linearized softmax at an eps chosen by |a b|"
    lemma = "Lemma 7, Corollary 2"
    float32_scale = 5e-3
    parameters = (Parameter("scale", 1e-4, "eps of the first level (|a b| < 10; level j "
                            "uses eps / 100^j); 1e-4 suits float64, 5e-3 float32"),
                  ANCHOR, Parameter("span", 1e6, "largest |result| the bound covers "
                                           "(more levels of smaller eps for a larger span)"))

    def __init__(self, **values: float) -> None:
        super().__init__(**values)
        coarse = self.levels[:-1]
        anchor = self.values["anchor"]
        if coarse and anchor > LEVELED_ANCHOR:
            raise ValueError(f"mul.anchor={anchor:g} is too large for {len(self.levels)} "
                             f"levels (at most {LEVELED_ANCHOR:g}): a level past its range "
                             "reaches e^anchor / eps")
        if coarse and math.exp(anchor) / min(coarse) > GATE_BIG / 2 ** 10:
            raise ValueError(f"mul.span={self.values['span']:g} needs {len(self.levels)} "
                             f"levels, down to eps {min(coarse):.3g}, where a level past its "
                             f"range reaches e^anchor / eps, above 2^50: lower mul.span (or "
                             "mul.anchor)")

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        if a != (1, 1) or b != (1, 1):
            raise ValueError("mul multiplies scalars (use matmul for matrices)")
        return (1, 1)

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return a * b

    @property
    def levels(self) -> list[float]:
        """eps of each level."""
        eps, span = self.values["scale"], self.values["span"]
        levels = [eps]
        while levels[-1] * span > LAST_LEVEL_REACH and levels[-1] > 1e-15:
            levels.append(levels[-1] / LEVEL_RATIO)
        return levels

    def thresholds(self) -> list[float]:
        return [FIRST_THRESHOLD * LEVEL_RATIO ** j for j in range(len(self.levels) - 1)]

    def error_bound(self, dtype: str) -> float:
        """The first level's rounding (`product_error_bound`)."""
        return product_error_bound(self.values["scale"], self.values["anchor"], dtype)

    def relative_error_bound(self, dtype: str) -> float:
        """Each later level's rounding over the low end of its range, the largest truncation
        2 (eps_j s)^4 / 30 at the top of a level's range, and the roundings of the switch."""
        levels, thresholds = self.levels, self.thresholds()
        tops = [t * (1 + 750 / SWITCH_SHARPNESS) for t in thresholds] + [self.values["span"]]
        truncation = max(2 * (eps * top) ** 4 / 30 for eps, top in zip(levels, tops))
        rounding = [product_error_bound(eps, self.values["anchor"], dtype)
                    / (low * (1 - 40 / SWITCH_SHARPNESS))
                    for eps, low in zip(levels[1:], thresholds)]
        return truncation + max(rounding, default=0.0) + 16 * UNIT_ROUNDOFF[dtype]

    def bound_at(self, dtype: str, result: np.ndarray | float) -> np.ndarray | float:
        """Below the first switch only the first level contributes: its rounding plus its
        truncation at the switch's top; above it, `error_bound` + `relative_error_bound`
        |result|."""
        size = self._magnitude(result)
        if len(self.levels) == 1:
            return super().bound_at(dtype, result)
        top = FIRST_THRESHOLD * (1 + 750 / SWITCH_SHARPNESS)
        first = (self.error_bound(dtype)
                 + (2 * (self.values["scale"] * top) ** 4 / 30 + 16 * UNIT_ROUNDOFF[dtype]) * size)
        above = super().bound_at(dtype, result)
        bound = np.where(size < FIRST_THRESHOLD * (1 - 40 / SWITCH_SHARPNESS), first, above)
        return float(bound) if np.ndim(result) == 0 else bound

    def depth(self, d: int) -> int:
        return 2 if len(self.levels) == 1 else 4

    def extra_columns(self, d: int) -> int:
        return 1 + len(self.levels)

    def private_fields(self, d: int) -> list[tuple[str, int]]:
        count = len(self.levels)
        pairs = [(f"{name}_{j}", 1) for j in range(count)
                 for _, _, plus, minus in RICHARDSON for name in (plus, minus)]
        return pairs + [("qb", d), ("cand", count), ("cv", count), ("mag", max(count - 1, 1)),
                        ("val", 1), ("out", 1)]

    def constant_fields(self, d: int) -> dict[str, np.ndarray]:
        """anchor; `akey` (only A's column 0 and the anchor are product keys) and `amark` (A's
        column 0); `csrc` (C's column 0); the level columns' `isF`, `fsel` (level j's
        column), `fkeys`, and the switch scores: `fa` (row i: switch i's slope where it is
        passed) times |a b| from level i + 1, plus `fb`."""
        count = len(self.levels)
        width = 3 * d + 1 + count
        anchor_column, first = 3 * d, 3 * d + 1
        fields = {name: np.zeros((1, width)) for name in ("anchor", "amark", "csrc", "isF",
                                                           "fb")}
        fields["fa"] = np.zeros((max(count - 1, 1), width))
        fields["anchor"][0, anchor_column] = 1.0
        fields["amark"][0, 0] = 1.0
        fields["csrc"][0, 2 * d] = 1.0
        fields["akey"] = np.full((1, width), -GATE_BIG)
        fields["akey"][0, [0, anchor_column]] = 0.0
        fields["fkeys"] = np.full((1, width), -GATE_BIG)
        fields["fsel"] = np.full((count, width), -GATE_BIG)
        for j in range(count):
            column = first + j
            fields["isF"][0, column] = 1.0
            fields["fkeys"][0, column] = 0.0
            fields["fsel"][j, column] = 0.0
            fields["fb"][0, column] = -SWITCH_SHARPNESS * j
            for i in range(j):
                fields["fa"][i, column] = SWITCH_SHARPNESS / (FIRST_THRESHOLD * LEVEL_RATIO ** i)
        return fields

    def build(self, ctx: BlockContext) -> None:
        """Layer 1 gathers b into C's query rows; layer 2: every level's two head pairs, the
        candidates and |a b| from the last; then the level columns take the candidates and
        C's column attends to the one its |a b| selects."""
        gather_operand(ctx, 0, "B", "qb")
        count = len(self.levels)
        for j, eps in enumerate(self.levels):
            self._level_heads(ctx, j, eps)
        ffn = ctx.ffn(1)
        for j in range(count):
            form = self._level_form(ctx, j)
            ffn.relu_into(form, ctx.row("cand", j), 1.0)
            ffn.relu_into({r: -c for r, c in form.items()}, ctx.row("cand", j), -1.0)
        if count == 1:
            ctx.emit_result(1, 0, self._level_form(ctx, 0))
            return
        for i in range(count - 1):
            above = self._level_form(ctx, i + 1)
            ffn.relu_into(above, ctx.row("mag", i), 1.0)
            ffn.relu_into({r: -c for r, c in above.items()}, ctx.row("mag", i), 1.0)
        values = {(ctx.row("cv", j), ctx.row("cand", j)): 1.0 for j in range(count)}
        ctx.add_head(2, {ctx.row("isF"): np.array([1.0])}, {ctx.row("csrc"): np.array([1.0])},
                     values, MOVE_TEMPERATURE, "level columns take the candidates")
        for j in range(count):
            ctx.ffn(2).copy(ctx.row("cv", j), ctx.row("val"), gate=ctx.row("fsel", j))
        basis = np.eye(count + 1)
        queries = {ctx.row("mag", i): basis[i] for i in range(count - 1)}
        queries[ctx.row("one")] = basis[count - 1] + basis[count]
        keys = {ctx.row("fa", i): basis[i] for i in range(count - 1)}
        keys[ctx.row("fb")] = basis[count - 1]
        keys[ctx.row("fkeys")] = basis[count]
        ctx.add_head(3, queries, keys, {(ctx.row("out"), ctx.row("val")): 1.0}, 1.0,
                     "switch between levels")
        ctx.emit_result(3, 0, {ctx.row("out"): 1.0})

    def _level_heads(self, ctx: BlockContext, j: int, eps: float) -> None:
        anchor = self.values["anchor"]
        basis = np.eye(ctx.d + 2)
        for factor, _, plus, minus in RICHARDSON:
            for sign, target in ((1.0, plus), (-1.0, minus)):
                queries = {ctx.row("qb", r): sign * factor * eps * basis[r]
                           for r in range(ctx.d)}
                queries[ctx.row("one")] = basis[ctx.d] + basis[ctx.d + 1]
                keys = {ctx.row("rd", r): basis[r] for r in range(ctx.d)}
                keys[ctx.row("anchor")] = anchor * basis[ctx.d]
                keys[ctx.row("akey")] = basis[ctx.d + 1]
                values = {(ctx.row(f"{target}_{j}"), ctx.row("amark")):
                          math.exp(anchor) / (factor * eps)}
                ctx.add_head(1, queries, keys, values, 1.0,
                             f"level {j}: linearized softmax, {sign * factor:+g} eps")

    def _level_form(self, ctx: BlockContext, j: int) -> Form:
        """One active key: the pair difference times D^2 / (2 e^2C), D = e^C + 1, with the
        Richardson weights."""
        big = math.exp(self.values["anchor"])
        gain = (big + 1) ** 2 / (2 * big ** 2)
        form: Form = {}
        for _, weight, plus, minus in RICHARDSON:
            form[ctx.row(f"{plus}_{j}")] = weight * gain
            form[ctx.row(f"{minus}_{j}")] = -weight * gain
        return form


@register
class Percentage(SpannedProduct):
    """Its span bounds the operand a (the result is 0.01 a), and it needs one layer."""

    name = "percentage"
    arity = 1
    summary = "c = a / 100 for scalars, a product with the constant 0.01 (Corollary 3)"
    lemma = "Lemma 7, Corollary 3"
    factor = 0.01
    float32_scale = 0.1
    parameters = (Parameter("scale", 1e-3, "eps: scores are eps * 0.01 * a (the second head "
                            "pair uses 2 eps); 1e-3 suits float64, 1e-1 float32"),
                  ANCHOR,
                  Parameter("span", 100.0, "largest |a| the bound covers"))

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        if a != (1, 1):
            raise ValueError("percentage takes a scalar")
        return (1, 1)

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return a * self.factor

    def domain(self) -> Domain:
        span = self.values["span"]
        return Domain(f"|a| <= {span:g}", -span, span, widen=f"--param {self.name}.span=N")

    def relative_error_bound(self, dtype: str) -> float:
        return product_relative_bound(self.values["scale"], self.values["span"] * self.factor,
                                      dtype)

    def depth(self, d: int) -> int:
        return 1

    def build(self, ctx: BlockContext) -> None:
        """One layer: a is A column 0's key, the query is the constant 0.01 e_0 (row `one`)."""
        constant = np.zeros(ctx.d)
        constant[0] = self.factor
        self.product_heads(ctx, 0, [ctx.row("rd", r) for r in range(ctx.d)],
                           {ctx.row("one"): constant})
        self.emit_product(ctx, 0)
