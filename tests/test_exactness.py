"""The exactness sweep: verdicts per cell, and its example script end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from vm.tools.exactness import run_cell, run_vsubleq_cell, self_modifying_images
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
                           "--quick", "--out", str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "exactness.md").read_text()
    assert "| 4 (float32) | exact" in table and "precision error" in table
    assert (tmp_path / "exactness.csv").read_text().startswith("n,N,dtype")


def test_random_standard_subleq_programs_rewrite_their_code_and_do_io():
    from vm.machines.vsubleq.reference import run_reference as run_standard
    kinds = set()
    for image, data in self_modifying_images(64, 16, 6, seed=2):
        words = image.memory
        code_end = next(3 * k + 3 for k in range(len(words) // 3)  # the jump back `t t 0`
                        if words[3 * k:3 * k + 3] == (3 * k + 3, 3 * k + 3, 0))
        result = run_standard(image, 300, data, trace=True)
        for record in result.trace:
            kinds.add(record.io or ("code" if record.b % image.size < code_end else "data"))
    assert kinds == {"in", "out", "code", "data"}


def test_standard_subleq_cells_are_exact_and_reported_when_too_cold():
    exact = run_vsubleq_cell(16, 8, 2, 40)
    assert (exact.programs, exact.precision_errors, exact.divergences) == (2, 0, 0)
    assert exact.steps > 40
    cold = run_vsubleq_cell(16, 8, 2, 40, temperature=1.0)
    assert cold.precision_errors == 2 and cold.divergences == 0
    wrong = run_vsubleq_cell(16, 8, 2, 40, temperature=1.0, checked=False)
    assert wrong.divergences == 2 and "divergence at step 0" in wrong.first_divergence


def test_the_example_script_writes_the_standard_subleq_table(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "exactness_sweep.py"),
                           "--machine", "vsubleq", "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    rows = [line for line in (tmp_path / "vsubleq.md").read_text().splitlines()
            if line.startswith("| 8 | 16 |")]
    assert len(rows) == 1 and rows[0].split("|")[3:8] == [" 2 ", " 60 ", " 0 ", " 0 ", " 0 "]
