"""The ReLU and attention blocks, evaluated with plain numpy Eq. (1).

Each block is built on a small layout; columns with gate 1 must compute the
function exactly, columns with gate 0 must come out zero.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vm.blocks import arith
from vm.blocks.adder_plan import ONE_LEVEL_MAX_BITS, carry_blocks
from vm.blocks.attention import read_head, write_head
from vm.blocks.correct import add_ternary, clear, snap_pm1
from vm.blocks.ffn import FeedForwardBuilder
from vm.common.encoding import pm1_code, word_value
from vm.transformer.layout import LayoutBuilder


def layout_with(**sizes: int):
    builder = LayoutBuilder()
    for name, size in sizes.items():
        builder.add(name, size)
    builder.region("all", 1)
    return builder.build()


def apply(ffn: FeedForwardBuilder, X: np.ndarray, dtype=np.float64) -> np.ndarray:
    w = ffn.build()
    X = X.astype(dtype)
    hidden = np.maximum(w.W1.astype(dtype) @ X + w.b1.astype(dtype)[:, None], 0)
    return X + w.W2.astype(dtype) @ hidden + w.b2.astype(dtype)[:, None]


def columns_for(layout, words: dict[str, list[int]], gate_field: str = "g") -> np.ndarray:
    """One column per entry, gate 1, holding the given words (±1 codes)."""
    count = len(next(iter(words.values())))
    X = np.zeros((layout.rows, count + 1))
    X[layout[gate_field], :count] = 1
    for name, values in words.items():
        for column, value in enumerate(values):
            X[layout[name], column] = pm1_code(value, layout.size(name))
    return X  # the last column has gate 0 and zeros everywhere


def signed(value: int, bits: int) -> int:
    value %= 1 << bits
    return value - (1 << bits) if value >> (bits - 1) else value


def subtract_ffns(layout, bits):
    """The machine's subtraction: one FFN, or the two carry-select FFNs."""
    gate = layout.row("g")
    addends = [("b", False), ("a", True)]
    blocks = carry_blocks(bits)
    first = FeedForwardBuilder(layout)
    if blocks is None:
        arith.add_words(first, addends, 1, "out", gate)
        return [first]
    arith.add_words_stage_a(first, addends, blocks, "s0", "s1", "c", gate)
    second = FeedForwardBuilder(layout)
    arith.add_words_stage_b(second, blocks, "s0", "s1", "c", 1, "out", gate)
    return [first, second]


def run_subtract(bits: int, pairs: list[tuple[int, int]], dtype) -> list[int]:
    blocks = carry_blocks(bits)
    layout = layout_with(a=bits, b=bits, out=bits, s0=bits, s1=bits,
                         c=len(blocks) if blocks else 1, g=1)
    X = columns_for(layout, {"a": [a for a, _ in pairs], "b": [b for _, b in pairs]})
    for ffn in subtract_ffns(layout, bits):
        X = apply(ffn, X, dtype)
    assert not X[layout["out"], -1].any()
    return [word_value(X[layout["out"], j]) for j in range(len(pairs))]


@pytest.mark.parametrize("bits", [2, 3, 4, 5])
def test_subtraction_is_exact_for_every_pair_of_small_words(bits):
    values = range(-(1 << (bits - 1)), 1 << (bits - 1))
    pairs = list(itertools.product(values, values))
    got = run_subtract(bits, pairs, np.float32)
    assert got == [signed(b - a, bits) for a, b in pairs]


@pytest.mark.parametrize("bits", [ONE_LEVEL_MAX_BITS, ONE_LEVEL_MAX_BITS + 1, 32, 48, 64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_subtraction_is_exact_at_the_adder_edges_and_wide_words(bits, dtype):
    rng = np.random.default_rng(bits)
    top = 1 << (bits - 1)
    extremes = [-top, -top + 1, -1, 0, 1, top - 2, top - 1]
    pairs = list(itertools.product(extremes, extremes))
    pairs += [(int(rng.integers(-top, top)), int(rng.integers(-top, top))) for _ in range(200)]
    assert run_subtract(bits, pairs, dtype) == [signed(b - a, bits) for a, b in pairs]


def test_carry_select_blocks_cover_every_bit_once():
    for bits in range(ONE_LEVEL_MAX_BITS + 1, 65):
        blocks = carry_blocks(bits)
        assert sorted(i for block in blocks for i in block) == list(range(bits))
    assert carry_blocks(ONE_LEVEL_MAX_BITS) is None


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 16), st.data())
def test_increment_wraps_like_a_binary_counter(bits, data):
    values = data.draw(st.lists(st.integers(0, (1 << bits) - 1), min_size=1, max_size=8))
    layout = layout_with(p=bits, out=bits, g=1)
    ffn = FeedForwardBuilder(layout)
    arith.add_words(ffn, [("p", False)], 1, "out", layout.row("g"))
    X = apply(ffn, columns_for(layout, {"p": values}), np.float32)
    for column, value in enumerate(values):
        assert list(X[layout["out"], column]) == list(pm1_code(value + 1, bits))
    assert not X[layout["out"], -1].any()


@pytest.mark.parametrize("bits", [3, 8])
def test_branch_select_picks_the_target_exactly_when_the_word_is_non_positive(bits):
    values = list(range(-(1 << (bits - 1)), 1 << (bits - 1)))
    layout = layout_with(w=bits, yes=6, no=6, out=6, g=1)
    ffn = FeedForwardBuilder(layout)
    gate = layout.row("g")
    arith.select_code(ffn, arith.non_positive_indicator(ffn, "w", gate), "yes", "no", "out", gate)
    X = apply(ffn, columns_for(layout, {"w": values, "yes": [41] * len(values),
                                        "no": [22] * len(values)}), np.float32)
    for column, value in enumerate(values):
        expected = 41 if value <= 0 else 22
        assert list(X[layout["out"], column]) == list(pm1_code(expected, 6)), value
    assert not X[layout["out"], -1].any()


