"""attention_oracle(Q, KV): one (query chunk, key chunk) pair of the chunked attention.

The small transformer of "Simulating Large Transformers with Small Ones" as a
FLEQ function: a real softmax attention head inside the block's columns, with
hardcoded weights; the chunk's queries, keys and values are data (operands).

Packing (h = `dim`, M = `length`; columns are tokens):

  A  (h x M)     column i = q_i, the query of token i of the query chunk
  B  (2h x M)    column j = [k_j; v_j]: key in rows 0..h-1, value in rows h..2h-1
  C  (h+M x M)   column i: rows 0..h-1  U_i = sum_j e^(q_i . k_j) v_j
                           row h + i    A_i = sum_j e^(q_i . k_j)  (zero elsewhere:
                                        the normalizers form a diagonal M x M block)

The normalizer comes from the paper's synthetic token of known score (Lemma
3.1): one extra key column whose score is the constant C (`anchor`) for every
query and whose value is 0. The softmax over the M keys and that token gives
key j the weight e^(s_ij) / (e^C + A_i); the value matrix carries e^C, so the
head returns U_i f_i and A_i f_i with f_i = 1 / (1 + A_i e^-C), no division
needed. f_i differs from 1 by at most A_i e^-C (1.4e-13 for |q.k| <= 9,
M = 4, C = 40); the diagonal layout lets the routine divide by A with matrix
products only (vm/routines/chunked.py).

  layer 1  C column i gathers A column i (the query; an exact move)
  layer 2  the attention head over B's M key columns and the synthetic token;
           ReLU: U to rows 0..h-1, A_i to row h + i of column i (exact
           pass-through, offset-gated, masked to the instruction's shape)

Rounding: the softmax subtracts its maximum, C, so each weight e^(s - C) is
resolved only to ulp(C + |s|) / 2, as in the linearized products.
"""

from __future__ import annotations

import math

import numpy as np

from vm.common.errors import InputError
from vm.functions.arithmetic import UNIT_ROUNDOFF
from vm.functions.base import (GATE_BIG, BlockContext, Domain, FunctionBlock, Parameter,
                               Shape, register)
from vm.functions.moves import gather_operand
from vm.functions.products import ulp

SPAN = 1.5
"""Largest |entry| of the operands on which the documented bound holds."""
MAX_ANCHOR = 60.0
"""e^C is a value coefficient; e^60 keeps it far from float32's overflow."""


