"""Linear algebra blocks: transpose (Lemma 6), matrix products (Lemma 7), scale, sumsq, trace.
(rsqrt, which the linear algebra routines also call, is a sum of sigmoids:
vm/functions/sigmoid_sums.py.)

Products are `LinearizedProduct`s (vm/functions/products.py): two ±eps head pairs
with the coupling correction and Richardson extrapolation, accurate to about 1e-10 in
float64 (`product_error_bound`, `product_relative_bound`; tests assert them).

Moves (transposition, gathering operands) are exact hardmax heads.
"""

from __future__ import annotations

import numpy as np

from vm.functions.arithmetic import UNIT_ROUNDOFF
from vm.functions.base import (GATE_BIG, MOVE_TEMPERATURE, BlockContext, Domain, FunctionBlock,
                               Parameter, Shape, register)
from vm.functions.moves import gather_operand
from vm.functions.products import ANCHOR, MAX_BLOCK_SIZE, SpannedProduct

SCALE = Parameter("scale", 1e-5, "eps: scores are eps * a . b (the second head pair uses "
                  "2 eps); 1e-5 suits float64, about 1e-3 float32")
SPAN = Parameter("span", 100.0, "largest |entry| of the result (the score) the bound "
                 "covers")


def selection_fields(d: int, width: int) -> dict[str, np.ndarray]:
    """`ksel` (d rows): 0 in rows r of operand columns whose index k equals r, else -GATE_BIG;
    an offset that lets a ReLU pair keep exactly row k of a column."""
    ksel = np.full((d, width), -GATE_BIG)
    for role in range(3):
        for k in range(d):
            ksel[k, role * d + k] = 0.0
    return {"ksel": ksel}


def transposition_heads(ctx: BlockContext, layer: int, role: str, prefix: str) -> None:
    """d heads: every column gets operand `role`'s column j in rows `{prefix}{j}` (d each)."""
    d = ctx.d
    for j in range(d):
        queries = {ctx.row("one"): np.array([1.0, 1.0])}
        keys = {ctx.row("kone", j): np.array([1.0, 0.0]),
                ctx.row(f"is{role}"): np.array([0.0, 1.0])}
        values = {(ctx.row(f"{prefix}{j}", r), ctx.row("rd", r)): 1.0 for r in range(d)}
        ctx.add_head(layer, queries, keys, values, MOVE_TEMPERATURE, f"gather {role} column {j}")


def select_transposed(ctx: BlockContext, layer: int, prefix: str, target: str) -> None:
    """ReLU layer: column k's `target` row j = row k of the gathered column j, i.e. column k
    of the operand's transpose (exact: offset-gated pass-through)."""
    ffn = ctx.ffn(layer)
    for j in range(ctx.d):
        for r in range(ctx.d):
            ffn.copy(ctx.row(f"{prefix}{j}", r), ctx.row(target, j), gate=ctx.row("ksel", r))


def transposition_fields(d: int, prefix: str) -> list[tuple[str, int]]:
    return [(f"{prefix}{j}", d) for j in range(d)]


@register
class Transpose(FunctionBlock):
    name = "transpose"
    arity = 1
    summary = "C = A^T, exact moves"
    lemma = "Lemma 6"
    integer_preserving = True

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        return (a[1], a[0])

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return a.T

    def error_bound(self, dtype: str) -> float:
        return 0.0

    def constant_fields(self, d: int) -> dict[str, np.ndarray]:
        return selection_fields(d, 3 * d)

    def private_fields(self, d: int) -> list[tuple[str, int]]:
        return transposition_fields(d, "t")

    def depth(self, d: int) -> int:
        return 1

    def build(self, ctx: BlockContext) -> None:
        """Layer 1: every column gathers A's d columns; the ReLU pairs write row k of column j
        into result row j of C column k, gated by ksel and the result mask together."""
        transposition_heads(ctx, 0, "A", "t")
        ffn = ctx.ffn(0)
        for j in range(ctx.d):
            mask, target = ctx.row("resmask", j), ctx.row("res", j)
            for r in range(ctx.d):
                source, gate = ctx.row(f"t{j}", r), ctx.row("ksel", r)
                ffn.relu_into({source: 1.0, gate: 1.0, mask: 1.0}, target, 1.0)
                ffn.relu_into({source: -1.0, gate: 1.0, mask: 1.0}, target, -1.0)