def test_snap_restores_exact_codes_and_corrects_noise_to_within_ulps():
    layout = layout_with(x=5, y=2, g=1)
    ffn = FeedForwardBuilder(layout)
    snap_pm1(ffn, "x", layout.row("g"))
    clear(ffn, "y")
    X = np.zeros((layout.rows, 3))
    X[layout["g"], :2] = 1
    X[layout["x"], 0] = [1, -1, 1, 1, -1]                # exact codes stay exact
    X[layout["x"], 1] = [0.93, -0.6, 0.51, -0.77, 1.3]   # noisy reads snap back
    X[layout["x"], 2] = [0.37, -2.5, 0.2, 9.0, -0.1]     # garbage where the gate is 0
    X[layout["y"]] = [[0.3, -7.0, 2.0], [-1.0, 1e-3, 5.5]]
    out = apply(ffn, X)
    assert list(out[layout["x"], 0]) == [1, -1, 1, 1, -1]
    assert np.abs(out[layout["x"], 1] - [1, -1, 1, -1, 1]).max() <= 4 * np.finfo(float).eps
    assert not out[layout["x"], 2].any() and not out[layout["y"]].any()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bits", [8, 16, 40])
def test_adders_do_not_pass_small_input_noise_through(bits, dtype):
    """Noise on the operand bits (as left by snapping a noisy read) stays out of the result:
    clean and noisy inputs give results that differ only by the rounding of the adder's own
    sums (8 ulp of its largest pre-activation), not by anything of the noise's 1e-6."""
    rng = np.random.default_rng(bits)
    top = 1 << (bits - 1)
    pairs = [(int(rng.integers(-top, top)), int(rng.integers(-top, top))) for _ in range(64)]
    blocks = carry_blocks(bits)
    layout = layout_with(a=bits, b=bits, out=bits, s0=bits, s1=bits,
                         c=len(blocks) if blocks else 1, g=1)
    X = columns_for(layout, {"a": [a for a, _ in pairs], "b": [b for _, b in pairs]})
    noisy = X.copy()
    for name in ("a", "b"):
        noisy[layout[name]] += rng.uniform(-1e-6, 1e-6, noisy[layout[name]].shape) * \
            (noisy[layout[name]] != 0)
    largest = 0.0
    for ffn in subtract_ffns(layout, bits):
        weights = ffn.build()
        largest = max(largest, float(np.abs(weights.W1 @ X + weights.b1[:, None]).max()))
        X, noisy = apply(ffn, X, dtype), apply(ffn, noisy, dtype)
    tolerance = 8 * float(np.spacing(dtype(largest)))
    assert tolerance < 1e-6 or dtype is np.float32
    assert np.abs(noisy[layout["out"]] - X[layout["out"]]).max() <= tolerance


def test_ternary_quantizes_within_its_bands_and_is_blocked():
    layout = layout_with(t=1, out=1, block=1)
    ffn = FeedForwardBuilder(layout)
    add_ternary(ffn, {layout.row("t"): 1.0}, layout.row("out"), layout.row("block"), 32.0)
    t = [1.0, 0.52, 0.24, 0.0, -0.2, -0.55, -1.0, 0.9]
    X = np.zeros((layout.rows, len(t)))
    X[layout["t"]] = t
    X[layout["block"], -1] = 1
    out = apply(ffn, X)[layout["out"]][0]
    assert list(out) == [1, 1, 0, 0, 0, -1, -1, 0]


def attend(head, X: np.ndarray) -> np.ndarray:
    scores = head.lam * (head.K @ X).T @ (head.Q @ X)
    weights = np.exp(scores - scores.max(axis=0))
    return X + head.V @ X @ (weights / weights.sum(axis=0))


def test_read_head_copies_the_addressed_column():
    layout = layout_with(ptr=3, pos=3, data=2, got=2)
    X = np.zeros((layout.rows, 6))
    for column in range(1, 6):
        X[layout["pos"], column] = pm1_code(column, 3)
        X[layout["data"], column] = pm1_code(column % 4, 2)
    X[layout["ptr"], 0] = pm1_code(4, 3)
    out = attend(read_head(layout, "ptr", "pos", "data", "got", 30.0, "read"), X)
    assert np.allclose(out[layout["got"], 0], pm1_code(0, 2))


def test_write_head_gives_the_addressed_column_half_of_each_side():
    layout = layout_with(addr=3, pos=3, value=2, mem=2, buf=2)
    X = np.zeros((layout.rows, 6))
    for column in range(1, 6):
        X[layout["pos"], column] = pm1_code(column, 3)
        X[layout["mem"], column] = pm1_code(column % 4, 2)
    X[layout["addr"], 0] = pm1_code(3, 3)
    X[layout["value"], 0] = pm1_code(2, 2)
    out = attend(write_head(layout, "addr", "pos", ["value", "mem"], "buf", 30.0, "write"), X)
    # column 3 gets (written + its own)/2; column 4 only its own value
    assert np.allclose(out[layout["buf"], 3], (pm1_code(2, 2) + pm1_code(3, 2)) / 2)
    assert np.allclose(out[layout["buf"], 4], pm1_code(0, 2))
