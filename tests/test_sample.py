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
