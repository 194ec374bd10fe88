"""Exact integer arithmetic on ±1 bit fields inside ReLU layers.

Bits are MSB-first ±1 rows; `gate` is an indicator row (1 in the column that
computes, 0 elsewhere). Every affine constant is multiplied by the gate row
instead of being a bias, so in every other column all arguments are exactly
0 and the units output 0: biases stay shared by all columns (Eq. 1b) and no
large constants are needed.

The one-layer adder (Lemma 16 idea): bit k of a sum is a step function of
S_k, the weighted sum of the addends' bits up to significance k:
bit_k = sum_m (-1)^(m+1) [S_k >= m 2^k]. For t within 0.25 of an integer,
[t >= 0] is exactly 2 relu(t + 3/4) - 2 relu(t + 1/4): the ramp lies
strictly between integers, so small input noise never passes through.
"""

from __future__ import annotations

from vm.blocks.ffn import FeedForwardBuilder, Form, form_sum, scaled

Addend = tuple[str, bool]
"""A bit field and whether it enters complemented (NOT x, for two's-complement negation)."""


def bit_form(ffn: FeedForwardBuilder, field: str, significance: int, gate: int,
             complement: bool = False) -> Form:
    """The 0/1 value of a ±1 bit: (x + g)/2, or (g - x)/2 for its complement."""
    row = ffn.row(field, ffn.layout.size(field) - 1 - significance)
    return {row: -0.5, gate: 0.5} if complement else {row: 0.5, gate: 0.5}


def bit_row(ffn: FeedForwardBuilder, field: str, significance: int) -> int:
    return ffn.row(field, ffn.layout.size(field) - 1 - significance)


STEP_RAMP = (0.75, 0.25)
"""The centered step's ramp, as offsets added to t: it rises between t = -3/4 and -1/4."""


def add_step(ffn: FeedForwardBuilder, form: Form, threshold: int, gate: int, row: int,
             coefficient: float) -> None:
    """Add coefficient * [form >= threshold] to `row` (form within 0.25 of an integer)."""
    shifted = form_sum(form, {gate: -float(threshold)})
    scale = 1.0 / (STEP_RAMP[0] - STEP_RAMP[1])
    ffn.relu_into(form_sum(shifted, {gate: STEP_RAMP[0]}), row, coefficient * scale)
    ffn.relu_into(form_sum(shifted, {gate: STEP_RAMP[1]}), row, -coefficient * scale)


