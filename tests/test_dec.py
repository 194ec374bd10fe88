"""assembler/dec.py: standard SUBLEQ images in the .dec style."""

from __future__ import annotations

import pytest

from assembler.dec import load_image
from assembler.diagnostics import SourceError


def test_words_are_read_across_commas_whitespace_and_comments():
    assert load_image("1, -2 +3 # four\n5;6\n") == [1, -2, 3, 5]


@pytest.mark.parametrize("token", ["١٢", "１２", "1٢"])
def test_digits_of_other_scripts_are_not_decimal_words(token):
    """Python's \\d matched them, and int() read '١٢' as 12."""
    with pytest.raises(SourceError, match=f"'{token}' is not a decimal word"):
        load_image(f"0 {token}\n", "x.dec")


def test_a_bad_token_with_control_characters_is_quoted_with_escapes() -> None:
    """The message quoted the token as it was: an escape sequence in a .dec file ('1
    \\x1b[31mred') reached the terminal (and turned it red), a NUL showed as nothing; the
    line below it already showed them as '?'."""
    with pytest.raises(SourceError) as error:
        load_image("1 \x1b[31mred\x00\n", "x.dec", 16)
    assert str(error.value).splitlines()[0] == (
        "x.dec:1:3: error: '\\x1b[31mred\\x00' is not a decimal word")


@pytest.mark.parametrize("separator", ["\f", "\v", "\x1c", "\x85", "\u2028"])
def test_a_page_break_does_not_end_a_comment(separator: str) -> None:
    """str.splitlines ended the line, and the comment, at a form feed (\\v, \\x1c-\\x1e,
    \\x85, U+2028/9): '0 0 -1 ; halt<FF> 5' gave the image a fourth word, 5."""
    assert load_image(f"0 0 -1 ; halt{separator} 5\n7\n") == [0, 0, -1, 7]
    assert load_image(f"1{separator}2\n") == [1, 2]


def test_an_error_after_a_page_break_shows_its_own_line() -> None:
    """Lines were counted by str.splitlines and shown by newlines: the 'x' on the first line
    was reported on line 2 and shown under '4 5 6'."""
    with pytest.raises(SourceError) as error:
        load_image("1 2\f3 x\n4 5 6\n", "f.dec")
    assert str(error.value).splitlines() == [
        "f.dec:1:7: error: 'x' is not a decimal word", "    1 2?3 x", "          ^"]


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_an_error_after_other_newlines_is_on_its_line(newline: str) -> None:
    with pytest.raises(SourceError) as error:
        load_image(f"1 2{newline}3 x{newline}", "f.dec")
    assert str(error.value).splitlines()[:2] == [
        "f.dec:2:3: error: 'x' is not a decimal word", "    3 x"]


@pytest.mark.parametrize("arguments, message", [
    ((None,), "the source must be a str, got NoneType"),
    ((b"1 2",), "the source must be a str, got bytes"),
    (("1 2", "x.dec", 0), "--bits must be between 2 and 64, got 0"),
    (("1 2", "x.dec", 1), "--bits must be between 2 and 64, got 1"),
    (("1 2", "x.dec", "8"), "bits must be an integer, got '8'"),
])
def test_the_loader_refuses_arguments_of_another_kind(arguments, message: str) -> None:
    """None failed on `.replace`, bytes and '8' with TypeErrors, and bits=0 checked no
    range at all."""
    from vm.common.errors import InputError
    with pytest.raises(InputError, match=message):
        load_image(*arguments)
