"""Source errors printed as `file:line:col: message`, the line, and a caret."""

from __future__ import annotations

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
