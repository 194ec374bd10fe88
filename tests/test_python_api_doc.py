"""docs/python_api.md runs as written: every ```python block, in order, in one namespace.

The blocks run from the repository root (the guide says so: its paths are relative to it),
each may use the names earlier ones defined, and a block that raises fails the test with
its number, its first line in the guide and its text. A ```text block that follows a
python block with only blank lines between is what that block prints: each of its lines
must appear in what the block printed, in order (lines may be left out; a line `...`
only says so; a line ending in `...` matches any printed line that starts with the rest;
numbers in e-notation, such as errors, match any such number, as their last digits
depend on the machine's summation order). Every numbered section must hold a block, so
an emptied guide fails.
"""

from __future__ import annotations

import contextlib
import io
import re
import traceback
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "python_api.md"
SECTIONS = (
    "1. Programs, punchcards and geometry",
    "2. Running a program on both engines",
    "3. Run options",
    "4. Inspecting the machine",
    "5. FLEQ and the function blocks",
    "6. Exporting the weights",
)
"""The sections that must each hold at least one python block."""
MAX_COLUMNS = 99
E_NUMBER = re.compile(r"[-+]?\d+(\.\d+)?e[-+]?\d+")


@dataclass(frozen=True)
class Block:
    section: str
    language: str
    line: int
    """The guide's line of the block's first line of text (after the fence)."""
    text: str
    after: "Block | None" = None
    """The block's output: a ```text block following it with only blank lines between."""


def blocks(text: str) -> list[Block]:
    """Every fenced block of the guide, with its section (the `## ` heading above it); a
    ```text block right after a python block (blank lines between at most) is its `after`."""
    lines = text.splitlines()
    found: list[Block] = []
    section, language, opened, closed, body = "", None, 0, None, []
    for number, line in enumerate(lines, 1):
        if language is None:
            if line.startswith("```"):
                language, opened, body = line[3:].strip(), number, []
            elif line.startswith("## "):
                section = line[3:].strip()
            continue
        if not line.startswith("```"):
            body.append(line)
            continue
        block = Block(section, language, opened + 1, "\n".join(body) + "\n")
        follows = closed is not None and not "".join(lines[closed:opened - 1]).strip()
        if (language == "text" and follows and found and found[-1].language == "python"
                and found[-1].after is None):
            found[-1] = replace(found[-1], after=block)
        found.append(block)
        language, closed = None, number
    assert language is None, f"docs/python_api.md: the block opened at line {opened} never closes"
    return found


def python_blocks() -> list[Block]:
    return [block for block in blocks(GUIDE.read_text()) if block.language == "python"]


def test_every_section_has_a_python_block():
    shown = {block.section for block in python_blocks()}
    missing = [section for section in SECTIONS if section not in shown]
    assert not missing, f"docs/python_api.md: no python block in section(s) {missing}"


def test_lines_fit_in_the_page():
    long = [number for number, line in enumerate(GUIDE.read_text().splitlines(), 1)
            if len(line) > MAX_COLUMNS]
    assert not long, f"docs/python_api.md: lines over {MAX_COLUMNS} columns: {long}"


def _normalized(line: str) -> str:
    return E_NUMBER.sub("<e>", line.rstrip())


def _output_problem(shown: str, printed: str) -> str | None:
    """Why `shown` is not what was `printed` (None when it is)."""
    lines = [_normalized(line) for line in printed.splitlines()]
    at = 0
    for wanted in shown.splitlines():
        if wanted.strip() in ("", "..."):
            continue
        wanted = _normalized(wanted)
        prefix = wanted[:-3].rstrip() if wanted.endswith("...") else None
        while at < len(lines) and not (lines[at] == wanted or prefix is not None
                                       and lines[at].startswith(prefix)):
            at += 1
        if at == len(lines):
            return f"the guide shows {wanted!r}, not printed (in this order)"
        at += 1
    return None


def test_every_python_block_runs_and_prints_what_the_guide_shows(monkeypatch):
    monkeypatch.chdir(ROOT)  # the guide's paths are relative to the repository root
    namespace: dict = {"__name__": "python_api_doc"}
    examples = python_blocks()
    assert examples, "docs/python_api.md holds no python block"
    for number, block in enumerate(examples, 1):
        where = f"docs/python_api.md, python block {number} (line {block.line})"
        printed = io.StringIO()
        try:
            # padded to its place in the guide: a traceback names the guide's own line
            code = compile("\n" * (block.line - 1) + block.text, str(GUIDE), "exec")
            with contextlib.redirect_stdout(printed):
                exec(code, namespace)
        except Exception:
            pytest.fail(f"{where} raised:\n{traceback.format_exc()}\nthe block:\n{block.text}"
                        f"\nwhat it printed:\n{printed.getvalue()}", pytrace=False)
        if block.after is not None:
            problem = _output_problem(block.after.text, printed.getvalue())
            if problem:
                pytest.fail(f"{where}: {problem}; it printed:\n{printed.getvalue()}",
                            pytrace=False)


@pytest.mark.parametrize("shown, printed, ok", [
    ("a\nb\n", "a\nx\nb\n", True),
    ("b\na\n", "a\nb\n", False),
    ("error 4.2e-10\n", "error 3.9e-10\n", True),
    ("error 4.2e-10\n", "error 0.5\n", False),
    ("divergence at step 1 ...\n", "divergence at step 1 (pc 1): m is 6\n", True),
    ("...\nz\n", "a\nz\n", True),
])
def test_output_matching(shown, printed, ok):
    assert (_output_problem(shown, printed) is None) == ok
