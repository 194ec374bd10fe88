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


class TickingClock:
    """time.monotonic standing in for the wall clock: one second a reading."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 1
        return self.now


def test_the_rerun_to_where_a_value_left_the_domain_has_max_seconds_of_its_own(
        capsys, tmp_path, monkeypatch):
    """A first run that finished within --max-seconds but used most of it was run again to
    the step where a left the machine's domain on what was left of the same clock, and the
    command failed: 'stopped by --max-seconds 100 after 2 steps', for a run that had ended."""
    import vm.cli.run
    import vm.tools.progress
    from vm.isa import FLEQ

    source = tmp_path / "grow.fleq"
    source.write_text(GROWING)
    assert main(["run", str(source), "--engine", "reference"]) == 1
    expected = capsys.readouterr().out.splitlines()[-4:]
    clock, limit = TickingClock(), 100
    monkeypatch.setattr(vm.cli.run, "time", clock)
    monkeypatch.setattr(vm.tools.progress, "time", clock)
    checks = FLEQ.run_checks

    def first_run_took_most_of_the_limit(*arguments, **options):
        clock.now = limit - 3  # the command started at 1: 2 seconds left
        return checks(*arguments, **options)
    monkeypatch.setattr(FLEQ, "run_checks", first_run_took_most_of_the_limit)
    code = main(["run", str(source), "--max-seconds", str(limit)])
    captured = capsys.readouterr()
    assert "max-seconds" not in captured.err
    assert code == 1 and captured.out.splitlines()[-4:] == expected
    assert expected[:2] == ["halted: no", "steps: 7"]


@pytest.mark.parametrize("options, named", [
    (["--noise", "0.5"], "--noise: an option"),
    (["--seed=3", "--samples", "4"], "--seed, --samples: options"),
    (["--strategy", "majority", "--reward", "reference", "--cell", "a"],
     "--strategy, --reward, --cell: options"),
])
def test_the_options_of_ltvm_sample_are_refused_by_name_as_compare_refuses_them(
        options, named, capsys):
    """`ltvm run prog --noise 0.5` said only 'unrecognized arguments: --noise 0.5', where
    `ltvm compare` named the options and said where they belong."""
    code = main(["run", GCD, *options])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err == (f"ltvm: error: {named} of `ltvm sample`; run runs the exact "
                            "transformer (--temperature is the softmax's)\n")


def test_run_works_where_numba_is_not_installed():
    """numba is an extra (`ltvm[fast]`): without it the executor imports the fused pass's
    module anyway, which once left a decorator undefined and broke every command. The
    transformer's answer is checked against the program's expected memory."""
    import json
    import subprocess
    import sys
    expected = json.loads((PROGRAMS / "subleq" / "divmod.expected.json").read_text())
    script = ("import sys; sys.modules['numba'] = None; from vm.cli import main; "
              "sys.exit(main(['run', sys.argv[1], '--json']))")
    done = subprocess.run([sys.executable, "-c", script, str(PROGRAMS / "subleq" / "divmod.sq")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert "Traceback" not in done.stderr
    assert {name: result["memory"][name] for name in expected["memory"]} == expected["memory"]
