"""Exact data movement inside a block: hardmax heads between block columns.

Keys and queries use the `kone` one-hot of a column's index k within its
operand plus a role bonus, so column C_k finds A_k (or B_k) with a score
margin of 1 and MOVE_TEMPERATURE makes every other weight exactly 0.
"""

from __future__ import annotations

import numpy as np

from vm.functions.base import MOVE_TEMPERATURE, BlockContext


def gather_operand(ctx: BlockContext, layer: int, role: str, target: str) -> None:
    """Every column with a `kone` gets, in `target` (d rows), the `rd` rows of the same-k
    column of operand `role` ("A" or "B"). Only C columns use what they get."""
    d = ctx.d
    queries = {ctx.row("kone", k): np.eye(d + 1)[k] for k in range(d)}
    queries[ctx.row("one")] = np.eye(d + 1)[d]
    keys = {ctx.row("kone", k): np.eye(d + 1)[k] for k in range(d)}
    keys[ctx.row(f"is{role}")] = np.eye(d + 1)[d]
    values = {(ctx.row(target, r), ctx.row("rd", r)): 1.0 for r in range(d)}
    ctx.add_head(layer, queries, keys, values, MOVE_TEMPERATURE, f"C gathers {role}")


def gather_entries(ctx: BlockContext, layer: int, role: str, staging: str, select: str,
                   targets: list[int]) -> None:
    """Every entry column V_{r,k} (private fields `vk`, one-hot of k, and `select`, 0 in
    row r's columns and -GATE_BIG elsewhere) gets entry (r, k) of operand `role` into row
    targets[r]: a head gathers the operand's column k into `staging` (d rows), and the ReLU
    layer keeps row r by the `select` offset (exact)."""
    d = ctx.d
    queries = {ctx.row("vk", k): np.eye(d + 1)[k] for k in range(d)}
    queries[ctx.row("one")] = np.eye(d + 1)[d]
    keys = {ctx.row("kone", k): np.eye(d + 1)[k] for k in range(d)}
    keys[ctx.row(f"is{role}")] = np.eye(d + 1)[d]
    values = {(ctx.row(staging, r), ctx.row("rd", r)): 1.0 for r in range(d)}
    ctx.add_head(layer, queries, keys, values, MOVE_TEMPERATURE,
                 f"V_rk gathers {role} column k")
    ffn = ctx.ffn(layer)
    for r in range(d):
        ffn.copy(ctx.row(staging, r), targets[r], gate=ctx.row(select, r))


def emit_entries(ctx: BlockContext, layer: int, source: str, staging: str,
                 per_row: bool = False) -> None:
    """The inverse of `gather_entries`: C's column k collects row `source` of every entry
    column V_{r,k} (`collect_entries`) and emits `staging` row r as result row r."""
    collect_entries(ctx, layer, source, staging, per_row)
    for r in range(ctx.d):
        ctx.emit_result(layer, r, {ctx.row(staging, r): 1.0})


def collect_entries(ctx: BlockContext, layer: int, source: str, staging: str,
                    per_row: bool = False, role: str = "C gathers row") -> None:
    """C's column k collects row `source` of every entry column V_{r,k} (private fields
    `vr`, `vk`, gate `gV`) into `staging` row r, one exact head per r. With `per_row`,
    `source` has d rows and V_{r,k} holds its entry in row r."""
    d = ctx.d
    basis = np.eye(2 * d + 1)
    for r in range(d):
        queries = {ctx.row("kone", k): basis[d + k] for k in range(d)}
        queries[ctx.row("one")] = basis[r] + basis[2 * d]
        keys = {ctx.row("vr", i): basis[i] for i in range(d)}
        keys.update({ctx.row("vk", k): basis[d + k] for k in range(d)})
        keys[ctx.row("gV")] = basis[2 * d]
        values = {(ctx.row(staging, r), ctx.row(source, r if per_row else 0)): 1.0}
        ctx.add_head(layer, queries, keys, values, MOVE_TEMPERATURE, f"{role} {r}")
