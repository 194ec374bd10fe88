"""`ltvm demo PROG`: a program the demo cannot run to its end is refused at once."""

from __future__ import annotations

import pytest

from vm.cli import main
from vm.cli import demo


def test_demo_refuses_a_program_that_never_halts_before_running_the_transformer(
        capsys, tmp_path, monkeypatch):
    """It used to run the transformer 100,000 steps, then compare a million steps in
    lockstep with no progress shown: minutes on a two-instruction loop."""
    def not_reached(*args, **kwargs):
        raise AssertionError("the transformer ran a program that does not halt")
    monkeypatch.setattr(demo, "subleq_machine", not_reached)
    loop = tmp_path / "loop.sq"
    loop.write_text(".data\nx: 0\n.code\nloop: goto loop\n")
    assert main(["demo", str(loop)]) == 2
    captured = capsys.readouterr()
    assert "does not halt within 100000 steps" in captured.err
    assert "Traceback" not in captured.err and captured.out == ""


def test_demo_refuses_a_program_of_another_instruction_set_by_its_suffix(capsys):
    """calculator.fleq was parsed as SUBLEQ: "unknown directive '.0'" at `a: 3.0`."""
    calculator = demo.FACTORIAL.parents[1] / "fleq" / "calculator.fleq"
    assert main(["demo", str(calculator)]) == 2
    captured = capsys.readouterr()
    assert "the demo runs SUBLEQ programs (.sq)" in captured.err
    assert "Traceback" not in captured.err and captured.out == ""


def test_demo_reports_the_progress_of_both_runs(capsys, monkeypatch):
    """The transformer run and the lockstep comparison ran in silence (a 40,000-step
    countdown: 15 s with nothing on stderr)."""
    heard = set()

    class Recorder:
        def __init__(self, label: str, total: int, **limits) -> None:
            self.label = label

        def __call__(self, count: int) -> None:
            heard.add(self.label)

        def done(self) -> None:
            pass

    monkeypatch.setattr(demo, "Progress", Recorder)
    assert main(["demo"]) == 0
    assert heard == {"steps", "compared steps"}


def test_demo_obeys_max_seconds(capsys):
    """The demo takes any PROG but had no --max-seconds: a wide program ran for hours."""
    assert main(["demo", "--max-seconds", "0.01"]) == 1
    captured = capsys.readouterr()
    assert "stopped by --max-seconds 0.01 after" in captured.err
    assert "Traceback" not in captured.err


def test_demo_shows_the_program_name_escaped(capsys, tmp_path):
    """An ESC in the file's name was printed raw and drove the terminal."""
    source = tmp_path / "e\x1b[31m.sq"
    source.write_text(".data\nx: 1\n.code\nsubleq x, x\n")
    assert main(["demo", str(source)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("assembled 'e\\x1b[31m.sq': 1 instructions, ") and "\x1b" not in out


def test_demo_help_says_prog_is_a_path(capsys):
    """'program to demonstrate (default: factorial)' read as a name to pick, and `ltvm demo
    gcd` then said 'cannot read gcd: No such file or directory'."""
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "a path (default: programs/subleq/factorial.sq)" in text
