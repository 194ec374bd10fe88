"""Source errors printed as `file:line:col: message`, the line, and a caret."""

from __future__ import annotations

import io
import math
import numbers
import os
import re
import unicodedata
from pathlib import Path
from typing import Callable

import lark

from vm.common.errors import InputError, LtvmError, PlacedInputError, shown_path
from vm.common.files import open_for_reading
from vm.common.limits import check_callback


class SourceError(InputError):
    """An error at a position in a source file (printed without the `ltvm:` prefix)."""

    located = True

    def __init__(self, message: str, file: str, text: str, line: int, column: int,
                 width: int = 1) -> None:
        self.message, self.file, self.line, self.column = message, file, line, column
        lines = source_lines(text)
        source_line = lines[line - 1] if 0 < line <= len(lines) else ""
        shown, offset = _window(source_line, column)
        width = max(1, min(width, len(shown) - offset))
        marked = _columns(shown[offset:offset + width])
        caret = " " * _columns(shown[:offset]) + "^" + "~" * (marked - 1)
        super().__init__(f"{shown_path(file)}:{line}:{column}: error: {_clip(message)}\n"
                         f"    {shown}\n"
                         f"    {caret}")


def source_lines(text: str) -> list[str]:
    """The lines of a source as lark counts them, at '\n' alone: str.splitlines() also
    splits at a form feed (a page break in a comment), \v or U+2028, and errors after one
    showed another line under their file:line:col (a trailing '\r' is dropped)."""
    return [line.removesuffix("\r") for line in text.split("\n")]


SHOWN_LINE = 160
"""Most terminal columns of a source line an error shows: a 300 KB line is cut around the
column, not printed whole (a line of wide characters is cut at half as many of them)."""
SHOWN_MESSAGE = 400
"""Most characters of an error message (one that quotes a huge token is cut)."""