class MatrixProduct(SpannedProduct):
    """Linearized-softmax product: C column j, row i = key_i . query_j, where key_i lives in
    A column i (rows `key_rows`) and query_j in C column j (rows `query_rows`)."""

    arity = 2
    parameters = (SCALE, ANCHOR, SPAN)
    max_anchor, max_scale = 30.0, 0.1

    def constant_fields(self, d: int) -> dict[str, np.ndarray]:
        return {**super().constant_fields(d), **selection_fields(d, 3 * d + 1)}

    def private_fields(self, d: int) -> list[tuple[str, int]]:
        return super().private_fields(d) + self.operand_fields(d)

    # -- what subclasses define ----------------------------------------------------
    def operand_fields(self, d: int) -> list[tuple[str, int]]:
        """Private rows the first layer fills."""
        return []

    def prepare(self, ctx: BlockContext) -> tuple[list[int], list[int]]:
        """Layer 1: put keys and queries in place; return (key rows, query rows), paired."""
        raise NotImplementedError

    # -- construction ----------------------------------------------------------------
    def build(self, ctx: BlockContext) -> None:
        key_rows, query_rows = self.prepare(ctx)
        basis = np.eye(len(key_rows))
        self.product_heads(ctx, 1, key_rows, {row: basis[n] for n, row in enumerate(query_rows)})
        self.emit_product(ctx, 1)


def _rows(ctx: BlockContext, name: str) -> list[int]:
    return [ctx.row(name, r) for r in range(ctx.d)]


@register
class MatmulTN(MatrixProduct):
    name = "matmul_tn"
    summary = "C = A^T B (the linearized softmax's natural product)"
    lemma = "Lemma 7"

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        if a[0] != b[0]:
            raise ValueError(f"A^T B needs A and B with the same number of rows, got "
                             f"{a[0]}x{a[1]} and {b[0]}x{b[1]}")
        return (a[1], b[1])

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return a.T @ b

    def operand_fields(self, d: int) -> list[tuple[str, int]]:
        return [("qb", d)]

    def prepare(self, ctx: BlockContext) -> tuple[list[int], list[int]]:
        gather_operand(ctx, 0, "B", "qb")
        return _rows(ctx, "rd"), _rows(ctx, "qb")


@register
class Matmul(MatrixProduct):
    name = "matmul"
    summary = "C = A B (A transposed by exact moves, then A^T^T B)"
    lemma = "Lemmas 6-7"

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        if a[1] != b[0]:
            raise ValueError(f"A B needs A's columns to match B's rows, got {a[0]}x{a[1]} "
                             f"and {b[0]}x{b[1]}")
        return (a[0], b[1])

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return a @ b

    def operand_fields(self, d: int) -> list[tuple[str, int]]:
        return [("kt", d), ("qb", d)] + transposition_fields(d, "ta")

    def prepare(self, ctx: BlockContext) -> tuple[list[int], list[int]]:
        transposition_heads(ctx, 0, "A", "ta")
        select_transposed(ctx, 0, "ta", "kt")
        gather_operand(ctx, 0, "B", "qb")
        return _rows(ctx, "kt"), _rows(ctx, "qb")


@register
class MatmulNT(MatrixProduct):
    name = "matmul_nt"
    summary = "C = A B^T (both operands transposed by exact moves); u v^T for vectors"
    lemma = "Lemmas 6-7"

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        if a[1] != b[1]:
            raise ValueError(f"A B^T needs A and B with the same number of columns, got "
                             f"{a[0]}x{a[1]} and {b[0]}x{b[1]}")
        return (a[0], b[0])

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return a @ b.T

    def operand_fields(self, d: int) -> list[tuple[str, int]]:
        return ([("kt", d), ("qb", d)] + transposition_fields(d, "ta")
                + transposition_fields(d, "tb"))

    def prepare(self, ctx: BlockContext) -> tuple[list[int], list[int]]:
        transposition_heads(ctx, 0, "A", "ta")
        select_transposed(ctx, 0, "ta", "kt")
        transposition_heads(ctx, 0, "B", "tb")
        select_transposed(ctx, 0, "tb", "qb")
        return _rows(ctx, "kt"), _rows(ctx, "qb")


