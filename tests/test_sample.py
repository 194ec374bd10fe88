"""`ltvm sample` (vm/cli/sample.py): a reward script's syntax error is a located source error."""

from __future__ import annotations

from pathlib import Path

from vm.cli import main

ROOT = Path(__file__).resolve().parents[1]
FACTORIAL = str(ROOT / "programs" / "subleq" / "factorial.sq")


def test_a_reward_script_syntax_error_names_line_and_column_with_a_caret(tmp_path, capsys):
    """Python's 'invalid syntax (reward.py, line 2)' named no column; in UTF-8 bytes it
    would put the caret two places right of each 'é' before the error."""
    script = tmp_path / "reward.py"
    script.write_text('def reward(answer):\n    return "é" +* 2\n', encoding="utf-8")
    code = main(["sample", FACTORIAL, "--cell", "fact", "--samples", "2", "--strategy",
                 "best-of-n", "--reward", str(script)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.splitlines() == [f"{script}:2:17: error: SyntaxError: invalid syntax",
                                '        return "é" +* 2',
                                " " * 20 + "^"]


def _sample_with(script: Path, capsys) -> tuple[int, list[str]]:
    code = main(["sample", FACTORIAL, "--cell", "fact", "--samples", "2", "--strategy",
                 "best-of-n", "--reward", str(script)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.splitlines()


def test_a_latin1_reward_script_without_a_coding_line_is_placed_at_its_first_bad_byte(
        tmp_path, capsys):
    """UTF-8 cannot decode it: 'UnicodeDecodeError: ... in position 37' named no line."""
    script = tmp_path / "reward.py"
    script.write_bytes(b'def reward(answer):\n    return 1 if answer == "\xe9" else 0\n')
    code, lines = _sample_with(script, capsys)
    assert code == 2
    assert lines[0] == f"{script}:2:28: error: not UTF-8 text: byte 0xe9 cannot be decoded"
    assert lines[2] == " " * 31 + "^"


def test_a_syntax_error_of_a_script_with_a_coding_line_shows_its_line(tmp_path, capsys):
    """The caret's line was read again as UTF-8, which a Latin-1 script is not: no line."""
    script = tmp_path / "reward.py"
    script.write_bytes(b'# -*- coding: latin-1 -*-\ndef reward(answer):\n    s = "\xe9"\n'
                       b'    return 1 +\n')
    code, lines = _sample_with(script, capsys)
    assert code == 2
    assert lines == [f"{script}:4:15: error: SyntaxError: invalid syntax",
                     "        return 1 +", " " * 18 + "^"]


def test_a_nul_byte_in_a_reward_script_is_placed(tmp_path, capsys):
    """Python places it nowhere ('source code string cannot contain null bytes')."""
    script = tmp_path / "reward.py"
    script.write_bytes(b"def reward(answer):\n    return 1\x00\n")
    code, lines = _sample_with(script, capsys)
    assert code == 2
    assert lines[0] == (f"{script}:2:13: error: SyntaxError: source code string cannot "
                        "contain null bytes")
    assert lines[2] == " " * 16 + "^"


def test_a_reward_script_over_the_source_cap_is_refused_unread(tmp_path, capsys, monkeypatch):
    """The script was read whole, however large."""
    import assembler.diagnostics

    monkeypatch.setattr(assembler.diagnostics, "MAX_SOURCE_BYTES", 1 << 14)  # the program fits
    script = tmp_path / "reward.py"
    script.write_text("def reward(answer):\n    return 1\n" + "#" * (1 << 14))
    code, lines = _sample_with(script, capsys)
    assert code == 2
    assert lines == [f"ltvm: error: {script}: script larger than 0.015625 MiB (the most a "
                     "source file may hold)"]
