"""`ltvm export` of FLEQ programs, run by an independent numpy Eq. (1).

The runner (`RUNNER`, a separate Python process) and `read_cell` import nothing
from the project: they are what a reader of layout.json and `ltvm export --help`
would write. That the run
reproduces the reference shows no f_m is computed outside the forward pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vm.isa import FLEQ
from vm.apps.calc import calculate
from vm.cli import main
from vm.machines.fleq.reference import run_fleq_reference
from vm.functions import make_block

ROOT = Path(__file__).resolve().parents[1]
CALCULATOR = ROOT / "programs" / "fleq" / "calculator.fleq"
EXPRESSION = "sqrt(1/(((a+b)-c)*d))/100"


def pc_value(X: np.ndarray, layout: dict) -> int:
    bits = X[slice(*layout["fields"][layout["pc_field"]]), layout["pc_column"]]
    return int("".join("1" if b > 0 else "0" for b in bits), 2)


def read_cell(X: np.ndarray, layout: dict, cell: int) -> np.ndarray:
    """Cell `cell` as a d x d matrix (layout.json: cell_start + cell * d, memory_field rows)."""
    start = layout["cell_start"] + cell * layout["d"]
    return X[slice(*layout["fields"][layout["memory_field"]]), start:start + layout["d"]]


RUNNER = """
import sys
from pathlib import Path
import numpy as np
sys.path.insert(0, sys.argv[4])
from export_executor import code, eq1_pass, load_export

directory, max_steps, trace = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
weights, meta, layout, X = load_export(directory)
pc_rows = slice(*layout["fields"][layout["pc_field"]])
states = [X]
while code(X[pc_rows, layout["pc_column"]]) != layout["halt_pc"] and len(states) <= max_steps:
    X = eq1_pass(weights, meta, X)
    states.append(X)
assert not any(name == "vm" or name.startswith(("vm.", "assembler")) for name in sys.modules)
np.save(trace, np.stack(states))
"""
"""X <- TF(X) by Eq. (1) with tests/export_executor.py (numpy only) until pc == halt_pc,
saving X before the first pass and after each. It runs in a fresh Python process that
imports nothing from the project (and asserts so), with one BLAS thread: on a loaded
machine BLAS threads spin."""


def run_exported(directory: Path, max_steps: int, tmp_path: Path) -> list[np.ndarray]:
    """Every X of the independent run (the punchcard first)."""
    trace = tmp_path / "states.npy"
    environment = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                   "MKL_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", RUNNER, str(directory), str(max_steps), str(trace),
                    str(Path(__file__).parent)], check=True, env=environment, cwd=tmp_path)
    return list(np.load(trace))


def export(tmp_path: Path, program: Path, *options: str) -> tuple[Path, dict]:
    out = tmp_path / "export"
    assert main(["export", str(program), "-o", str(out), *options]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["layout.json", "punchcard.npy",
                                                     "weights.npz"]
    return out, json.loads((out / "layout.json").read_text())


def named(X: np.ndarray, layout: dict, name: str) -> np.ndarray:
    variable = layout["memory_names"][name]
    rows, columns = variable["shape"]
    return read_cell(X, layout, variable["cell"])[:rows, :columns]


def test_the_exported_calculator_computes_algorithm_3_within_the_bound(tmp_path):
    out, layout = export(tmp_path, CALCULATOR)
    program = FLEQ.assemble_file(CALCULATOR)
    blocks = {name: make_block(name, **dict(values)) for name, values in program.functions}
    states = run_exported(out, 20, tmp_path)
    checked = []
    for before, after in zip(states, states[1:]):
        # the written cell is the block's reference on the operands this run read, within
        # the block's documented bound: f_m happened inside Eq. (1)
        instruction = program.instructions[pc_value(before, layout) - layout["instruction_start"]]
        if instruction.function is None:
            continue
        block = blocks[instruction.function]
        (ha, wa), (hb, wb) = instruction.a_shape, instruction.b_shape
        a = read_cell(before, layout, instruction.a)[:ha, :wa]
        b = read_cell(before, layout, instruction.b)[:hb, :wb] if block.arity == 2 else None
        exact = block.reference(a, b)
        rows, columns = instruction.shape
        got = read_cell(after, layout, instruction.c)[:rows, :columns]
        assert np.all(np.abs(got - exact) <= block.bound_at("float64", exact)), \
            (instruction.text, got, exact)
        checked.append(instruction.function)
    X = states[-1]
    assert pc_value(X, layout) == layout["halt_pc"]
    reference = run_fleq_reference(program)
    assert len(states) - 1 == reference.steps == len(program.instructions)
    assert checked == ["add", "sub", "mul", "inv", "sqrt", "percentage"]
    inputs = {name: float(named(X, layout, name)[0, 0]) for name in "abcd"}
    calculation = calculate(EXPRESSION, inputs)
    t = float(named(X, layout, "t")[0, 0])
    exact = float(reference.cells[program.variables["t"].cell][0, 0])
    assert exact == pytest.approx(np.sqrt(1 / (((3 + 5) - 1) * 2)) / 100, rel=1e-15)
    assert 0 < abs(t - exact) <= calculation.bound
    assert t == pytest.approx(calculation.transformer, rel=1e-12)


LOOP = """.d 2
.data
n: 4
one: 1
A: .matrix 2x2 [[0.1, -0.7], [1.3, 2.9]]
B: .matrix 2x2 [[0.3, 0.2], [-0.001, 7.1]]
v: .vector [1.5, -2.25]
S: .zeros 2x2
.code
loop: S = add(S, A)
      S = sub(S, B)
      v = add(v, v)
      n = sub(n, one)
      if n <= 0 goto done
      goto loop
