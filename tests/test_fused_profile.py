"""examples/fused_profile.py: names numba's functions from their mangled symbols, and
refuses what it cannot run (bad arguments, too many columns, a batch beyond memory) before
compiling anything."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "fused_profile.py"


def _module():
    spec = importlib.util.spec_from_file_location("fused_profile", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_mangled_numba_symbol_is_named_by_its_function():
    short_name = _module().short_name
    assert short_name("_ZN2vm7runtime5fused9_lockstepB2v2B52c8tJTIeFIjxB2Ex5ArrayIf") == \
        "_lockstep"
    assert short_name("cfunc._ZN2vm7runtime5fused16_attention_layerB3v22Exx") == \
        "_attention_layer"
    assert short_name("__ieee754_exp_fma") == "__ieee754_exp_fma"


@pytest.mark.parametrize("arguments, message", [
    (["--seconds", "0"], "--seconds: must be above 0"),
    (["--seconds", "nan"], "--seconds: must be above 0"),
    (["--columns", "5"], "at least 6"),
    (["--batch", "0"], "--batch: must be at least 1"),
    (["--columns", "100000000"], "exceed the limit"),
    (["--batch", "1000000000"], "run fewer programs at once"),
])
def test_bad_arguments_are_refused_before_anything_compiles(arguments, message, tmp_path):
    """Refused with exit 2, and the empty numba cache made for the compile (in TMPDIR) is
    gone again."""
    done = subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 2 and message in done.stderr
    assert "compiling" not in done.stderr
    assert not list(tmp_path.iterdir())