def _window(line: str, column: int) -> tuple[str, int]:
    """The part of `line` shown around `column` (1-based), and the caret's offset in it;
    a tab shows as a space and other unprintable characters as '?', one column each, so
    the caret stays under its character and no control byte reaches the terminal. The
    part takes at most SHOWN_LINE terminal columns, a third of them before the caret:
    counted in characters, 160 CJK characters took 320 columns."""
    at = column - 1
    near = line[max(0, at - 2 * SHOWN_LINE):at + 2 * SHOWN_LINE]
    first = max(0, at - 2 * SHOWN_LINE)
    near = "".join(c if c.isprintable() else " " if c == "\t" else "?" for c in near)
    widths = [_columns(c) for c in near]
    if len(near) == len(line) and sum(widths) <= SHOWN_LINE:
        return near, at
    start = stop = min(max(at - first, 0), len(near))
    room = SHOWN_LINE // 3
    while start > 0 and widths[start - 1] <= room:
        start -= 1
        room -= widths[start]
    room = SHOWN_LINE - (SHOWN_LINE // 3 - room)
    while stop < len(near) and widths[stop] <= room:
        room -= widths[stop]
        stop += 1
    while start > 0 and widths[start - 1] <= room:  # the line ends first: show more before
        start -= 1
        room -= widths[start]
    prefix = "..." if first + start > 0 else ""
    suffix = "..." if first + stop < len(line) else ""
    return prefix + near[start:stop] + suffix, len(prefix) + at - first - start


def _columns(text: str) -> int:
    """The terminal columns `text` takes: two for a wide (CJK) character and none for a
    combining mark, so a caret after '; 漢字' in a comment stands under its column."""
    return sum(0 if unicodedata.combining(c) else
               2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _clip(message: str) -> str:
    """The message cut to SHOWN_MESSAGE characters, every unprintable character in it (a
    quoted token from the file: an ESC turned the terminal red) written as an escape."""
    message = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in message)
    return message if len(message) <= SHOWN_MESSAGE else message[:SHOWN_MESSAGE] + "..."


MAX_NESTING = 200
"""Deepest expression the assemblers accept: evaluation recurses once per level, and a chain
`a + b + c ...` is one level per term."""


def deepest(tree: lark.Tree) -> tuple[int, lark.Tree]:
    """The depth of `tree` and its deepest subtree, without recursion (the tree may be
    deeper than Python's recursion limit)."""
    best, best_node = 0, tree
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > best:
            best, best_node = depth, node
        stack.extend((child, depth + 1) for child in node.children
                     if isinstance(child, lark.Tree))
    return best, best_node


MAX_LITERAL_DIGITS = 100
"""Most significant digits an integer literal may have: far more than a 64-bit word, a
count or a shape needs, and few enough to convert at once (Python refuses to convert more
than 4,300 decimal digits, with a ValueError rather than a message)."""


def int_literal(digits: str, base: int, file: str, text: str, where: lark.Token) -> int:
    """int(digits, base) of a literal in the source, or a SourceError at `where` when it has
    more than MAX_LITERAL_DIGITS significant digits."""
    if len(digits.lstrip("+-").lstrip("0")) > MAX_LITERAL_DIGITS:
        raise error_at(f"number longer than {MAX_LITERAL_DIGITS} digits", file, text, where)
    return int(digits, base)

MAX_SOURCE_BYTES = 4 << 20
"""The most a source file (.sq, .fleq, .vsq, .dec, CSV, program.json) may hold, 4 MiB:
generous, as the shipped programs are a few KiB. Reading stops one byte past it, so
/dev/zero and endless pipes are refused rather than read until memory runs out. What an
assembly costs is bounded by MAX_SOURCE_TOKENS, not by this: lark took 37 to 57 s of CPU
(4 to 6.5 minutes on a loaded machine) and 2.2 to 2.4 GB over a 4 MiB .sq, .fleq or .vsq
source of one-character tokens."""

MAX_SOURCE_TOKENS = 100_000
"""The most tokens (names, numbers, signs, line ends; a comment is one) the assemblers
parse. Lark builds tree nodes for each: 100,000 took 1 to 5 s of CPU and 100 to 190 MB
(measured on .sq, .fleq and .vsq sources, FLEQ statements the dearest), where 1 MiB of
`0,0,0,...` took 30 s and 640 MB. The limit holds a full 32,768-word .vsq image or 25,000
FLEQ statements; shipped programs have a few hundred tokens, at most 2,000. A .sq source has
its own, larger limit, what the largest SUBLEQ machine holds (assembler.subleq.MAX_SQ_TOKENS)."""
_TOKEN = re.compile(r"[;#][^\n]*|[A-Za-z0-9_.]+|\S|\n")
"""What the lexer takes as one token, or more than one (`1e-5` counts as three)."""


def check_token_count(text: str, file: str, limit: int | None = None,
                      why: str = "the most an assembly parses in a few seconds") -> None:
    """SourceError at the first token past `limit` (default MAX_SOURCE_TOKENS; `why` says
    where it comes from), found in milliseconds before lark spends minutes and gigabytes on
    a 4 MiB source. For a user's source only: the text a FLEQ routine call expands to is
    bounded by the machine's columns instead."""
    limit = MAX_SOURCE_TOKENS if limit is None else limit
    for count, match in enumerate(_TOKEN.finditer(text), start=1):
        if count > limit:
            start = match.start()
            line_start = text.rfind("\n", 0, start) + 1
            raise SourceError(f"more than {limit:,} tokens (names, numbers, signs, comments, "
                              f"line ends), {why}", file, text,
                              text.count("\n", 0, start) + 1, start - line_start + 1)


def check_progress(progress: object) -> None:
    """InputError unless `progress` is None or takes the line count: an assembler given 5
    failed with "'int' object is not callable" at the first line end it parsed."""
    check_callback(progress, "progress", "the lines parsed")


def check_source_text(text: object) -> None:
    """InputError unless `text` is a str: None failed on `.split` deep in an assembler,
    bytes in a comparison."""
    if not isinstance(text, str):
        raise InputError(f"the source must be a str, got {type(text).__name__}")


def as_read_from_file(text: str) -> str:
    r"""`text` as read_source gives the same bytes from a file: a leading byte-order mark
    dropped (a string that began with one was refused with a caret under it) and '\r\n'
    and a lone '\r' (an old Mac line end) as '\n' (a lone '\r' made the whole string one
    line, a comment to its end: "empty program")."""
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def check_word_size(bits: object, maximum: int) -> int | None:
    """`bits` as a Python int, or None (the source's own); InputError unless it is a whole
    number of bits from 2 to `maximum` ("8" failed in a comparison inside, and numpy's 64
    overflowed in the word range: a SUBLEQ run's values wrapped to -2^63)."""
    if bits is None:
        return None
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral):
        raise InputError(f"bits must be an integer, got {bits!r:.40}")
    if not 2 <= bits <= maximum:
        raise InputError(f"--bits must be between 2 and {maximum}, got {shown_integer(bits)}")
    return int(bits)


