"""Source errors printed as `file:line:col: message`, the line, and a caret."""

from __future__ import annotations

from pathlib import Path

import lark

from vm.common.errors import InputError


class SourceError(InputError):
    """An error at a position in a source file (printed without the `ltvm:` prefix)."""

    located = True

    def __init__(self, message: str, file: str, text: str, line: int, column: int,
                 width: int = 1) -> None:
        self.message, self.file, self.line, self.column = message, file, line, column
        lines = text.splitlines()
        source_line = lines[line - 1] if 0 < line <= len(lines) else ""
        caret = " " * (column - 1) + "^" + "~" * max(0, width - 1)
        super().__init__(f"{file}:{line}:{column}: error: {message}\n    {source_line}\n    {caret}")


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


def read_source(path: str | Path, encoding: str = "utf-8") -> str:
    """A source file's text, or InputError for a file that cannot be read or is not text."""
    try:
        return Path(path).read_text(encoding=encoding)
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not a text file") from None


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