done: halt
"""


@pytest.mark.parametrize("attention", ["masked", "dense"])
def test_an_exported_counter_loop_over_matrices_matches_the_reference_exactly(tmp_path,
                                                                              attention):
    source = tmp_path / "loop.fleq"
    source.write_text(LOOP)
    out, layout = export(tmp_path, source, "--attention", attention)
    program = FLEQ.assemble_text(LOOP, str(source))
    reference = run_fleq_reference(program)
    states = run_exported(out, 100, tmp_path)
    X, steps = states[-1], len(states) - 1
    assert pc_value(X, layout) == layout["halt_pc"]
    assert steps == reference.steps == 4 * 5 + 3 + 1  # 4 passes of 5, 3 gotos, halt
    expected = program.named_memory(reference.cells)
    for name, value in expected.items():
        np.testing.assert_array_equal(named(X, layout, name), np.atleast_2d(value).reshape(
            layout["memory_names"][name]["shape"]), err_msg=name)
    assert expected["n"] == 0
    assert (weights_mask_present(out)) == (attention == "masked")


def weights_mask_present(directory: Path) -> bool:
    return "l0.h0.mask" in np.load(directory / "weights.npz").files


def test_fleq_layout_describes_cells_pc_and_halt(tmp_path):
    out, layout = export(tmp_path, CALCULATOR)
    program = FLEQ.assemble_file(CALCULATOR)
    meta = json.loads(str(np.load(out / "weights.npz")["meta"]))
    X = np.load(out / "punchcard.npy")
    assert layout["machine"] == "fleq" and layout["encoding"] == "real"
    assert meta["format"] == "looped-transformer/1" and meta["layers"] == 17
    assert X.shape == (meta["rows"], meta["columns"]) == (layout["rows"], layout["columns"])
    memory = layout["regions"]["memory"]
    assert memory == [layout["cell_start"], layout["cell_start"] + layout["cells"] * layout["d"]]
    assert layout["halt_pc"] == layout["columns"] - 1
    pc_rows = layout["fields"][layout["pc_field"]]
    assert layout["bits"] == pc_rows[1] - pc_rows[0] and 2 ** layout["bits"] > layout["columns"]
    assert pc_value(X, layout) == layout["instruction_start"] == layout["regions"][
        "instructions"][0]
    for name, variable in program.variables.items():
        assert named(X, layout, name).tolist() == program.cells[variable.cell][
            :variable.shape[0], :variable.shape[1]].tolist()


def test_export_help_documents_the_fleq_layout(capsys):
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    text = capsys.readouterr().out
    for word in ("cell_start", "memory_names", "halt_pc", "FLEQ", "encoding \"real\""):
        assert word in text


def test_export_refuses_a_temperature_whose_moves_are_not_exact(tmp_path, capsys):
    """As run does: weights whose moves leak would be exported silently otherwise."""
    source = tmp_path / "loop.fleq"
    source.write_text(LOOP)
    out = tmp_path / "export"
    assert main(["export", str(source), "-o", str(out), "--temperature", "5"]) == 1
    assert "not exact in float64" in capsys.readouterr().err and not out.exists()
    assert main(["export", str(source), "-o", str(out), "--temperature", "746"]) == 0