def add_binary_digit(ffn: FeedForwardBuilder, partial: Form, significance: int, largest: int,
                     gate: int, row: int, coefficient: float) -> None:
    """Add coefficient * (bit `significance` of the integer `partial`), 0 <= partial <= largest."""
    weight = 1 << significance
    for multiple in range(1, largest // weight + 1):
        add_step(ffn, partial, multiple * weight, gate, row, coefficient * (-1) ** (multiple + 1))


def as_pm1(ffn: FeedForwardBuilder, gate: int) -> int:
    """A unit relu(g): subtracting it turns a 0/1 output 2b into the ±1 bit 2b - g."""
    return ffn.unit({gate: 1.0})


def add_words(ffn: FeedForwardBuilder, addends: list[Addend], carry_in: int, target: str,
              gate: int) -> None:
    """target (zero before) += the ±1 bits of (sum of addends + carry_in) mod 2^N.

    One hidden layer; intermediates reach len(addends) * 2^N, so float32 is
    exact while that stays below 2^24 (see vm.blocks.adder_plan).
    """
    width = ffn.layout.size(target)
    minus_gate = as_pm1(ffn, gate)
    partial: Form = {gate: float(carry_in)}
    largest = carry_in
    for significance in range(width):
        weight = float(1 << significance)
        for field, complement in addends:
            partial = form_sum(partial, scaled(bit_form(ffn, field, significance, gate,
                                                        complement), weight))
        largest += len(addends) * (1 << significance)
        row = bit_row(ffn, target, significance)
        add_binary_digit(ffn, partial, significance, largest, gate, row, 2.0)
        ffn.emit(minus_gate, row, -1.0)


def add_words_stage_a(ffn: FeedForwardBuilder, addends: list[Addend], blocks: list[range],
                      sum0: str, sum1: str, carry: str, gate: int) -> None:
    """Carry-select adder, first layer: per block, both candidate sums and a carry digit.

    sum0/sum1 get each bit (0/1) of the block's sum with carry-in 0/1; carry
    row j gets u_j = +1 if block j generates a carry, 0 if it propagates one,
    -1 if it kills it. Intermediates stay below 2^(block width + 2).
    """
    for index, block in enumerate(blocks):
        local: Form = {}
        for significance in block:
            weight = float(1 << (significance - block.start))
            for field, complement in addends:
                local = form_sum(local, scaled(bit_form(ffn, field, significance, gate,
                                                        complement), weight))
            local_significance = significance - block.start
            largest = len(addends) * ((1 << (local_significance + 1)) - 1)
            for target, carry_in in ((sum0, 0), (sum1, 1)):
                add_binary_digit(ffn, form_sum(local, {gate: float(carry_in)}),
                                 local_significance, largest + carry_in, gate,
                                 bit_row(ffn, target, significance), 1.0)
        span = 1 << len(block)
        carry_row = ffn.row(carry, index)
        add_step(ffn, local, span - 1, gate, carry_row, 1.0)
        add_step(ffn, local, span, gate, carry_row, 1.0)
        ffn.emit(ffn.unit({gate: 1.0}), carry_row, -1.0)


def add_words_stage_b(ffn: FeedForwardBuilder, blocks: list[range], sum0: str, sum1: str,
                      carry: str, carry_in: int, target: str, gate: int) -> None:
    """Carry-select adder, second layer: target bit = sum1 if carry into its block else sum0.

    The carry into block j is the sign of z_j = sum_{k<j} 2^(k+1) u_k + carry_in
    (the most significant non-propagating block below decides; z_j is odd,
    so never 0, when carry_in is 1, and then the top term decides).
    """
    minus_gate = as_pm1(ffn, gate)
    for index, block in enumerate(blocks):
        z: Form = {gate: float(2 * carry_in - 1)}
        for lower in range(index):
            z = form_sum(z, {ffn.row(carry, lower): float(1 << (lower + 1))})
        for significance in block:
            row = bit_row(ffn, target, significance)
            select_bit(ffn, z, {bit_row(ffn, sum1, significance): 1.0},
                       {bit_row(ffn, sum0, significance): 1.0}, gate, row, 2.0)
            ffn.emit(minus_gate, row, -1.0)


def select_bit(ffn: FeedForwardBuilder, z: Form, when_positive: Form, otherwise: Form,
               gate: int, row: int, coefficient: float) -> None:
    """Add coefficient * (when_positive if z >= 1 else otherwise); z integer, bits 0/1.

    relu(p + z - g) - relu(z - g) + relu(o - z) - relu(-z): for z >= 1 the
    first pair gives p and the second 0; for z <= 0 the reverse.
    """
    ffn.relu_into(form_sum(when_positive, z, {gate: -1.0}), row, coefficient)
    ffn.relu_into(form_sum(z, {gate: -1.0}), row, -coefficient)
    ffn.relu_into(form_sum(otherwise, scaled(z, -1.0)), row, coefficient)
    ffn.relu_into(scaled(z, -1.0), row, -coefficient)


def non_positive_indicator(ffn: FeedForwardBuilder, word: str, gate: int) -> Form:
    """An integer form z with z >= 1 iff the two's-complement word is <= 0 (Eq. 4's flag).

    z = N * sign + 1 - sum(bits) with 0/1 bits: a set sign bit gives z >= 1,
    an all-zero word gives z = 1, any other positive word z <= 0.
    """
    width = ffn.layout.size(word)
    bits = [bit_form(ffn, word, significance, gate) for significance in range(width)]
    return form_sum({gate: 1.0}, scaled(form_sum(*bits), -1.0),
                    scaled(bits[width - 1], float(width)))


def select_code(ffn: FeedForwardBuilder, z: Form, when_positive: str, otherwise: str,
                target: str, gate: int) -> None:
    """target (zero before) += the ±1 code when_positive if z >= 1, else otherwise."""
    minus_gate = as_pm1(ffn, gate)
    for index in range(ffn.layout.size(target)):
        row = ffn.row(target, index)
        positive = {ffn.row(when_positive, index): 0.5, gate: 0.5}
        negative = {ffn.row(otherwise, index): 0.5, gate: 0.5}
        select_bit(ffn, z, positive, negative, gate, row, 2.0)
        ffn.emit(minus_gate, row, -1.0)
