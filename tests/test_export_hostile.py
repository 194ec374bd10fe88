"""`ltvm export`, `inspect` and `asm` against hostile-but-realistic inputs: each case failed
(a traceback, a wrong exit code, a misleading text or a blow-up) before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from vm.cli import main


def test_an_onnx_export_past_2_gib_is_refused_before_the_model_is_built(tmp_path, capsys):
    """n = 16,406 masked: the n x n float64 mask alone passes protobuf's 2 GiB. The model was
    built first (about a minute and over 10 GB of memory at n = 20,000) and protobuf's
    EncodeError came out as a traceback with exit code 1."""
    pytest.importorskip("onnx")
    source = tmp_path / "big.sq"
    source.write_text(".data\nbig: .zero 16400\nz: 0\n.code\n subleq z, z\n")
    out = tmp_path / "export"
    assert main(["export", str(source), "-o", str(out), "--format", "onnx"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltvm: error: the weights take 2.01 GiB, more than one ONNX file")
    assert "--attention dense" in err and err.count("\n") == 1
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["big.sq"]


def test_asm_refuses_o_naming_the_export_csv_directory_before_writing_x(tmp_path, capsys):
    """`asm P -o D --export-csv D` with D new: -o wrote X at D, then --export-csv failed
    ('D exists and is not a directory', exit 2), leaving the X of a failed command."""
    target = tmp_path / "out"
    source = Path(__file__).resolve().parents[1] / "programs" / "subleq" / "gcd.sq"
    assert main(["asm", str(source), "-o", str(target), "--export-csv", str(target)]) == 2
    err = capsys.readouterr().err
    assert err == (f"ltvm: error: -o {target} is the --export-csv directory: X and the CSV "
                   "files cannot both go there; choose another file\n")
    assert not target.exists()
