"""programs/vsubleq/calc.vsq, a line calculator of a few hundred words: its output against
Python's arithmetic on N-bit words (reference interpreter, many inputs), and the
transformer in lockstep with the reference at N = 16 and 32."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assembler.vsq import assemble
from vm.machines.vsubleq.reference import Image, run_reference

CALC = Path(__file__).resolve().parents[1] / "programs" / "vsubleq" / "calc.vsq"
LINE = re.compile(rb" *(-?[0-9]+) *([-+*/]) *(-?[0-9]+) *")
ERROR = b"error\n"
MAX_STEPS = 100_000


def to_word(value: int, bits: int) -> int:
    """`value` modulo 2^bits, as a two's-complement number."""
    half = 1 << (bits - 1)
    return (value + half) % (2 * half) - half


def calc_output(data: bytes, bits: int) -> bytes:
    """What calc.vsq must print for the input `data` at word size `bits`: the first line
    `A op B` (spaces around the tokens, '-' right before the digits) evaluated on N-bit
    words (operands and result modulo 2^N, division truncating toward zero), or `error`."""
    match = LINE.fullmatch(data.split(b"\n", 1)[0])
    if match is None:
        return ERROR
    a, b = to_word(int(match[1]), bits), to_word(int(match[3]), bits)
    op = match[2]
    if op == b"/":
        if b == 0:
            return ERROR
        quotient = abs(a) // abs(b)
        result = quotient if (a < 0) == (b < 0) else -quotient
    else:
        result = {b"+": a + b, b"-": a - b, b"*": a * b}[op]
    return str(to_word(result, bits)).encode() + b"\n"


_IMAGES: dict[int, Image] = {}


def calc_image(bits: int) -> Image:
    if bits not in _IMAGES:
        program = assemble(CALC.read_text(), str(CALC), bits)
        _IMAGES[bits] = Image.from_words(program.words, program.bits, str(CALC))
    return _IMAGES[bits]


def run_calc(data: bytes, bits: int):
    result = run_reference(calc_image(bits), MAX_STEPS, data)
    assert result.halted, f"{data!r} did not halt in {MAX_STEPS} steps"
    return result


def test_the_model_on_hand_computed_lines() -> None:
    """The Python model itself, against results worked out by hand."""
    assert calc_output(b"12*-34", 16) == b"-408\n"
    assert calc_output(b" 7 / -2\n", 16) == b"-3\n"
    assert calc_output(b"-7/2", 16) == b"-3\n"
    assert calc_output(b"32767+1", 16) == b"-32768\n"
    assert calc_output(b"-32768/-1", 16) == b"-32768\n"
    assert calc_output(b"65536*3", 32) == b"196608\n"
    assert calc_output(b"1/0", 16) == ERROR
    assert calc_output(b"- 1+2", 16) == ERROR
    assert calc_output(b"1+2 3", 16) == ERROR


def test_the_image_is_a_few_hundred_words() -> None:
    program = assemble(CALC.read_text(), str(CALC))
    assert 300 <= len(program.words) <= 1000
    assert calc_image(16).size == calc_image(32).size == 1024


@pytest.mark.parametrize("bits", [16, 32])
@pytest.mark.parametrize("line", [
    "12*-34", "7+5", "0-0", "100/7", "-100/7", "100/-7", "-100/-7", "5/0", "0/0", "-0/3",
    "  -32768 * -1 \n", "-32768/-1", "-32768/1", "32767*32767", "-32768-1", "65535+1",
    "2147483647+1", "-2147483648/-1", "-2147483648*-1", "46341*46341", "99999999999/1",
    "007*-0010\nignored", "0", "", "1+", "+1", "1 + 2 x", "1++2", "1+-", "1,2", "1.5+1",
    "1+2\r\n", "\n1+2", "--1+2", "1+-+2",
])
def test_edge_cases_match_python(line: str, bits: int) -> None:
    data = line.encode()
    assert run_calc(data, bits).output == calc_output(data, bits)


def lines(bits: int) -> st.SearchStrategy[bytes]:
    """Well-formed lines with operands in the N-bit range, random spaces and endings."""
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    number = st.integers(low, high).map(str) | st.integers(0, 99).map(str)
    space = st.sampled_from(["", " ", "  "])
    ending = st.sampled_from(["", "\n", "\n9*9\n"])
    parts = st.tuples(space, number, space, st.sampled_from("+-*/"), space, number, space,
                      ending)
    return parts.map(lambda p: "".join(p).encode())


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([16, 32]).flatmap(lambda bits: st.tuples(st.just(bits), lines(bits))))
def test_well_formed_lines_match_python(case: tuple[int, bytes]) -> None:
    bits, data = case
    assert run_calc(data, bits).output == calc_output(data, bits)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([16, 32]),
       st.text(alphabet="0123456789 -+*/\nx", max_size=12).map(str.encode))
def test_any_text_matches_python(bits: int, data: bytes) -> None:
    assert run_calc(data, bits).output == calc_output(data, bits)


def test_small_operands_take_few_steps() -> None:
    """Shift-and-add and shift-subtract tables grow with the operands, not the word size."""
    for bits in (16, 32):
        assert run_calc(b"12*-34", bits).steps < 1000
        assert run_calc(b"100/7", bits).steps < 1000


@pytest.mark.parametrize("bits, line", [(16, b"12*-34"), (16, b"100/-7\n"), (32, b"-7/2"),
                                        (32, b"7 + 5\n")])
def test_the_transformer_agrees_after_every_step(bits: int, line: bytes) -> None:
    pytest.importorskip("torch")
    from vm.machines.vsubleq.run import compare
    result = compare(calc_image(bits), 5000, input_bytes=line)
    assert result.ok and result.halted, result.divergence
    assert run_calc(line, bits).output == calc_output(line, bits)