@register
class Scale(MatrixProduct):
    name = "scale"
    summary = "C = s A for a scalar cell s (keys s e_i, queries A's columns)"
    lemma = "Lemma 7"

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        if b != (1, 1):
            raise ValueError(f"scale's second operand is a scalar (1x1), got {b[0]}x{b[1]}")
        return a

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return a * b[0, 0]

    def operand_fields(self, d: int) -> list[tuple[str, int]]:
        return [("kt", d), ("qb", d), ("sv", 1)]

    def prepare(self, ctx: BlockContext) -> tuple[list[int], list[int]]:
        """Every column reads s (B column 0, row 0); column k keeps s in key row k only."""
        queries = {ctx.row("one"): np.array([1.0, 1.0])}
        keys = {ctx.row("kone", 0): np.array([1.0, 0.0]), ctx.row("isB"): np.array([0.0, 1.0])}
        ctx.add_head(0, queries, keys, {(ctx.row("sv"), ctx.row("rd", 0)): 1.0},
                     MOVE_TEMPERATURE, "gather the scalar s")
        ffn = ctx.ffn(0)
        for r in range(ctx.d):
            ffn.copy(ctx.row("sv"), ctx.row("kt", r), gate=ctx.row("ksel", r))
        gather_operand(ctx, 0, "A", "qb")
        return _rows(ctx, "kt"), _rows(ctx, "qb")


@register
class SumSquares(MatrixProduct):
    name = "sumsq"
    arity = 1
    summary = "c = sum of squares of A's entries (||A||_F^2): one score vec(A) . vec(A)"
    lemma = "Lemma 7"

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        return (1, 1)

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return np.array([[float(np.sum(a * a))]])

    def operand_fields(self, d: int) -> list[tuple[str, int]]:
        return transposition_fields(d, "flat") + [("kflat", d * d)]

    def prepare(self, ctx: BlockContext) -> tuple[list[int], list[int]]:
        """Every column gathers all of A (d^2 rows): C columns query with vec(A); A columns
        copy it into key rows gated by gA, so the anchor column's key stays 0 there and every
        A-column score is ||A||_F^2."""
        transposition_heads(ctx, 0, "A", "flat")
        rows = [ctx.row(f"flat{j}", r) for j in range(ctx.d) for r in range(ctx.d)]
        keys = [ctx.row("kflat", n) for n in range(ctx.d * ctx.d)]
        ffn = ctx.ffn(0)
        for source, target in zip(rows, keys):
            ffn.copy(source, target, gate=ctx.row("gA"))
        return keys, rows


@register
class Trace(FunctionBlock):
    name = "trace"
    arity = 1
    summary = "c = sum of A's diagonal entries: an exact row selection, then one averaging head"
    lemma = "Lemma 6 (moves)"
    span = 100.0

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        if a[0] != a[1]:
            raise ValueError(f"trace needs a square matrix, got {a[0]}x{a[1]}")
        return (1, 1)

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        return np.array([[float(np.trace(a))]])

    def domain(self) -> Domain:
        return Domain(f"|a_ij| <= {self.span:g}", -self.span, self.span)

    def error_bound(self, dtype: str) -> float:
        """Weights 1/d and values d * a_kk rounded once each, a sum of up to 16 terms of size
        <= span: 20 roundings of 16 span."""
        return 20 * UNIT_ROUNDOFF[dtype] * MAX_BLOCK_SIZE * self.span

    def constant_fields(self, d: int) -> dict[str, np.ndarray]:
        return selection_fields(d, 3 * d)

    def private_fields(self, d: int) -> list[tuple[str, int]]:
        return [("dg", 1), ("diag", 1)]

    def depth(self, d: int) -> int:
        return 2

    def build(self, ctx: BlockContext) -> None:
        """Layer 1 (ReLU only): A's column k keeps its row k in `dg`. Layer 2: one head whose
        queries weigh the d A columns equally (1/d each, others exactly 0) with value d * dg;
        its ReLU layer writes the sum to result row 0."""
        ffn = ctx.ffn(0)
        for r in range(ctx.d):
            ffn.copy(ctx.row("rd", r), ctx.row("dg"), gate=ctx.row("ksel", r))
        ctx.add_head(1, {ctx.row("one"): np.array([1.0])}, {ctx.row("isA"): np.array([1.0])},
                     {(ctx.row("diag"), ctx.row("dg")): float(ctx.d)}, MOVE_TEMPERATURE,
                     "average of the diagonal entries")
        ctx.emit_result(1, 0, {ctx.row("diag"): 1.0})
