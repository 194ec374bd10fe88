"""`ltvm sample --reward SCRIPT.py` under --max-seconds: the script's calls are counted and
timed like every other stage (a slow verifier ran past the limit with no word and exit 0:
0.5 s a call for 31 distinct answers took 19 s against --max-seconds 4)."""

from __future__ import annotations

import json
import time

from vm.cli import main

TINY = ".bits 8\n.data\na: 5\nb: 3\nc: 7\n.code\n    subleq a, b\n    subleq c, b\n    halt\n"
"""Two steps: at --noise 1 its 8 samples answer several distinct values (seed 0)."""


def test_a_slow_reward_script_is_stopped_by_max_seconds(tmp_path, capsys):
    program = tmp_path / "tiny.sq"
    program.write_text(TINY)
    script = tmp_path / "slow.py"
    script.write_text("import time\ndef reward(answer):\n    time.sleep(2.5)\n    return 0.0\n")
    started = time.monotonic()
    code = main(["sample", str(program), "--cell", "b", "--noise", "1", "--samples", "8",
                 "--max-steps", "20", "--strategy", "best-of-n", "--reward", str(script),
                 "--max-seconds", "2"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "stopped by --max-seconds 2 after 1 reward call," in err
    assert time.monotonic() - started < 30  # it called every distinct answer before


def test_a_quick_reward_script_still_decides(tmp_path, capsys):
    program = tmp_path / "tiny.sq"
    program.write_text(TINY)
    script = tmp_path / "quick.py"
    script.write_text("def reward(answer):\n    return 1.0 if answer == -9 else 0.0\n")
    code = main(["sample", str(program), "--cell", "b", "--noise", "0.01", "--samples", "8",
                 "--max-steps", "20", "--strategy", "best-of-n", "--reward", str(script),
                 "--max-seconds", "60", "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 0 and payload["answer"] == -9 and payload["chosen_reward"] == 1.0