@register
class AttentionOracle(FunctionBlock):
    name = "attention_oracle"
    arity = 2
    summary = ("C = [sum_j e^(q_i.k_j) v_j ; diag(sum_j e^(q_i.k_j))]: one chunk pair of "
               "attention, normalizer by a synthetic token of known score")
    lemma = "Lemma 3.1 of Yu-Alman (the oracle); Eq. (1a) head"
    parameters = (Parameter("dim", 1, "h: dimension of queries, keys and values"),
                  Parameter("length", 1, "M: tokens per chunk (query and key chunks)"),
                  Parameter("anchor", 40.0, "C: the synthetic token's known score; the "
                            "normalizer is off by a factor 1/(1 + A e^-C), rounding ~ulp(C)"))

    def __init__(self, **values: float) -> None:
        super().__init__(**values)
        for key in ("dim", "length"):
            value = self.values[key]
            if value != int(value) or not 1 <= value <= 8:
                raise ValueError(f"{self.name}.{key} must be an integer in 1..8")
        if not 0 < self.values["anchor"] <= MAX_ANCHOR:
            raise ValueError(f"{self.name}.anchor must be in (0, {MAX_ANCHOR:g}]")

    @property
    def dim(self) -> int:
        return int(self.values["dim"])

    @property
    def length(self) -> int:
        return int(self.values["length"])

    # -- what the assembler needs ---------------------------------------------------
    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        h, m = self.dim, self.length
        if a != (h, m) or b != (2 * h, m):
            raise ValueError(f"takes a query chunk {h}x{m} and a key/value chunk {2 * h}x{m} "
                             f"(dim={h}, length={m}), got {a[0]}x{a[1]} and {b[0]}x{b[1]}")
        return (h + m, m)

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        h = self.dim
        weights = np.exp(a.T @ b[:h])  # weights[i, j] = e^(q_i . k_j)
        normalizers = weights.sum(axis=1)
        return np.vstack([b[h:] @ weights.T, np.diag(normalizers)])

    def domain(self) -> Domain:
        return Domain(f"|entries| <= {SPAN:g}", -SPAN, SPAN)

    def largest_normalizer(self) -> float:
        """A_i on the domain: M e^(h SPAN^2)."""
        return self.length * math.exp(self.dim * SPAN ** 2)

    def rounding(self, dtype: str) -> float:
        """Relative rounding of a weight: the score s - C to ulp(C + |s|) / 2, the dot product
        (h terms of size up to |s|), exp, the normalization, the value coefficient and the sum
        over M keys; a factor 2 of margin."""
        u, smax = UNIT_ROUNDOFF[dtype], self.dim * SPAN ** 2
        return 2 * (ulp(self.values["anchor"] + smax, dtype) / 2 +
                    (self.dim * smax + self.length + 8) * u)

    def column_bound(self, dtype: str, normalizer: np.ndarray | float) -> np.ndarray | float:
        """Bound on every entry of column i, whose exact normalizer is A_i: the relative
        error (A_i e^-C + rounding) of the weights times sum_j e^(s_ij) |v_j| <= A_i SPAN."""
        normalizer = np.abs(normalizer)
        relative = normalizer * math.exp(-self.values["anchor"]) + self.rounding(dtype)
        return relative * normalizer * SPAN

    def error_bound(self, dtype: str) -> float:
        """Absolute, on the whole domain (A_i at its largest); `bound_at` is per column."""
        return float(self.column_bound(dtype, self.largest_normalizer()))

    def bound_at(self, dtype: str, result: np.ndarray | float) -> np.ndarray | float:
        """Per column of an exact result (h+M) x M: the column bound at its normalizer A_i
        (the diagonal entry); other shapes get the domain-wide bound; inf where the result
        is infinite (NaN is refused)."""
        result = np.asarray(self._magnitude(result), dtype=float)
        h, m = self.dim, self.length
        if result.shape != (h + m, m):
            bound = np.full(result.shape, self.error_bound(dtype))
        else:
            normalizers = np.diag(result[h:])
            bound = np.broadcast_to(self.column_bound(dtype, normalizers), result.shape)
        return np.where(np.isinf(result), np.inf, bound)

    # -- what the machine builder needs -----------------------------------------------
    def extra_columns(self, d: int) -> int:
        return 1

    def _check_fits(self, d: int) -> None:
        h, m = self.dim, self.length
        if 2 * h > d or h + m > d:
            raise InputError(f"{self.name} with dim={h}, length={m} needs a block size d >= "
                             f"{max(2 * h, h + m)}, got d={d}")

    def constant_fields(self, d: int) -> dict[str, np.ndarray]:
        """`synth`: 1 in the synthetic token's column; `kvkeys`: 0 in the M key columns and
        the synthetic column, -GATE_BIG elsewhere; `dsel` row k: 0 only in C column k."""
        self._check_fits(d)
        width, synthetic = 3 * d + 1, 3 * d
        synth = np.zeros((1, width))
        synth[0, synthetic] = 1.0
        kvkeys = np.full((1, width), -GATE_BIG)
        kvkeys[0, d:d + self.length] = 0.0
        kvkeys[0, synthetic] = 0.0
        dsel = np.full((self.length, width), -GATE_BIG)
        for k in range(self.length):
            dsel[k, 2 * d + k] = 0.0
        return {"synth": synth, "kvkeys": kvkeys, "dsel": dsel}

    def private_fields(self, d: int) -> list[tuple[str, int]]:
        return [("q", d), ("u", self.dim), ("z", 1)]

    def depth(self, d: int) -> int:
        return 2

    def build(self, ctx: BlockContext) -> None:
        gather_operand(ctx, 0, "A", "q")
        self._attention_head(ctx)
        self._emit(ctx)

    def _attention_head(self, ctx: BlockContext) -> None:
        """Scores q_i . k_j on the key columns, C on the synthetic token, -GATE_BIG elsewhere;
        values e^C [v_j; 1] from key columns (the synthetic token's value is 0)."""
        h, anchor = self.dim, self.values["anchor"]
        dims = h + 2
        basis = np.eye(dims)
        queries = {ctx.row("q", r): basis[r] for r in range(h)}
        queries[ctx.row("one")] = basis[h] + basis[h + 1]
        keys = {ctx.row("rd", r): basis[r] for r in range(h)}
        keys[ctx.row("synth")] = anchor * basis[h]
        keys[ctx.row("kvkeys")] = basis[h + 1]
        big = math.exp(anchor)
        values = {(ctx.row("u", r), ctx.row("rd", h + r)): big for r in range(h)}
        values[(ctx.row("z"), ctx.row("isB"))] = big
        ctx.add_head(1, queries, keys, values, 1.0, "softmax over the key chunk and the "
                     "synthetic token")

    def _emit(self, ctx: BlockContext) -> None:
        h = self.dim
        for r in range(h):
            ctx.emit_result(1, r, {ctx.row("u", r): 1.0})
        ffn, z = ctx.ffn(1), ctx.row("z")
        for k in range(self.length):
            row = h + k
            offsets = {ctx.row("resmask", row): 1.0, ctx.row("dsel", k): 1.0}
            target = ctx.layout.row("res", row)
            ffn.relu_into({z: 1.0, **offsets}, target, 1.0)
            ffn.relu_into({z: -1.0, **offsets}, target, -1.0)
