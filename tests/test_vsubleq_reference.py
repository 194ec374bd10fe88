"""The standard SUBLEQ reference interpreter and the `.dec` image loader."""

from __future__ import annotations

from pathlib import Path

import pytest

from assembler.dec import MAX_WORDS, load_image
from vm.common.errors import InputError
from vm.machines.vsubleq.reference import Image, run_reference

PROGRAMS = Path(__file__).resolve().parents[1] / "programs" / "vsubleq"


def image(name: str, bits: int = 8) -> Image:
    path = PROGRAMS / name
    return Image.from_words(load_image(path.read_text(), str(path)), bits)


@pytest.mark.parametrize("bits", [8, 16, 32])
def test_hello_prints_hello_world(bits: int) -> None:
    result = run_reference(image("hello.dec", bits), 1000)
    assert result.halted
    assert result.output == b"Hello, world!\n"


@pytest.mark.parametrize("text", [b"", b"a", b"echo me\n"])
def test_echo_copies_input_until_end(text: bytes) -> None:
    result = run_reference(image("echo.dec"), 1000, input_bytes=text)
    assert result.halted and result.output == text


def test_array_sum_patches_its_own_operand() -> None:
    result = run_reference(image("array_sum.dec"), 1000)
    assert result.halted
    assert result.memory[23] == 3 + 5 + 7 + 11 - 2
    assert result.memory[0] == 24 + 5  # the pointer moved past the array


def test_subtraction_wraps_and_halting_write_happens() -> None:
    # mem[7] = -128 - 1 wraps to 127 at N = 8 (positive: on to 3); then mem[4] = 0, halt
    result = run_reference(Image.from_words([6, 7, -1, 4, 4, -1, 1, -128], 8), 10)
    assert result.memory[7] == 127 and result.memory[4] == 0
    assert result.halted and result.steps == 2 and result.pc == 3


def test_falling_off_the_end_halts_and_fetches_wrap() -> None:
    result = run_reference(Image.from_words([3, 3, 0, 1], 8), 10)  # mem[3] = 0 jumps to 0
    assert result.steps == 10 and not result.halted
    # 0: mem[7] = 0 jumps to 6; 6: a = 7, b = mem[7] = 0, c = mem[0] (wrapped):
    # mem[0] = 7 - 0 > 0, and pc + 3 = 9 is past the 8 words: halt
    result = run_reference(Image.from_words([7, 7, 6, 0, 0, 0, 7, 4], 8), 10)
    assert result.halted and result.steps == 2 and result.pc == 6 and result.memory[0] == 7


def test_image_is_padded_to_a_power_of_two() -> None:
    assert Image.from_words([1] * 5, 8).size == 8
    assert Image.from_words([1], 8).size == 4


@pytest.mark.parametrize("words, bits, message", [
    ([200], 8, "outside the 8-bit range"), ([0] * 200, 8, "more than 8-bit words")])
def test_image_refuses_what_words_cannot_hold(words: list[int], bits: int, message: str) -> None:
    with pytest.raises(InputError, match=message):
        Image.from_words(words, bits)


def test_loader_reads_commas_and_comments() -> None:
    assert load_image("1, 2 ,3 # four\n; five\n-6,+7") == [1, 2, 3, -6, 7]


@pytest.mark.parametrize("text, where", [("1 2\n 3 x4", "<image>:2:4:"), ("1,,0x1", "<image>:1:4:")])
def test_loader_locates_bad_tokens(text: str, where: str) -> None:
    with pytest.raises(InputError) as error:
        load_image(text)
    assert str(error.value).startswith(where)


def test_loader_limits_the_size() -> None:
    with pytest.raises(InputError, match="longer than"):
        load_image("0 " * (MAX_WORDS + 1))
    with pytest.raises(InputError, match="no words"):
        load_image("# nothing\n")


@pytest.mark.parametrize("words, bits, message", [
    ([4.7, 5, -1], 8, "word 0 is 4.7, not a whole number"),
    ([4, 5, 3.0], 8, "word 2 is 3.0, not a whole number"),
    ([True, 5, -1], 8, "word 0 is True, not a whole number"),
    (["1", 5, -1], 8, "word 0 is '1', not a whole number"),
    ([], 8, "at least one word"),
    (None, 8, "got NoneType"),
    ([0, 0, -1], 8.0, "got 8.0"),
    ([0, 0, -1], "8", "got '8'"),
])
def test_image_refuses_words_and_sizes_that_are_no_whole_numbers(words, bits,
                                                                  message: str) -> None:
    """A float word failed in the reference with a TypeError (and the transformer truncated
    it); a str word or word size failed in a comparison; no words made an image."""
    with pytest.raises(InputError, match=message):
        Image.from_words(words, bits)


def test_image_holds_numpy_words_as_python_ints() -> None:
    """numpy's uint8 words wrapped at 256 in the reference's subtraction."""
    import numpy as np
    words = np.array([4, 5, 3, 0, 100, 1], dtype=np.uint8)
    image = Image.from_words(list(words), 16)
    assert all(type(word) is int for word in image.memory)
    # mem[5] = 1 - 100 = -99 on 16-bit words, then jump to 3: 0 5 1 ... falls through
    assert run_reference(image, 1).memory[5] == -99


@pytest.mark.parametrize("memory, length, message", [
    ((0, 0, -1), 3, "power of two of at least 4 words"),
    ((0, 0, -1, 0, 0), 5, "power of two"),
    ((0, 0, -1, 0), 0, "length must be from 1 to its 4 cells"),
    ((0, 0, -1, 0), 9, "length must be from 1 to its 4 cells"),
])
def test_an_image_made_directly_is_checked_too(memory, length: int, message: str) -> None:
    """Image((0, 0, -1), 8, 3) ran on the reference with its addresses taken modulo 3,
    which no transformer geometry holds."""
    with pytest.raises(InputError, match=message):
        Image(memory, 8, length)
