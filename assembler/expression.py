"""Arithmetic expressions for `ltvm calc`, parsed with expression.lark into a small tree.

Each node keeps the column it starts at, so later checks (an unknown name, an
operand outside a block's domain) can point at the exact spot with a caret.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import lark

from assembler.diagnostics import MAX_NESTING, SourceError, deepest

SOURCE_NAME = "<expression>"

MAX_EXPRESSION_LENGTH = 20_000
"""Most characters an expression may have: room for MAX_OPERATORS operators with spaced
names, and little enough to parse in a fraction of a second (lark took 3 s over 130 KB)."""
MAX_OPERATORS = 2_000
"""Most operators (+ - * / % sqrt) an expression may have. Each is one or two FLEQ
instructions and two to four data cells, so the generated program stays well inside the
assembler's MAX_SOURCE_TOKENS: an 80 KB sum was refused by that limit, with a caret in the
generated program the user never wrote."""
_OPERATORS = {"PLUS", "MINUS", "STAR", "SLASH", "PERCENT", "SQRT"}
"""The lexer's names of the operator tokens (each gives one Operation node)."""


@dataclass(frozen=True)
class Node:
    column: int
    width: int


@dataclass(frozen=True)
class Number(Node):
    value: float


@dataclass(frozen=True)
class Name(Node):
    name: str


@dataclass(frozen=True)
class Operation(Node):
    """An operator applied to operands: op is one of add sub mul div neg percent sqrt."""

    op: str
    operands: tuple[Node, ...]


@cache
def _parser() -> lark.Lark:
    grammar = (Path(__file__).with_name("expression.lark")).read_text()
    return lark.Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=False)


def parse_expression(text: str) -> Node:
    """The tree of `text`, or a SourceError with a caret at the first bad character."""
    if "\n" in text:
        raise SourceError("an expression is one line", SOURCE_NAME, text,
                          1, text.index("\n") + 1)
    if not text.strip():
        raise SourceError("empty expression", SOURCE_NAME, text, 1, 1)
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise SourceError(f"expression longer than {MAX_EXPRESSION_LENGTH:,} characters; "
                          f"split it with --set", SOURCE_NAME, text, 1,
                          MAX_EXPRESSION_LENGTH + 1)
    try:
        tree = _parser().parse(text)
    except lark.UnexpectedCharacters as error:
        raise SourceError(f"unexpected character {text[error.column - 1]!r}", SOURCE_NAME,
                          text, 1, error.column) from None
    except lark.UnexpectedToken as error:
        token = error.token
        if token.type == "$END":
            raise SourceError("unexpected end of expression", SOURCE_NAME, text,
                              1, len(text) + 1) from None
        raise SourceError(f"unexpected '{token}'", SOURCE_NAME, text, 1, token.column,
                          len(str(token))) from None
    if isinstance(tree, lark.Tree):
        depth, node = deepest(tree)
        if depth > MAX_NESTING:
            raise SourceError(f"expression nested more than {MAX_NESTING} levels deep (each "
                              f"term of a + - * / chain is a level); split it with --set",
                              SOURCE_NAME, text, 1, node.meta.column)
    _check_operator_count(text)
    return _node(tree)


def _check_operator_count(text: str) -> None:
    """SourceError at the first operator past MAX_OPERATORS (`text` parses)."""
    operators = (token for token in _parser().lex(text) if token.type in _OPERATORS)
    for count, token in enumerate(operators, start=1):
        if count > MAX_OPERATORS:
            raise SourceError(f"more than {MAX_OPERATORS:,} operators, the most one "
                              f"calculation compiles; split it with --set", SOURCE_NAME,
                              text, 1, token.column, len(token))


def _node(tree: lark.Tree | lark.Token) -> Node:
    if tree.data == "number":
        token = tree.children[0]
        return Number(token.column, len(token), float(token))
    if tree.data == "name":
        token = tree.children[0]
        return Name(token.column, len(token), str(token))
    operands = tuple(_node(c) for c in tree.children if isinstance(c, lark.Tree))
    column = tree.meta.column
    return Operation(column, max(1, tree.meta.end_column - column), str(tree.data), operands)
