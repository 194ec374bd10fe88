"""The export contract: three files that a 20-line numpy Eq. (1) can run.

`run_exported` below imports nothing from the project: it is what a reader
of DESIGN.md §3 would write.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vm.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run_exported(directory: Path, max_steps: int) -> tuple[list[int], int]:
    """Run an exported program with plain numpy; return (memory, pc column)."""
    weights = np.load(directory / "weights.npz", allow_pickle=False)
    layout = json.loads((directory / "layout.json").read_text())
    X = np.load(directory / "punchcard.npy", allow_pickle=False)
    meta = json.loads(str(weights["meta"]))
    pc_rows, mem_rows = (slice(*layout["fields"][layout[k]]) for k in ("pc_field", "memory_field"))
    code = lambda v: int("".join("1" if b > 0 else "0" for b in v), 2)  # noqa: E731
    for _ in range(max_steps):
        if code(X[pc_rows, layout["pc_column"]]) == layout["halt_pc"]:
            break
        for l in range(meta["layers"]):
            A = X.copy()
            for h in range(meta["heads"][l]):
                w = {k: weights[f"l{l}.h{h}.{k}"] for k in ("Q", "K", "V", "lam")}
                S = w["lam"] * (w["K"] @ X).T @ (w["Q"] @ X)
                S = S + weights[f"l{l}.h{h}.mask"] if f"l{l}.h{h}.mask" in weights else S
                P = np.exp(S - S.max(axis=0))
                A += w["V"] @ X @ (P / P.sum(axis=0))
            W1, b1, W2, b2 = (weights[f"l{l}.{k}"] for k in ("W1", "b1", "W2", "b2"))
            X = A + W2 @ np.maximum(W1 @ A + b1[:, None], 0) + b2[:, None]
    words = X[mem_rows, slice(*layout["regions"]["memory"])]
    values = [code(words[:, j]) for j in range(words.shape[1])]
    top = 1 << (layout["bits"] - 1)
    return [v - 2 * top if v >= top else v for v in values], code(X[pc_rows, layout["pc_column"]])


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
    memory, pc = run_exported(out, max_steps=1000)
    layout = json.loads((out / "layout.json").read_text())
    assert pc == layout["halt_pc"]
    assert memory == reference_memory(program)


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
