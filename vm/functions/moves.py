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
