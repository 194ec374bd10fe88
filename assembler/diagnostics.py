"""Source errors printed as `file:line:col: message`, the line, and a caret."""

from __future__ import annotations

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