def shown_integer(value: int) -> str:
    """`value` for a message: its digits, or its order of magnitude past 20 of them (an int
    past 4,300 digits made str() raise ValueError, a traceback; 400 filled the screen)."""
    if abs(value) < 10 ** 20:
        return str(value)
    return f"about {'-' if value < 0 else ''}10^{math.log10(abs(value)):.0f}"


def read_source(path: str | Path, encoding: str = "utf-8-sig") -> str:
    """A source file's text (newlines as Path.read_text gives them; a leading byte-order
    mark, which some editors write and none show, dropped), or InputError for a file that
    cannot be read, is larger than MAX_SOURCE_BYTES or is not text."""
    if not isinstance(path, (str, os.PathLike)):  # None failed inside pathlib
        raise InputError(f"a source file's path must be a str or a Path, got "
                         f"{type(path).__name__}")
    data = source_bytes(path)
    try:
        return io.TextIOWrapper(io.BytesIO(data), encoding=encoding).read()
    except UnicodeDecodeError:
        raise undecodable(path, data, encoding) from None


def source_bytes(path: str | Path, what: str = "source") -> bytes:
    """A source file's bytes, or InputError for a file that cannot be read or is larger
    than MAX_SOURCE_BYTES (a 10 GB file was read whole); `what` names it in the message."""
    try:
        with open(open_for_reading(path), "rb") as stream:
            data = stream.read(MAX_SOURCE_BYTES + 1)
    except OSError as error:
        raise InputError(f"cannot read {shown_path(path)}: {error.strerror or error}") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise InputError(f"{shown_path(path)}: {what} larger than "
                         f"{MAX_SOURCE_BYTES / 2 ** 20:g} MiB (the most a source file may hold)")
    return data


def undecodable(path: str | Path, data: bytes, encoding: str) -> SourceError:
    """Where the first byte that is not `encoding` text sits, as a located error (a source
    file's, or a Python script's in the encoding its coding line names)."""
    try:
        data.decode(encoding)
        start = 0
    except UnicodeDecodeError as error:
        start = error.start
    line_start = data.rfind(b"\n", 0, start) + 1
    column = len(data[line_start:start].decode(encoding, errors="replace")) + 1
    name = encoding.upper().removesuffix("-SIG")  # a byte-order mark or not: UTF-8 text
    return SourceError(f"not {name} text: byte 0x{data[start]:02x} cannot be decoded",
                       str(path), data.decode(encoding, errors="replace"),
                       data.count(b"\n", 0, start) + 1, column)


def shown_in_source(error: LtvmError) -> LtvmError:
    """A PlacedInputError as a SourceError, its line read again from the file; any other
    error, or one whose file cannot be read (a program assembled from text), unchanged."""
    if not isinstance(error, PlacedInputError):
        return error
    try:
        text = read_source(error.file)
    except InputError:
        return error
    return SourceError(error.message, error.file, text, error.line, error.column)


def error_at(message: str, file: str, text: str, where: lark.Token | lark.Tree) -> SourceError:
    """A SourceError at a parse-tree token or node, the caret as wide as it (one line)."""
    if isinstance(where, lark.Token):
        line, column, width = where.line, where.column, len(str(where))
    else:
        meta = where.meta
        line, column = meta.line, meta.column
        width = max(1, meta.end_column - meta.column) if meta.end_line == meta.line else 1
    return SourceError(message, file, text, line, column, width)


