"""examples/lockstep_blocks.py: times the fused batch at each block size, fits the part a
program pays alone, and refuses what it cannot run before printing anything."""

from __future__ import annotations

import pytest

from example_scripts import run_example

pytest.importorskip("numba")

SCRIPT = "lockstep_blocks.py"


def test_it_times_each_block_size_and_fits_the_shared_part():
    done = run_example(SCRIPT, "--columns", "16", "--batch", "8", "--blocks", "2,4,4",
                       "--seconds", "0.2", "--rounds", "1")
    assert done.returncode == 0, done.stderr
    rows = [line.split("|") for line in done.stdout.splitlines() if line.startswith("| ")]
    assert [row[1].strip() for row in rows[1:]] == ["2", "4"]
    assert all(float(row[2]) > 0 for row in rows[1:])
    assert "us a program-pass of its own" in done.stdout.splitlines()[-1]


@pytest.mark.parametrize("arguments, message", [
    (["--blocks", "0"], "--blocks: must be at least 1"),
    (["--columns", "5"], "at least 6"),
    (["--seconds", "0"], "--seconds: must be above 0"),
    (["--columns", "4096", "--batch", "100000000"], "run fewer programs"),
])
def test_it_refuses_what_it_cannot_run_before_printing_anything(arguments, message):
    done = run_example(SCRIPT, *arguments)
    assert done.returncode == 2 and message in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
