"""FLEQ lockstep comparison: per-write error rows, branch divergences, and the CLI."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from vm.isa import FLEQ
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.cli import main
from vm.runtime.compare import compare_fleq
from vm.common.errors import PrecisionError
from vm.runtime.executor import EngineConfig, Runner, TransformerExecutor
from fleq_sources import GROW

ROOT = Path(__file__).resolve().parents[1]
CALCULATOR = ROOT / "programs" / "fleq" / "calculator.fleq"
LOOP = """.data
n: 2
one: 1
x: 0.5
.code
loop: x = add(x, x)
      n = sub(n, one)
      if n <= 0 goto done
      goto loop
done: halt
"""


@pytest.fixture(scope="module")
def calculator():
    program = FLEQ.assemble_file(CALCULATOR)
    return program, fleq_geometry_for(program)


def code_lines(path: Path) -> list[str]:
    """The statements of a .fleq file, comments stripped."""
    code = path.read_text().split(".code", 1)[1]
    return [line.split(";")[0].strip() for line in code.splitlines() if line.split(";")[0].strip()]


def test_calculator_passes_with_one_row_per_written_value(calculator):
    program, geometry = calculator
    result = compare_fleq(program, geometry, 100)
    assert result.ok and result.halted and result.steps == 7 and result.branch is None
    statements = code_lines(CALCULATOR)
    exact = [8.0, 7.0, 14.0, 1 / 14, math.sqrt(1 / 14), math.sqrt(1 / 14) / 100]
    assert [(e.step, e.pc, e.cell) for e in result.errors] == [(i, i, "t") for i in range(6)]
    assert [e.instruction for e in result.errors] == statements[:6]
    for error, value in zip(result.errors, exact, strict=True):
        assert error.reference[0, 0] == pytest.approx(value, rel=1e-15)
        difference = abs(error.transformer[0, 0] - error.reference[0, 0])
        assert error.absolute == difference
        assert error.relative == pytest.approx(difference / abs(value), rel=1e-12)
    assert result.errors[0].absolute == result.errors[1].absolute == 0.0, "add and sub exact"
    assert result.errors[2].local_absolute == result.errors[2].absolute, "mul of exact operands"
    assert result.max_absolute == max(e.absolute for e in result.errors)
    assert result.max_relative == max(e.relative for e in result.errors)


def inject_counter(monkeypatch, program, geometry, after_step: int, value: float) -> None:
    """Overwrite counter n on the transformer after one step (a fault the reference lacks)."""
    real_advance = Runner.advance
    column = geometry.cell_column(program.variables["n"].cell)

    def faulty_advance(self, max_steps, progress=None):
        before = self.done
        real_advance(self, max_steps, progress)
        if before <= after_step < self.done:
            with torch.inference_mode():  # the runner's X is an inference tensor
                self.X[self.executor.layout.row("mem", 0), :, column] = value
            if self.active is not None:  # X changed in place, as after Runner.restart
                self.active.restart()

    monkeypatch.setattr(Runner, "advance", faulty_advance)


def test_a_branch_that_differs_is_reported_with_step_instruction_and_both_targets(monkeypatch):
    program = FLEQ.assemble_text(LOOP, "loop.fleq")
    geometry = fleq_geometry_for(program)
    inject_counter(monkeypatch, program, geometry, after_step=1, value=0.0)
    result = compare_fleq(program, geometry, 100)
    assert not result.ok and not result.halted and result.steps == 3
    branch = result.branch
    assert (branch.step, branch.pc, branch.field) == (2, 2, "pc")
    assert branch.instruction == "if n <= 0 goto done"
    assert (branch.reference, branch.transformer) == (3, program.labels["done"])
    counter = result.errors[-1]
    assert (counter.step, counter.cell, counter.absolute) == (1, "n", 1.0)


def test_a_too_low_temperature_is_a_precision_error_or_without_checks_a_divergence():
    program = FLEQ.assemble_text(LOOP, "loop.fleq")
    geometry = fleq_geometry_for(program)
    with pytest.raises(PrecisionError, match="precision error at step 0"):
        compare_fleq(program, geometry, 100, EngineConfig(temperature=1.0))
    result = compare_fleq(program, geometry, 100, EngineConfig(temperature=1.0, checked=False))
    assert not result.ok and result.branch.reference != result.branch.transformer


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(.+?)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$")


def test_cli_compare_prints_a_row_per_write_and_an_ok_line(capsys, calculator):
    program, geometry = calculator
    code, out, err = run_cli(capsys, "compare", str(CALCULATOR))
    assert code == 0 and "Traceback" not in err
    header, *rows, last = out.strip().splitlines()
    assert header.split() == ["step", "pc", "instruction", "cell", "abs", "error", "rel",
                              "error", "block", "alone"]
    expected = compare_fleq(program, geometry, 100)
    assert len(rows) == len(expected.errors) == 6
    for row, error in zip(rows, expected.errors):
        step, pc, instruction, cell, absolute, relative, local = ROW.match(row).groups()
        assert (int(step), int(pc), instruction, cell) == \
            (error.step, error.pc, error.instruction, error.cell)
        for shown, value in ((absolute, error.absolute), (relative, error.relative),
                             (local, error.local_absolute)):
            assert float(shown) == pytest.approx(value, rel=5e-3, abs=0.0)
    assert last.startswith("OK: branches agree for 7 steps (halted); max abs error ")
    numbers = re.findall(r"error ([0-9.e+-]+)", last)
    assert [float(n) for n in numbers] == pytest.approx(
        [expected.max_absolute, expected.max_relative], rel=5e-3)


def test_cli_compare_json(capsys):
    code, out, _ = run_cli(capsys, "compare", str(CALCULATOR), "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["halted"] and data["steps"] == 7
    assert [w["instruction"] for w in data["writes"]] == code_lines(CALCULATOR)[:6]
    assert data["branch_divergence"] is None
    assert data["max_abs_error"] == max(w["abs_error"] for w in data["writes"])


def test_cli_compare_reports_a_branch_divergence_and_exits_1(capsys, monkeypatch, tmp_path):
    path = tmp_path / "loop.fleq"
    path.write_text(LOOP)
    program = FLEQ.assemble_text(LOOP, str(path))
    inject_counter(monkeypatch, program, fleq_geometry_for(program), after_step=1, value=0.0)
    code, out, _ = run_cli(capsys, "compare", str(path))
    assert code == 1
    assert out.strip().splitlines()[-1] == (
        "branch divergence at step 2 (pc 2: if n <= 0 goto done): pc is 3 on the reference, "
        "4 on the transformer")


def test_cli_inspect_reports_seventeen_layers_against_the_papers_twenty_two(capsys):
    code, out, _ = run_cli(capsys, "inspect", str(CALCULATOR))
    assert code == 0
    lines = out.splitlines()
    assert any(line.startswith("total: 17 layers") for line in lines)
    assert "paper (Theorem 2: 9 + max(l_i)): 22 layers" in lines
    code, out, _ = run_cli(capsys, "inspect", str(CALCULATOR), "--json")
    data = json.loads(out)
    deepest = max(block["layers"] for block in data["blocks"])
    assert data["totals"]["layers"] == 4 + deepest == 17
    assert data["paper"]["layers"] == 9 + deepest == 22
    assert np.array_equal([row["layer"] for row in data["layers"]], np.arange(17))


def test_relative_errors_are_normwise_so_exact_zeros_of_a_matrix_stay_finite():
    source = """.d 2
