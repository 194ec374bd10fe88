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


HADAMARD = ".data\na: 9.0\nb: 9.5\nc: 0.0\n.code\nc = hadamard(a, b)\n"


def test_a_block_parameter_given_says_the_error_bound_it_makes(capsys, tmp_path):
    """hadamard.scale=1 gave c = 33.0 for 85.5 at exit 0: within the block's bound, which the
    run never showed."""
    from vm.functions import make_block
    source = tmp_path / "hot.fleq"
    source.write_text(HADAMARD)
    main(["run", str(source), "--param", "hadamard.scale=1"])
    err = capsys.readouterr().err
    bound = make_block("hadamard", scale=1.0).error_bound("float64")
    assert bound > 1e3
    assert f"ltvm: note: with --param, the error bound of a call (float64): hadamard {bound:.2g}" \
        in err
    main(["run", str(source)])
    assert "note:" not in capsys.readouterr().err


GROWING = ".data\na: 1e14\nb: 0.0\n.code\nloop: a = add(a, a)\n      goto loop\n"


def test_a_transformer_run_stops_where_a_value_leaves_the_domain_as_the_reference_does(
        capsys, tmp_path):
    """The transformer ran on to step 30 and 'halted' (a = 2.3e18), a program that never
    halts; the reference stopped at step 7, where a left the machine's domain."""
    source = tmp_path / "grow.fleq"
    source.write_text(GROWING)
    shown = {}
    for engine in ("reference", "transformer"):
        assert main(["run", str(source), "--engine", engine]) == 1
        out = capsys.readouterr().out
        shown[engine] = [line for line in out.splitlines()
                         if line.split(":")[0] in ("domain", "halted", "steps")
                         or line.startswith(("a =", "b ="))]
    assert shown["transformer"] == shown["reference"]
    assert "halted: no" in shown["transformer"] and "steps: 7" in shown["transformer"]
