"""The exactness sweep: verdicts per cell, and its example script end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vm.tools.exactness import run_cell
from vm.tools.workloads import looping_programs, workload_geometry
from vm.machines.subleq.reference import run_reference

ROOT = Path(__file__).resolve().parents[1]


def test_workload_programs_fill_the_geometry_and_never_halt():
    geometry = workload_geometry(64, 8)
    assert geometry.columns == 64
    for program in looping_programs(geometry, 3, seed=1):
        assert len(program.instructions) + 1 == geometry.instructions
        assert not run_reference(program, max_steps=500).halted


def test_cells_are_exact_at_the_default_temperature_and_reported_when_too_cold():
    geometry = workload_geometry(32, 8)
    assert run_cell(geometry, "float32", 40).verdict == "exact"
    assert run_cell(geometry, "float32", 40, temperature=1.0).verdict == "precision error"
    assert run_cell(geometry, "float32", 40, temperature=1.0, checked=False).verdict == "WRONG"


def test_the_example_script_writes_its_tables(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "exactness_sweep.py"),
                           "--quick", "--out", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "exactness.md").read_text()
    assert "| 4 (float32) | exact" in table and "precision error" in table
    assert (tmp_path / "exactness.csv").read_text().startswith("n,N,dtype")