.data
A: .matrix 2x2 [[1.5, 0.0], [0.0, 2.5]]
P: .zeros 2x2
.code
P = matmul_tn(A, A)
halt
"""
    program = FLEQ.assemble_text(source, "diag.fleq")
    result = compare_fleq(program, fleq_geometry_for(program), 10)
    (error,) = result.errors
    assert 0 < error.absolute < 1e-3
    assert error.relative == pytest.approx(error.absolute / 6.25, rel=1e-12)


def test_float32_runs_get_the_products_float32_eps_below_the_files_own_headers(capsys):
    code, out, _ = run_cli(capsys, "compare", str(ROOT / "programs/fleq/calculator.fleq"),
                           "--dtype", "float32", "--json")
    automatic = json.loads(out)
    code_forced, out, _ = run_cli(capsys, "compare", str(ROOT / "programs/fleq/calculator.fleq"),
                                  "--dtype", "float32", "--json", "--param", "mul.scale=1e-4",
                                  "--param", "percentage.scale=1e-3")
    forced = json.loads(out)
    assert code == code_forced == 0
    assert automatic["max_rel_error"] < forced["max_rel_error"] / 10
    header = ".function mul scale=2e-4\n" + LOOP_WITH_MUL
    program = FLEQ.assemble_text(header, "h.fleq", defaults={"mul": {"scale": 5e-3}})
    assert dict(dict(program.functions)["mul"])["scale"] == 2e-4
    program = FLEQ.assemble_text(LOOP_WITH_MUL, "h.fleq", defaults={"mul": {"scale": 5e-3}})
    assert dict(dict(program.functions)["mul"])["scale"] == 5e-3


LOOP_WITH_MUL = """.data
x: 1.5
y: 2.0
.code
y = mul(x, y)
halt
"""


def test_compare_stops_where_doubling_leaves_the_magnitude_domain():
    """Past 2^50 the transformer's blocks break isolation (another cell changes, after
    step 101); the comparison names the cause, the domain, at the step that left it."""
    source = (".data\nx: 1.0\nk: -69\none: 1\n.code\nloop: k = add(k, one)\n"
              "      x = add(x, x) if k <= 0 goto loop\n      halt\n")
    program = FLEQ.assemble_text(source, "double.fleq")
    result = compare_fleq(program, fleq_geometry_for(program), 1000)
    assert not result.ok and result.branch is None and result.steps == 102
    assert result.domain.startswith("step 101: x = add(x, x) if k <= 0 goto loop leaves "
                                    "the machine's domain")


def test_compare_fails_when_a_cell_the_instruction_does_not_write_changes(monkeypatch):
    program = FLEQ.assemble_text(LOOP, "loop.fleq")
    geometry = fleq_geometry_for(program)
    inject_counter(monkeypatch, program, geometry, after_step=0, value=5.0)
    result = compare_fleq(program, geometry, 100)
    assert not result.ok and result.steps == 1 and result.domain is None
    assert result.branch.field == "cell n (not written by this instruction)"


def test_cli_compare_fails_where_the_reference_leaves_the_machines_domain(capsys, tmp_path):
    path = tmp_path / "grow.fleq"
    path.write_text(GROW.format(op="mul"))
    code, out, err = run_cli(capsys, "compare", str(path), "--json")
    data = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
    assert code == 1 and not data["ok"] and data["steps"] == 1 and "Warning" not in err
    assert data["domain"].startswith("step 0: a = mul(a, a) leaves the machine's domain")
    code, out, _ = run_cli(capsys, "compare", str(path))
    assert code == 1 and out.strip().splitlines()[-1].startswith(
        "domain: step 0: a = mul(a, a) leaves the machine's domain")


def test_cli_compare_fails_where_a_block_is_called_outside_its_domain(capsys, tmp_path):
    """sqrt(-4) is outside sqrt's domain: the transformer's number carries no bound there, so
    compare fails as run does (it printed OK beside a relative error of inf)."""
    path = tmp_path / "negative.fleq"
    path.write_text(".data\nx: 1.0\nz: -4.0\ny: 0.0\n.code\nx = sqrt(x)\ny = sqrt(z)\n")
    code, out, _ = run_cli(capsys, "compare", str(path))
    lines = out.strip().splitlines()
    assert code == 1 and len(lines) == 4 and "OK" not in out
    assert lines[-1].startswith("domain: step 1: y = sqrt(z) leaves sqrt's domain")
    code, out, _ = run_cli(capsys, "compare", str(path), "--json")
    data = json.loads(out)
    assert code == 1 and not data["ok"] and data["steps"] == 2 and len(data["writes"]) == 2


def test_compare_json_turns_non_finite_figures_into_null():
    from vm.runtime.compare import FleqComparison, FleqStepError
    row = FleqStepError(0, 0, "a = mul(a, a)", "a", math.inf, math.nan, math.inf,
                        np.array([[math.inf]]), np.array([[1.0]]))
    text = FLEQ.compare_report(FleqComparison(1, False, [row], None, "step 0: ..."), True)
    data = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
    assert data["max_abs_error"] is None and data["writes"][0]["rel_error"] is None
    assert data["writes"][0]["transformer"] == [[None]] and not data["ok"]


def test_a_write_whose_exact_value_is_0_does_not_make_the_max_relative_error_infinite():
    """power_to_convergence's step 283 writes 6.5e-12 where the exact value is 0: the OK
    line said "max rel error inf". Such writes have no relative error (as in `ltvm calc`):
    they are counted apart, with their absolute error."""
    from vm.runtime.compare import FleqComparison, FleqStepError
    close = FleqStepError(0, 0, "y = mul(a, b)", "y", 2e-12, 1e-12, 2e-12,
                          np.array([[2.0]]), np.array([[2.0 + 2e-12]]))
    zero = FleqStepError(1, 1, "z = sub(a, a)", "z", 6.5e-12, math.inf, 6.5e-12,
                         np.array([[6.5e-12]]), np.array([[0.0]]))
    result = FleqComparison(2, True, [close, zero], None)
    assert result.max_relative == 1e-12 and result.exact_zero_writes == [zero]
    *rows, last = FLEQ.compare_report(result, False).splitlines()
    assert ROW.match(rows[-1]).group(6) == "none"
    assert last.endswith("max rel error 1e-12 (1 write of an exact 0 not counted: "
                         "abs error 6.5e-12)")
    data = json.loads(FLEQ.compare_report(result, True))
    assert data["max_rel_error"] == 1e-12 and data["exact_zero_writes"] == 1


def test_compare_fleq_refuses_a_subleq_program_and_a_negative_max_steps():
    """The SUBLEQ program failed with "'Program' object has no attribute 'variables'"."""
    from assembler.subleq import assemble
    from vm.common.errors import InputError
    from vm.runtime.compare import compare_fleq
    program = FLEQ.assemble_text(".data\na: 1.0\n.code\n halt\n")
    geometry = fleq_geometry_for(program)
    with pytest.raises(InputError, match="runs FLEQ programs"):
        compare_fleq(assemble(".data\nx: 1\n.code\nhalt\n", "x.sq"), geometry, 10)
    with pytest.raises(InputError, match="max_steps"):
        compare_fleq(program, geometry, -1)


@pytest.mark.parametrize("source", ["subleq/gcd.sq", "vsubleq/echo.vsq"])
def test_compare_fleq_refuses_another_machines_program_and_geometry(source):
    """A SUBLEQ program on its own geometry loaded, then failed in the FLEQ reference with
    "'Program' object has no attribute 'functions'"."""
    from vm.common.errors import InputError
    from vm.isa import ProgramOptions, for_path
    path = ROOT / "programs" / source
    program, geometry = for_path(str(path)).load(path, ProgramOptions())
    with pytest.raises(InputError, match="compare_fleq compares FLEQ programs"):
        compare_fleq(program, geometry, 10)


def test_a_progress_that_is_not_a_function_is_refused():
    """compare_fleq(..., progress=5) failed with "'int' object is not callable" after the
    first step."""
    from vm.common.errors import InputError
    program = FLEQ.assemble_text(".data\na: 3.0\nb: 2.0\nc: 0.0\n.code\nc = mul(a, b)\nhalt\n")
    with pytest.raises(InputError, match="progress"):
        compare_fleq(program, fleq_geometry_for(program), 10, progress=5)


def test_the_domain_replay_goes_no_further_than_the_comparison(monkeypatch):
    """compare replayed all of --max-steps exactly before its first step (and its first
    --max-seconds check): `compare loop.fleq --max-steps 100000000 --max-seconds 3` took
    3 min 49 s. Here the progress stops the comparison after 5 steps of 100,000."""
    from vm.machines.fleq import reference
    from vm.tools.progress import TimeLimitExceeded
    program = FLEQ.assemble_text(".data\nx: 1\n.code\nl: goto l\n")
    steps = []
    exact_step = reference.FleqReference.step
    monkeypatch.setattr(reference.FleqReference, "step",
                        lambda self: steps.append(1) or exact_step(self))

    def progress(count):
        if count >= 5:
            raise TimeLimitExceeded("stop")
    with pytest.raises(TimeLimitExceeded):
        compare_fleq(program, fleq_geometry_for(program), 100_000, progress=progress)
    assert len(steps) <= 2 * 6  # the comparison's reference and the domain watch's


def test_a_block_alone_outside_its_domain_warns_nothing():
    """`compare` of `x = inv(z)` with z = 0 printed numpy's 'divide by zero' RuntimeWarning
    over the table (the block-alone column is computed outside np.errstate)."""
    import warnings
    program = FLEQ.assemble_text(".data\nz: 0.0\nx: 0.0\n.code\nx = inv(z)\nhalt\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = compare_fleq(program, fleq_geometry_for(program), 10)
    assert not result.ok and "leaves the machine's domain" in result.domain


def test_compare_runs_the_evaluation_the_config_asks(monkeypatch, calculator):
    """compare stepped the full pass whatever --evaluation said (run and bench use the
    active one, which skips the blocks the instruction does not select)."""
    from vm.runtime.active_fleq import FleqActiveEvaluator
    passes = []
    active_step = FleqActiveEvaluator.step_
    monkeypatch.setattr(FleqActiveEvaluator, "step_",
                        lambda self, *args, **kw: passes.append(1) or active_step(self, *args,
                                                                                   **kw))
    program, geometry = calculator
    result = compare_fleq(program, geometry, 100, EngineConfig(evaluation="active"))
    assert result.ok and result.halted and len(passes) == result.steps
