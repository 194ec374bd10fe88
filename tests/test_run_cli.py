"""`ltvm run` (vm/cli/run.py): its own options refuse what they cannot do, with one message
and exit 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from vm.cli import main

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"
GCD = str(PROGRAMS / "subleq" / "gcd.sq")


@pytest.mark.parametrize("engine", ["transformer", "reference"])
def test_trace_refuses_a_step_limit_past_a_float(engine, capsys):
    """10**400 steps at 256 bytes each was an OverflowError while the message was written."""
    code = main(["run", GCD, "--trace", "--engine", engine, "--max-steps", str(10 ** 400)])
    err = capsys.readouterr().err
    assert code == 2
    assert "--trace keeps every step" in err and "lower --max-steps" in err
