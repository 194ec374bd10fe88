"""Standard SUBLEQ memory images in the `.dec` style of public toolchains (Mazonka's sqrun,
the eForth SUBLEQ image): decimal words separated by whitespace or commas; `#` and `;`
start a comment that runs to the end of the line."""

from __future__ import annotations

import re

import lark

from assembler.diagnostics import (SourceError, as_read_from_file, check_source_text,
                                  check_word_size, int_literal, source_lines)
from vm.common.errors import InputError, shown_path

MAX_WORDS = 1 << 15
"""The largest image accepted (the memory is padded to a power of two of at most 2^15)."""
MAX_BITS = 64
"""The widest word an image may hold (that of the machine)."""
_TOKEN = re.compile(r"[^\s,]+")
_WORD = re.compile(r"[+-]?[0-9]+")
"""A decimal word in ASCII digits (\\d also took other scripts' digits: "١٢" read as 12)."""


def load_image(text: str, file: str = "<image>", bits: int | None = None) -> list[int]:
    """The words of an image, in order; a bad token, or one outside the `bits`-bit range when
    `bits` is given, is a located InputError (file:line:col). Lines end at newlines only, as
    in .vsq sources and editors: a form feed (\\v, \\x1c-\\x1e, U+2028...) is a blank
    (str.splitlines ended the line, and so a comment, there: '0 0 -1 ; halt<FF> 5' gave
    the image a word 5, and an error after one showed another line under its caret)."""
    check_source_text(text)  # None failed on `.replace`, bytes in a comparison
    bits = check_word_size(bits, MAX_BITS)  # 0 checked no range, 1 a 1-bit one, '8' a TypeError
    words: list[int] = []
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if bits else (None, None)
    text = as_read_from_file(text)
    for number, line in enumerate(source_lines(text), start=1):
        body = re.split(r"[#;]", line, maxsplit=1)[0]
        for match in _TOKEN.finditer(body):
            token = match.group()
            if not _WORD.fullmatch(token):
                shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in token)
                raise SourceError(f"'{shown}' is not a decimal word", file, text, number,
                                  match.start() + 1, len(token))
            if len(words) >= MAX_WORDS:
                raise SourceError(f"image longer than {MAX_WORDS} words", file, text, number,
                                  match.start() + 1, len(token))
            word = int_literal(token, 10, file, text,
                               lark.Token("WORD", token, line=number, column=match.start() + 1))
            if bits and not low <= word <= high:
                raise SourceError(f"word {len(words)} is {word}, outside the {bits}-bit range "
                                  f"{low}..{high}", file, text, number, match.start() + 1,
                                  len(token))
            words.append(word)
    if not words:
        raise InputError(f"{shown_path(file)}: the image holds no words")
    return words
