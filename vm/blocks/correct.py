"""Error correction (paper Step 6): clear working rows, snap noisy codes exactly.

Attention reads carry softmax error; these ReLU pieces map every value within
a tolerance band back onto its exact level, so the state between passes holds
only -1, 0 and +1 and errors never accumulate.
"""

from __future__ import annotations

from vm.blocks.ffn import FeedForwardBuilder, Form

SNAP_SLOPE = 2.0
"""snap(x) = clamp(2x, -1, 1): exact for reads within 0.5 of ±1."""
TERNARY_LOW, TERNARY_HIGH = 0.25, 0.5
"""ternary(t) is 0 for |t| <= 0.25 and ±1 for |t| >= 0.5."""


def clear(ffn: FeedForwardBuilder, field: str) -> None:
    """Subtract the field from itself, whatever it holds: x - relu(x) + relu(-x) = 0."""
    for row in ffn.rows(field):
        ffn.relu_into({row: 1.0}, row, -1.0)
        ffn.relu_into({row: -1.0}, row, 1.0)


def snap_pm1(ffn: FeedForwardBuilder, field: str, gate: int) -> None:
    """Replace the field by clamp(2x, -1, 1) in gate columns and by 0 elsewhere.

    With g the gate row (1 or 0): -g + relu(2x + g) - relu(2x - g). Where g = 0
    both units receive the same argument and cancel exactly, whatever x holds,
    so garbage outside the gate columns needs no large constant to suppress.
    """
    clear(ffn, field)
    minus_gate = ffn.unit({gate: 1.0})
    for row in ffn.rows(field):
        ffn.emit(minus_gate, row, -1.0)
        ffn.relu_into({row: SNAP_SLOPE, gate: 1.0}, row, 1.0)
        ffn.relu_into({row: SNAP_SLOPE, gate: -1.0}, row, -1.0)


def add_ternary(ffn: FeedForwardBuilder, form: Form, row: int, blocked_by: int,
                big: float) -> None:
    """Add ternary(form) to `row`, except in columns where row `blocked_by` is 1.

    ternary(t) = clamp(4t - 1, 0, 1) - clamp(-4t - 1, 0, 1); `big` must exceed
    4|t| + 2 wherever the block is on, so all four units stay off there.
    """
    scale = 1.0 / (TERNARY_HIGH - TERNARY_LOW)
    offset = TERNARY_LOW * scale
    for sign in (1.0, -1.0):
        argument = {r: sign * scale * c for r, c in form.items()}
        argument[blocked_by] = argument.get(blocked_by, 0.0) - big
        ffn.relu_into(argument, row, sign, bias=-offset)
        ffn.relu_into(argument, row, -sign, bias=-offset - 1.0)


def rewrite_memory(ffn: FeedForwardBuilder, blocked_by: int, big: float) -> None:
    """mem <- ternary(2 wbuf - mem), word by word, outside the `blocked_by` columns: the
    write head left (res + mem) / 2 in wbuf of the written column and mem / 2 elsewhere, so
    this stores res there and keeps every other word, correcting the read's rounding."""
    layout = ffn.layout
    clear(ffn, "mem")
    for index in range(layout.size("mem")):
        mem, wbuf = layout.row("mem", index), layout.row("wbuf", index)
        add_ternary(ffn, {wbuf: 2.0, mem: -1.0}, mem, blocked_by, big)
