"""Which binary adder a word size gets, so that every intermediate stays exact.

A one-hidden-layer adder (Lemma 16) forms weighted bit sums up to 2^(N+1),
with quarter offsets for its centered steps: exact in float32 only while
those stay well below 2^24, and any ulp-level noise on an input bit is
multiplied by up to 2^N. Up to N = 16 both stay far inside the steps'
0.25 margin. Wider words use a carry-select adder over blocks of about
sqrt(N) bits, whose sums stay below 2^(w+2) and 2^(blocks+1): two hidden
layers instead of one, exact in float32 for every N up to 64.
"""

from __future__ import annotations

import math

ONE_LEVEL_MAX_BITS = 16


def carry_blocks(bits: int) -> list[range] | None:
    """None for a one-level adder; else the blocks of bit significances, LSB first."""
    if bits <= ONE_LEVEL_MAX_BITS:
        return None
    width = math.ceil(math.sqrt(bits))
    return [range(start, min(start + width, bits)) for start in range(0, bits, width)]
