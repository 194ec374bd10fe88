"""`ltvm` starts without torch, numba or matplotlib where it needs none of them.

Every call builds the parser from every command module (vm/cli/__init__.py), so one heavy
top-level import anywhere costs every call seconds. Each invocation runs in a fresh
interpreter and reports which heavy modules ended up in `sys.modules`: a property, not a
timing, so it does not depend on the machine's load.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FACTORIAL = "programs/subleq/factorial.sq"
HEAVY = ("torch", "numba", "matplotlib")

WRAPPER = f"""
import contextlib, io, json, sys
from vm.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exit:
        code = exit.code
heavy = [name for name in {HEAVY!r} if name in sys.modules]
print(json.dumps({{"code": code, "out": out.getvalue(), "heavy": heavy}}))
"""


def ltvm(*argv: str) -> dict:
    """Run `ltvm ARGV` in a fresh interpreter from the repository root (so this checkout's
    `vm` is the one imported): its exit code, its stdout and the heavy modules it loaded."""
    done = subprocess.run([sys.executable, "-c", WRAPPER, *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("argv, expected", [
    (["--help"], "usage: ltvm"),
    (["--version"], "ltvm "),
    (["asm", FACTORIAL], "geometry: n="),
    (["run", FACTORIAL, "--engine", "reference"], "fact = 720"),
    (["run", "programs/fleq/calculator.fleq", "--engine", "reference"], "halted: yes"),
    (["inspect", FACTORIAL], "parameters"),
    (["bench", "--help"], "usage: ltvm bench"),
])
def test_commands_that_need_no_transformer_start_without_heavy_modules(argv, expected):
    result = ltvm(*argv)
    assert result["code"] == 0
    assert expected in result["out"]
    assert result["heavy"] == []


def test_transformer_runs_still_import_torch_and_compute():
    result = ltvm("run", FACTORIAL)
    assert result["code"] == 0
    assert "fact = 720" in result["out"]
    assert "torch" in result["heavy"]
