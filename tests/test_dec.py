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
