"""The export contract: three files that a 20-line numpy Eq. (1) can run.

The executor (tests/export_executor.py) imports nothing from the project: it is
what a reader of DESIGN.md §3 would write.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from export_executor import pc_code, run_exported, subleq_memory
from vm.cli import main

ROOT = Path(__file__).resolve().parents[1]


def reference_memory(program: str) -> list[int]:
    from assembler.subleq import assemble_file
    from vm.machines.subleq.reference import run_reference
    return run_reference(assemble_file(ROOT / program)).memory


@pytest.mark.parametrize("program,attention", [
    ("programs/subleq/gcd.sq", "masked"),
    ("programs/subleq/multiply.sq", "dense"),
    ("programs/subleq/reverse.sq", "masked"),
])
def test_independent_numpy_run_of_an_export_matches_the_reference(tmp_path, program, attention):
    out = tmp_path / "export"
    assert main(["export", str(ROOT / program), "-o", str(out), "--attention", attention]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["layout.json", "punchcard.npy",
                                                     "weights.npz"]
    X, layout, _ = run_exported(out, max_steps=1000)
    assert pc_code(X, layout) == layout["halt_pc"]
    assert subleq_memory(X, layout) == reference_memory(program)


def test_weights_meta_follows_the_format(tmp_path):
    out = tmp_path / "e"
    main(["export", str(ROOT / "programs/subleq/gcd.sq"), "-o", str(out)])
    weights = np.load(out / "weights.npz", allow_pickle=False)
    meta = json.loads(str(weights["meta"]))
    assert meta["format"] == "looped-transformer/1"
    assert meta["layers"] == len(meta["heads"]) == 4
    assert meta["rows"] == weights["l0.W1"].shape[1] == weights["l0.h0.V"].shape[0]
    assert weights["l0.h0.mask"].shape == (meta["columns"], meta["columns"])
    assert set(np.unique(weights["l0.h0.mask"])) == {0.0, -np.inf}
    assert meta["geometry"]["columns"] == meta["columns"]
    assert weights["l2.W1"].shape[0] == weights["l2.W2"].shape[1]


def test_export_refuses_a_directory_with_other_files_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    code = main(["export", str(ROOT / "programs/subleq/gcd.sq"), "-o", str(tmp_path)])
    assert code == 2 and "holds other files" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
