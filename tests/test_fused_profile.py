"""examples/fused_profile.py: names numba's functions from their mangled symbols, and
refuses what it cannot run (bad arguments, too many columns, a batch beyond memory) before
compiling anything."""

from __future__ import annotations

import os

import pytest

from example_scripts import example_module, run_example

SCRIPT = "fused_profile.py"


def test_a_mangled_numba_symbol_is_named_by_its_function():
    short_name = example_module(SCRIPT).short_name
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
    done = run_example(SCRIPT, *arguments, timeout=60,
                       env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 2 and message in done.stderr
    assert "compiling" not in done.stderr
    assert not list(tmp_path.iterdir())


def test_masked_stores_and_exp2_calls_are_counted_in_a_disassembly():
    """The two costs the pass's source does not show, as `objdump -dr` prints them (lines
    from the kernels' object code before they were removed)."""
    listing = """\
    9a0f:	c4 e2 6d 2f 0c c7    	vmaskmovpd %ymm9,%ymm2,(%rdi,%rax,8)
    9a31:	c4 62 6d 2f 44 c1 e0 	vmaskmovpd %ymm0,%ymm2,-0x20(%rcx,%rax,8)
    93d8:	48 b8 00 00 00 00 00 	movabs $0x0,%rax
			93da: R_X86_64_64	exp2
    93e2:	ff d0                	call   *%rax
    9310:	c4 c1 75 59 14 c8    	vmulpd (%r8,%r9,8),%ymm1,%ymm2
			9400: R_X86_64_64	exp
"""
    assert example_module(SCRIPT).hidden_costs(listing) == (2, 1)
    plain = "    9310:	vmulpd (%r8,%r9,8),%ymm1,%ymm2\n"
    assert example_module(SCRIPT).hidden_costs(plain) == (0, 0)
