"""examples/fleq_profile.py: lists a FLEQ pass's torch operations by their share of the
CPU time, and refuses what it cannot run before profiling anything."""

from __future__ import annotations

import re

import pytest

from example_scripts import run_example

SCRIPT = "fleq_profile.py"
ROW = re.compile(r"^\s*([\d.]+)%\s+([\d.]+)\s+([\d.]+)\s+(aten::\w+)$")


def test_it_lists_the_operations_of_a_pass_largest_share_first():
    done = run_example(SCRIPT, "calculator", "--runs", "1", "--rows", "4")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert re.match(r"calculator: \d+ passes a run, [\d.]+ ms a pass \(active evaluation",
                    lines[0])
    rows = [ROW.match(line) for line in lines[2:]]
    assert len(rows) == 4 and all(rows), lines
    shares = [float(row.group(1)) for row in rows]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 100
    assert "aten::_softmax" in {row.group(4) for row in rows}  # the sigmoid heads' softmax


@pytest.mark.parametrize("arguments, message", [
    (["nosuch.fleq"], "no FLEQ workload or file named 'nosuch.fleq'"),
    (["--runs", "0"], "--runs: must be between 1 and 1000"),
    (["--threads", "999"], "--threads: must be between 1 and 256"),
])
def test_it_refuses_what_it_cannot_run(arguments, message):
    done = run_example(SCRIPT, *arguments)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not done.stdout