def expectation(expected: set[str], names: dict[str, str]) -> str:
    """"; expected a, b" for the terminals lark expected, in the grammar's own words."""
    shown = sorted({names.get(item, item) for item in expected})
    return f"; expected {', '.join(shown)}" if shown else ""


def parse_located(parser: lark.Lark, text: str, file: str, directives: str | None = None,
                  names: dict[str, str] | None = None,
                  progress: Callable[[int], None] | None = None) -> lark.Tree:
    """Parse with a lark parser (a final newline added), turning its exceptions into located
    SourceErrors: an unknown directive (listing `directives` when given), an unexpected
    character, an unexpected token (with the expected terminals named by `names`), the end
    of the file. `progress` is called with the number of each line whose end is parsed."""
    try:
        return _parsed(parser, text if text.endswith("\n") else text + "\n", progress)
    except lark.UnexpectedCharacters as error:
        rest = source_lines(text)[error.line - 1][error.column - 1:]
        word = rest.split()[0] if rest.split() else rest[:1]
        if re.match(r"\.[0-9]", word):  # the '.5' of `x: 1.5` is a fraction, no directive
            message = "unexpected character '.': numbers here are integers"
        elif word.startswith("."):
            hint = f" (expected {directives})" if directives else ""
            message = f"unknown directive '{word}'{hint}"
        else:  # the character and the non-ASCII ones after it (漢字), not the ')' of '漢)'
            message = f"unexpected character '{error.char}'"
            word = rest[:1] + re.match(r"[^\s!-~]*", rest[1:]).group()
        raise SourceError(message, file, text, error.line, error.column, len(word) or 1) from None
    except lark.UnexpectedToken as error:
        token = error.token
        if token.type == "$END":
            raise SourceError("unexpected end of file", file, text, max(1, token.line or 1),
                              1) from None
        keyword = _keyword_as_name(error)
        if keyword is not None:
            raise SourceError(f"'{keyword}' is a keyword and cannot be a name", file, text,
                              keyword.line, keyword.column, len(keyword)) from None
        shown = "end of line" if token.type == "_NEWLINE" else f"'{token}'"
        hint = expectation(error.expected, names) if names else ""
        raise SourceError(f"unexpected {shown}{hint}", file, text, token.line, token.column,
                          len(str(token).strip()) or 1) from None


TOKENS_BETWEEN_REPORTS = 1024
"""Within a long line, `progress` hears again (of the lines before it) after this many tokens:
a .sq line of 600,000 tokens parses for 17 s."""


def _parsed(parser: lark.Lark, text: str, progress: Callable[[int], None] | None) -> lark.Tree:
    """`parser.parse(text)`, token by token so that `progress` hears of each line end: lark
    takes some 30 us a token, and a FLEQ routine call's 300,000-token expansion was parsed
    for 10 s without a word."""
    interactive = parser.parse_interactive(text)
    token = None
    for count, token in enumerate(interactive.iter_parse(), start=1):
        if progress is None:
            continue
        if token.type == "_NEWLINE":
            progress(token.line)
        elif count % TOKENS_BETWEEN_REPORTS == 0:
            progress(token.line - 1)
    return interactive.feed_eof(token)


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _keyword_as_name(error: lark.UnexpectedToken) -> lark.Token | None:
    """The keyword (FLEQ's if, goto, halt) a parse error shows was meant as a name: where a
    name was expected, or just before a ':' or '=' (a label, an assignment). 'halt: halt'
    said "unexpected ':'; expected end of line", 'if: 1.0' "unexpected 'if'; expected ...,
    a name", though both read as names."""
    token = error.token
    if token.type != "NAME" and "NAME" in error.expected and _WORD.fullmatch(token):
        return token
    previous = (error.token_history or [None])[-1]
    if (token.type in ("COLON", "EQUAL") and previous is not None
            and previous.type != "NAME" and _WORD.fullmatch(previous)):
        return previous
    return None
