"""examples/graph_pace.py: runs on the CPU (the graph's passes as Python calls) and refuses
what it cannot run before printing anything."""

from __future__ import annotations

import pytest

from example_scripts import run_example

SCRIPT = "graph_pace.py"


def test_it_times_the_eager_pass_in_graphs_on_the_cpu():
    done = run_example(SCRIPT, "--device", "cpu", "--batch", "1,3", "--columns", "16")
    assert done.returncode == 0, done.stderr
    rows = [line.split("|") for line in done.stdout.splitlines() if "| eager |" in line]
    assert [row[1].strip() for row in rows] == ["1", "3"]
    assert all(float(row[4]) > 0 and row[3].strip() == "-" for row in rows)


@pytest.mark.parametrize("arguments, message", [
    (["--batch", "0"], "--batch: must be at least 1"),
    (["--columns", "5"], "at least 6"),
    (["--device", "cpu", "--columns", "4096", "--batch", "100000000"], "run fewer programs"),
])
def test_it_refuses_what_it_cannot_run_before_printing_anything(arguments, message):
    done = run_example(SCRIPT, *arguments)
    assert done.returncode == 2 and message in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
