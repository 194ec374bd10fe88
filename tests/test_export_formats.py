"""`ltvm export --format safetensors|onnx`: the ecosystem's formats run to the reference.

safetensors exports are run by the independent numpy executor (tests/export_executor.py);
pass.onnx is run by onnxruntime in a Python loop until the pc code equals halt_pc.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from export_executor import (eq1_pass, fleq_variable, load_export, pc_code, run_exported,
                             run_passes, subleq_memory)
from vm.cli import main
from vm.isa import FLEQ
from vm.machines.fleq.reference import run_fleq_reference

ROOT = Path(__file__).resolve().parents[1]
LOOP = """.d 2
.data
n: 3
one: 1
A: .matrix 2x2 [[0.5, -1.25], [2.0, 0.1]]
B: .matrix 2x2 [[-0.3, 0.7], [1e-3, 4.5]]
v: .vector [1.5, -2.25]
w: .vector [1.0, 1.0]
S: .zeros 2x2
.code
loop: S = add(S, A)
      S = sub(S, B)
      v = sub(v, v)
      v = add(v, w)
      n = sub(n, one)
      if n <= 0 goto done
      goto loop
done: halt
"""


def export(tmp_path: Path, program: Path, fmt: str, *options: str) -> Path:
    out = tmp_path / fmt
    assert main(["export", str(program), "-o", str(out), "--format", fmt, *options]) == 0
    return out


def subleq_reference(program: str) -> list[int]:
    from assembler.subleq import assemble_file
    from vm.machines.subleq.reference import run_reference
    return run_reference(assemble_file(ROOT / program)).memory


def fleq_program(tmp_path: Path) -> Path:
    source = tmp_path / "loop.fleq"
    source.write_text(LOOP)
    return source


def assert_fleq_matches_reference(X: np.ndarray, layout: dict, passes: int) -> None:
    program = FLEQ.assemble_text(LOOP, "loop.fleq")
    reference = run_fleq_reference(program)
    assert pc_code(X, layout) == layout["halt_pc"]
    assert passes == reference.steps == 3 * 7 - 1 + 1  # 3 rounds of 7, the last without goto
    expected = program.named_memory(reference.cells)
    assert expected["n"] == 0 and np.all(np.asarray(expected["v"]) == 1)
    for name, value in expected.items():
        shape = layout["memory_names"][name]["shape"]
        np.testing.assert_array_equal(fleq_variable(X, layout, name),
                                      np.atleast_2d(value).reshape(shape), err_msg=name)


# safetensors


@pytest.mark.parametrize("program,attention", [
    ("programs/subleq/gcd.sq", "masked"),
    ("programs/subleq/multiply.sq", "dense"),
    ("programs/subleq/factorial.sq", "masked"),
])
def test_a_safetensors_export_runs_to_the_subleq_reference(tmp_path, program, attention):
    pytest.importorskip("safetensors")
    out = export(tmp_path, ROOT / program, "safetensors", "--attention", attention)
    assert sorted(p.name for p in out.iterdir()) == ["layout.json", "punchcard.npy",
                                                     "weights.safetensors"]
    X, layout, _ = run_exported(out, max_steps=1000)
    assert pc_code(X, layout) == layout["halt_pc"]
    assert subleq_memory(X, layout) == subleq_reference(program)


def test_a_safetensors_export_runs_a_fleq_loop_to_the_reference_exactly(tmp_path):
    pytest.importorskip("safetensors")
    out = export(tmp_path, fleq_program(tmp_path), "safetensors")
    X, layout, passes = run_exported(out, max_steps=100)
    assert layout["dtype"] == "float64" and X.dtype == np.float64
    assert_fleq_matches_reference(X, layout, passes)


def test_safetensors_holds_the_npz_tensors_and_meta(tmp_path):
    pytest.importorskip("safetensors")
    program = ROOT / "programs/subleq/gcd.sq"
    npz, meta, layout, X = load_export(export(tmp_path, program, "npz"))
    tensors, st_meta, st_layout, st_X = load_export(export(tmp_path, program, "safetensors"))
    assert sorted(tensors) == sorted(npz) and "l0.h0.mask" in tensors
    for name, array in npz.items():
        assert tensors[name].dtype == array.dtype, name
        np.testing.assert_array_equal(tensors[name], array, err_msg=name)
    assert st_meta == meta and meta["format"] == "looped-transformer/1"
    assert st_layout == layout
    np.testing.assert_array_equal(st_X, X)


# ONNX


def onnx_step(directory: Path):
    """One pass of pass.onnx in onnxruntime, as a function of X."""
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(directory / "pass.onnx"),
                                   providers=["CPUExecutionProvider"])
    (given,), (returned,) = session.get_inputs(), session.get_outputs()
    assert (given.name, returned.name) == ("X", "X_next")
    return lambda X: session.run(None, {"X": X})[0]


@pytest.mark.parametrize("program,attention", [
    ("programs/subleq/factorial.sq", "masked"),
    ("programs/subleq/reverse.sq", "dense"),
])
def test_pass_onnx_in_onnxruntime_runs_to_the_subleq_reference(tmp_path, program, attention):
    pytest.importorskip("onnx")
    out = export(tmp_path, ROOT / program, "onnx", "--attention", attention)
    assert sorted(p.name for p in out.iterdir()) == ["layout.json", "pass.onnx",
                                                     "punchcard.npy"]
    layout = json.loads((out / "layout.json").read_text())
    X, passes = run_passes(onnx_step(out), np.load(out / "punchcard.npy"), layout, 2000)
    assert pc_code(X, layout) == layout["halt_pc"] and 0 < passes < 2000
    assert subleq_memory(X, layout) == subleq_reference(program)


def test_pass_onnx_runs_a_fleq_loop_in_float64_to_the_reference_exactly(tmp_path):
    pytest.importorskip("onnx")
    out = export(tmp_path, fleq_program(tmp_path), "onnx")
    layout = json.loads((out / "layout.json").read_text())
    X = np.load(out / "punchcard.npy")
    assert X.dtype == np.float64
    X, passes = run_passes(onnx_step(out), X, layout, 100)
    assert X.dtype == np.float64
    assert_fleq_matches_reference(X, layout, passes)


@pytest.mark.parametrize("program", ["programs/subleq/factorial.sq", "loop.fleq"])
def test_one_onnx_pass_agrees_with_the_numpy_pass_to_rounding(tmp_path, program):
    pytest.importorskip("onnx")
    source = fleq_program(tmp_path) if program == "loop.fleq" else ROOT / program
    weights, meta, layout, X = load_export(export(tmp_path, source, "npz"))
    step = onnx_step(export(tmp_path, source, "onnx"))
    for _ in range(5):  # the punchcard and states a few passes in, where values are mixed
        expected, got = eq1_pass(weights, meta, X), step(X)
        assert got.shape == expected.shape == (meta["rows"], meta["columns"])
        assert got.dtype == expected.dtype == np.float64
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
        assert not np.array_equal(expected, X)
        X = expected


def test_pass_onnx_has_the_documented_graph(tmp_path):
    onnx = pytest.importorskip("onnx")
    out = export(tmp_path, ROOT / "programs/subleq/gcd.sq", "onnx")
    model = onnx.load(str(out / "pass.onnx"))
    onnx.checker.check_model(model)
    meta = json.loads({p.key: p.value for p in model.metadata_props}["meta"])
    assert meta["format"] == "looped-transformer/1" and meta["layers"] == 4
    operators = {node.op_type for node in model.graph.node}
    assert operators == {"MatMul", "Add", "Mul", "Softmax", "Relu", "Transpose"}
    assert {a.i for node in model.graph.node if node.op_type == "Softmax"
            for a in node.attribute if a.name == "axis"} == {0}
    initializers = {t.name for t in model.graph.initializer}
    assert {"l0.h0.Q", "l0.h0.lam", "l3.W2", "l3.b2", "mask"} <= initializers
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [meta["rows"], meta["columns"]]


# files and errors


@pytest.mark.parametrize("fmt,package,extra", [("onnx", "onnx", "onnx"),
                                               ("safetensors", "safetensors", "formats")])
def test_a_missing_package_names_its_extra_and_writes_nothing(tmp_path, capsys, monkeypatch,
                                                              fmt, package, extra):
    monkeypatch.setitem(sys.modules, package, None)
    monkeypatch.setitem(sys.modules, f"{package}.numpy", None)
    out = tmp_path / "export"
    code = main(["export", str(ROOT / "programs/subleq/gcd.sq"), "-o", str(out),
                 "--format", fmt])
    assert code == 2 and f"pip install 'ltvm[{extra}]'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_export_in_another_format_replaces_the_previous_one(tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("safetensors")
    program = ROOT / "programs/subleq/gcd.sq"
    out = tmp_path / "export"
    for fmt, weights in [("npz", "weights.npz"), ("onnx", "pass.onnx"),
                         ("safetensors", "weights.safetensors"), ("npz", "weights.npz")]:
        assert main(["export", str(program), "-o", str(out), "--format", fmt]) == 0
        assert sorted(p.name for p in out.iterdir()) == sorted(
            ["layout.json", "punchcard.npy", weights])


def test_export_help_documents_the_formats(capsys):
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    text = capsys.readouterr().out
    for word in ("--format", "weights.safetensors", "pass.onnx", "X_next", "ltvm[onnx]",
                 "ltvm[formats]"):
        assert word in text
