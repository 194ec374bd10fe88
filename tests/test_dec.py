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
