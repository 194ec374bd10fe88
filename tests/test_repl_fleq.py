"""The REPL on FLEQ programs, driven through `Repl.execute` and checked against the
reference interpreter (FleqReference) and numpy, never against the REPL's own output."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
import torch

from vm.isa import FLEQ
from vm.cli import main
from vm.machines.fleq.reference import FleqReference
from vm.repl.session import Repl

torch.set_num_threads(1)

LOOP = """\
.d 2
.function inv terms=16
.data
v:      .vector [1.0, 2.0]
w:      .zeros 2x1
M:      .matrix 2x2 [[1.0, 2.0], [3.0, 4.0]]
x:      4.0
y:      0.0
k:      -2
one:    1
.code
top:    w = add(w, v)
        k = add(k, one)
        y = inv(x) if k <= 0 goto top
        halt
"""
NUMBER = r"-?\d+(?:\.\d*)?(?:e[-+]\d+)?"


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "loop.fleq"
    path.write_text(LOOP)
    return path


@pytest.fixture
def session(source, tmp_path) -> Repl:
    repl = Repl(picture_dir=tmp_path / "pictures")
    assert repl.execute(f"load {source}").startswith(f"loaded {source}: 4 instructions")
    return repl


def reference_after(steps: int) -> FleqReference:
    reference = FleqReference(FLEQ.assemble_text(LOOP, "loop.fleq"))
    for _ in range(steps):
        reference.step()
    return reference


def cell(reference: FleqReference, name: str) -> np.ndarray:
    """The reference's value of variable `name`, trimmed to its shape."""
    variable = reference.program.variables[name]
    rows, columns = variable.shape
    return reference.cells[variable.cell][:rows, :columns]


def printed(repl: Repl, name: str) -> np.ndarray:
    """The numbers `print NAME` shows, as an array."""
    out = repl.execute(f"print {name}")
    assert not out.startswith("error"), out
    return np.array([float(number) for number in re.findall(NUMBER, out.split("=", 1)[1])])


def test_step_and_print_follow_the_reference(session):
    out = session.execute("step 4")
    assert out.startswith("step 4  pc 1  k = add(k, one)")
    reference = reference_after(4)
    assert np.allclose(printed(session, "w"), cell(reference, "w").ravel(), atol=1e-9)
    assert printed(session, "k") == [-1]
    assert printed(session, "y") == pytest.approx([0.25], abs=0.02), "inv's sigmoid sum"
    matrix = session.execute("print M").splitlines()
    assert matrix[0] == "M (2x2) =" and len(matrix) == 3, "one line per matrix row"
    assert np.array_equal(printed(session, "M"), [1, 2, 3, 4])
    everything = session.execute("print")
    assert [line.split()[0] for line in everything.splitlines() if "=" in line] == \
        ["v", "w", "M", "x", "y", "k", "one"]


def test_break_on_a_label_watch_run_continue_delete(session):
    assert session.execute("break top") == "breakpoint 1 at 0 (top)"
    first = session.execute("continue")
    assert first.startswith("breakpoint 1 at 0 (top)") and "step 3  pc 0 (top)" in first
    assert session.execute("watch w").startswith("watch 2: w = [[1.] [2.]]")
    assert session.execute("watch w") == "error: watch 2 is already on w"
    session.execute("delete 1")
    out = session.execute("continue")
    assert out.startswith("watch 2: w = [[2.] [4.]] (was [[1.] [2.]])")
    assert "step 4  pc 1" in out
    assert session.execute("watch y").startswith("watch 3: y = ")
    assert session.execute("delete 2") == "deleted watch 2"
    out = session.execute("continue")
    assert out.startswith("the program has halted"), "inv(x) gives y the same value again"
    out = session.execute("run")
    assert out.startswith("watch 3: y = ") and "(was 0)" in out and "step 3  pc 0" in out
    session.execute("delete")
    out = session.execute("continue")
    assert out.startswith("the program has halted (pc at EOF)")
    reference = FleqReference(FLEQ.assemble_text(LOOP, "loop.fleq"))
    result = reference.run(100)
    assert f"step {result.steps}  pc 4 (EOF)" in out
    assert np.allclose(printed(session, "w"), result.cells[3][:2, 0], atol=1e-9)
    assert np.allclose(result.cells[3][:2, 0], [3, 6])


def test_pc_and_list_show_fleq_instructions_with_labels(session):
    session.execute("break 2")
    session.execute("step")
    assert session.execute("pc") == "step 1  pc 1  k = add(k, one)"
    listing = session.execute("list").splitlines()
    assert listing[0].split() == ["0", "top:", "w", "=", "add(w,", "v)"]
    assert listing[1].startswith(" =>") and listing[2].startswith("b ")
    assert listing[-1].split()[-1] == "EOF"


def test_set_scalars_and_matrices_then_the_blocks_use_them(session):
    assert session.execute("set x 0.5").startswith("x = 0.5 (was 4)")
    assert session.execute("set v [[3], [-1]]").startswith("v = [[ 3.] [-1.]]")
    assert session.execute("set M [[0, 1], [1, 0]]").startswith("M = ")
    session.execute("step 3")
    assert np.allclose(printed(session, "w"), [3, -1], atol=1e-9)
    assert printed(session, "y") == pytest.approx([2.0], rel=0.05), "16 sigmoid terms"
    for engine in ("transformer", "reference"):
        session.execute(f"engine {engine}")
        assert np.array_equal(printed(session, "M"), [0, 1, 1, 0])
    assert printed(session, "@one") == [1]
    assert np.array_equal(printed(session, "cell1"), [1, 0, 0, 0]), "a whole d x d cell"
    for bad, why in (("set x", "usage: set NAME VALUE"),
                     ("set M [[1, 2]]", "the value has shape 1x2, the variable is 2x2"),
                     ("set v [1, 2", "'[1, 2' is not a number or a list of numbers"),
                     ("set nope 1", "no variable named 'nope'"),
                     ("set x nan", "'nan' is not a number"),
                     ("set @one 2", "cell @one is reserved"),
                     ("set cell0 1", "the value has shape scalar, the variable is 2x2"),
                     ("print cell99", "no variable named 'cell99'")):
        assert session.execute(bad).startswith(f"error: {why}"), bad


@pytest.mark.parametrize("value", ["True", '"5"', "None", "[[3], [True]]", "1j", "0x10",
                                   "1_0", "0o7", "[0b1, 2]"])
def test_set_takes_numbers_only(session, value):
    """`set x True` stored 1 and `set x "5"` stored 5 (numpy converts both); `set x None`
    said "values must be finite"; `set x 0x10` stored 16 and `set x 1_0` 10, as Python reads
    them, where a .fleq source holds no such number."""
    name = "v" if value.startswith("[") else "x"
    assert session.execute(f"set {name} {value}") == (f"error: '{value}' is not a number or "
                                                      "a list of numbers")


@pytest.mark.parametrize("line, stored", [
    ("set x 007", [7]), ("set k -007", [-7]), ("set v [01, 002.5]", [1, 2.5]),
    ("set x 1" + "0" * 14, [1e14]), ("set x +3", [3]), ("set x 5.", [5]), ("set x .5", [0.5]),
])
def test_set_reads_numbers_as_the_assembler_does(session, line, stored):
    """`set x 007` said "'007' is not a number or a list of numbers" (Python's literals
    refuse leading zeros), where a .fleq source holds `x: 007` as 7."""
    name = line.split()[1]
    assert session.execute(line).startswith(f"{name} = ")
    assert printed(session, name).ravel().tolist() == stored


@pytest.mark.parametrize("line, message", [
    ("set x 1e-400", "1e-400 is below 2.23e-308, the smallest normal double: the machine "
                     "flushes it to 0 (write 0)"),
    ("set v [1, -5e-999]", "5e-999 is below 2.23e-308"),
    ("set x 1" + "0" * 5000, "values must lie within |x| <= 2^50"),
    ("set v [1, -1" + "0" * 5000 + "]", "values must lie within |x| <= 2^50"),
    ("set x - 3", "'- 3' is not a number or a list of numbers"),
    ("set x 1e5e5", "'1e5e5' is not a number or a list of numbers"),
])
def test_set_refuses_numbers_the_assembler_refuses(session, line, message):
    """`set x 1e-400` stored 0 without a word, where the assembler refuses the literal (it is
    0 only after float64 rounds it away); an integer past 4,300 digits was "not a number"."""
    out = session.execute(line)
    assert out.startswith("error: ") and message in out and "\n" not in out
    assert printed(session, "x") == [4] and printed(session, "v").ravel().tolist() == [1, 2]


def test_typed_instructions_run_once_through_the_machine_and_keep_the_pc(session):
    session.execute("step")
    out = session.execute("w = add(v, v)")
    assert out.splitlines()[0] == "executed w = add(v, v) (pc stays at 1)"
    assert np.allclose(printed(session, "w"), [2, 4], atol=1e-9)
    assert session.execute("y = inv(x)").startswith("executed")
    assert printed(session, "y") == pytest.approx([0.25], abs=0.02)
    assert session.execute("pc").startswith("step 1  pc 1")
    theirs, variables = session.machine.state("reference").memory, session.machine.program.variables
    assert np.array_equal(theirs[variables["w"].cell][:2, 0], [2, 4])
    assert theirs[variables["y"].cell][0, 0] == 0.25, "the reference ran the typed inv exactly"
    errors = {"w = matmul(M, v)": "the machine has only the blocks add, inv",
              "y = add(x)": "'add' takes 2 operands, got 1",
              "y = add(v, v)": "2x1 but 'y' is 1x1",
              "y = add(x, zz)": "zz"}
    for line, message in errors.items():
        out = session.execute(line)
        assert out.startswith("error: ") and message in out and "\n" not in out, out
    reference = reference_after(1)
    session.execute("engine reference")
    assert printed(session, "k") == cell(reference, "k").ravel()


def test_diff_shows_each_variable_with_its_error_against_the_reference(session):
    session.execute("step 3")
    lines = session.execute("diff").splitlines()
    assert lines[0] == "step 3: the program counters agree"
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert list(rows) == ["v", "w", "M", "x", "y", "k", "one"]
    transformer_y, reference_y, error = map(float, rows["y"][1:])
    assert reference_y == 1 / 4, "the reference computes inv exactly"
    assert error == pytest.approx(abs(transformer_y - reference_y), rel=1e-2, abs=1e-12)
    assert 0 < error < 0.02
    assert rows["M"][1:3] == ["2x2", "matrix"] and float(rows["M"][-1]) == 0


def test_engine_switch_and_info(session):
    session.execute("step 3")
    assert session.execute("engine reference").startswith("engine: reference")
    session.execute("step")
    assert session.execute("engine transformer").startswith("engine: transformer")
    assert printed(session, "w") == pytest.approx([2, 4], abs=1e-9)
    info = session.execute("info").splitlines()
    model = session.machine.executor.model
    assert f"transformer: {len(model.layers)} layers" in "\n".join(info)
    assert "dtype: float64  device: cpu  attention: masked" in info
    assert any(line.startswith("temperature: ") for line in info)
    assert any("blocks: add(), inv(" in line for line in info)


def test_completion_offers_variables_and_the_machines_blocks(session):
    assert session.completions("o") == ["one"]
    assert session.completions("y = i") == ["inv"]
    assert session.completions("y = inv(") == sorted(["v", "w", "M", "x", "y", "k", "one"])
    assert session.completions("y = add(x, o") == ["one"]
    assert session.completions("print M") == ["M"]


def test_show_draws_fleq_pictures(session, tmp_path):
    assert session.execute("show X") == f"wrote {tmp_path / 'pictures' / 'step0000_X.png'}"
    assert session.execute("show attn 0") == \
        f"wrote {tmp_path / 'pictures' / 'step0000_layer0.png'}"
    assert (tmp_path / "pictures" / "step0000_layer0.png").stat().st_size > 0


def test_the_repl_command_loads_a_fleq_program(source, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("sys.stdin", io.StringIO("step 9\nprint w\nquit\n"))
    assert main(["repl", str(source), "--history", str(tmp_path / "history")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"loaded {source}")
    assert out[-3] == "w (2x1) ="
    shown = [float(number) for line in out[-2:] for number in re.findall(NUMBER, line)]
    assert np.allclose(shown, cell(reference_after(9), "w").ravel(), atol=1e-9)


def test_set_refuses_non_integers_and_unrepresentable_values_in_a_counter(session):
    for value, message in (("2.5", "'k' is an integer counter; 2.5 is not an integer"),
                           ("1e20", "values must lie within |x| <= 2^50")):
        out = session.execute(f"set k {value}")
        assert out.startswith("error: ") and message in out, out
    for engine in ("transformer", "reference"):
        session.execute(f"engine {engine}")
        assert printed(session, "k") == [-2], "a refused set changes nothing"
    assert session.execute("set k 7").startswith("k = 7 (was -2)")
    assert session.execute("set x 2.5").startswith("x = 2.5"), "reals take finite values"


@pytest.mark.parametrize("value", ["1e300", "99999999999999999999999999", "1" + "0" * 400,
                                   "-1125899906842625", "[[3], [1e300]]"])
def test_set_refuses_values_beyond_the_assemblers_magnitude(session, value):
    """|x| > 2^50 was stored, and the next step overflowed to NaN cells and a wild pc."""
    name = "v" if value.startswith("[") else "x"
    out = session.execute(f"set {name} {value}")
    assert out.startswith("error: values must lie within |x| <= 2^50") and "\n" not in out
    assert session.execute(f"set x {2.0 ** 50!r}").startswith("x = "), "the limit itself"


def test_print_set_and_diff_show_every_digit_of_a_large_integer(session):
    """Ten significant digits showed `set k 12345678901` as 1.23456789e+10, a number no
    cell held; a matrix entry of 12345678 read 1.234568e+07."""
    assert session.execute("set k 12345678901") == "k = 12345678901 (was -2)"
    assert printed(session, "k") == [12345678901]
    assert session.execute("set M [[12345678, 1], [2, 3]]").startswith("M = ")
    assert printed(session, "M")[0] == 12345678
    row = next(line for line in session.execute("diff").splitlines() if line.startswith("k "))
    assert row.split()[1:3] == ["12345678901", "12345678901"]


def test_a_watch_on_a_nan_cell_stops_only_when_it_changes(tmp_path):
    """NaN != NaN: once a block outside its domain left u NaN, `watch u` stopped every step
    ('u = nan (was nan)') and every step listed u as changed."""
    path = tmp_path / "nan.fleq"
    path.write_text(".data\nz: 0.0\nt: 0.0\nu: 0.0\nk: -3\none: 1\n.code\n"
                    "    t = inv(z)\n    u = sub(t, t)\ntop: k = add(k, one)\n"
                    "    t = add(z, z) if k <= 0 goto top\n    halt\n")
    repl = Repl(engine="reference", picture_dir=tmp_path / "pictures")
    repl.execute(f"load {path}")
    repl.execute("step")  # each stops: its block leaves its domain
    repl.execute("step")
    assert repl.execute("print u") == "u = nan"
    repl.execute("watch u")
    out = repl.execute("continue").splitlines()
    assert out[0] == "the program has halted (pc at EOF)", out
    assert not any(line.startswith("  u =") for line in out), out


def test_set_refuses_the_assemblers_read_only_constant_cells(tmp_path):
    """`set _const_2.0 5` was stored: every literal 2.0 of the program then meant 5."""
    path = tmp_path / "const.fleq"
    path.write_text(".data\nt: 0.0\n.code\n    t = add(t, 2.0)\n    halt\n")
    repl = Repl(picture_dir=tmp_path / "pictures")
    repl.execute(f"load {path}")
    cell = repl.machine.program.variables["_const_2.0"].cell
    for line in ("set _const_2.0 5", f"set cell{cell} 5"):
        assert repl.execute(line) == "error: '_const_2.0' is the assembler's own read-only cell"
    repl.execute("step")
    assert printed(repl, "t") == pytest.approx([2.0], abs=1e-9)


def test_cell_names_take_ascii_digits_only(session):
    """`print cell²` raised int()'s ValueError ('error: ValueError: invalid literal ...'),
    and `set cell٣ 1` wrote cell 3."""
    for name in ("cell\u00b2", "cell\u0663"):
        assert session.execute(f"set {name} 1") == f"error: no variable named '{name}'"
    assert session.execute("print cell3").startswith("cell3 (2x2) =")


@pytest.mark.parametrize("line", ["set x 1e-320", "set x -5e-324", "set v [[1], [1e-310]]"])
def test_set_refuses_subnormal_values_as_the_assembler_does(session, line):
    """The transformer flushes a subnormal to 0: `set x 1e-320` was stored, and the next
    typed instruction turned x to 0 on the transformer only."""
    out = session.execute(line)
    assert out.startswith("error: ") and "below 2.23e-308, the smallest normal double" in out
    assert printed(session, "x") == [4] and printed(session, "v").tolist() == [1, 2]


def test_a_typed_literal_the_program_lacks_is_named(session):
    """`y = add(x, 3.5)` said 'type exactly one instruction (no label, no routine, no new
    cells)': it named neither the literal nor why a cell was needed."""
    assert session.execute("y = add(x, 3.5)") == (
        "error: it needs a cell the program lacks (_const_3.5): a typed instruction can "
        "use only the literals the program uses")
    assert session.execute("k = add(k, one)").startswith("executed")
    assert printed(session, "k") == [-1] and printed(session, "y") == [0]


def test_a_typed_branch_on_a_real_says_it_compiles_to_several_instructions(tmp_path):
    """It said 'no label, no routine, no new cells' for a line with none of them."""
    path = tmp_path / "real.fleq"
    path.write_text(".data\nx: 1.0\nn: 1\n.code\ntop: n = add(n, n)\n"
                    "    n = add(n, n) if x <= 0 goto top\n    halt\n")
    repl = Repl(picture_dir=tmp_path / "pictures")
    assert repl.execute(f"load {path}").startswith("loaded")
    assert repl.execute("n = add(n, n) if x <= 0 goto top") == (
        "error: type exactly one instruction (no label, no routine, no branch on a real: "
        "it compiles to several)")


def test_set_says_when_the_transformers_dtype_cannot_hold_the_value(source, tmp_path):
    """float32 stored 16777217 as 16777216 on the transformer alone; `set` showed the
    rounded number as if it were the one typed, and the engines differed without a word."""
    from vm.runtime.config import EngineConfig

    repl = Repl(EngineConfig(dtype="float32"), picture_dir=tmp_path / "pictures")
    repl.execute(f"load {source}")
    assert repl.execute("set x 16777217").splitlines() == [
        "x = 16777216 (was 4)",
        "note: float32 holds 16777216 on the transformer; the reference keeps 16777217"]
    assert repl.execute("set x 2.5") == "x = 2.5 (was 16777216)", "held exactly: no note"


def test_a_typed_instruction_outside_its_blocks_domain_is_refused_like_run_flags_it(session):
    session.execute("set x 1000")
    out = session.execute("y = inv(x)")
    assert out.startswith("error: not run: its operands leave inv's domain") and \
        "0.1 <= |a| <= 100" in out, out
    for engine in ("transformer", "reference"):
        session.execute(f"engine {engine}")
        assert printed(session, "y") == [0], "nothing was written"
    session.execute("set x 4")
    assert session.execute("y = inv(x)").startswith("executed")


def test_a_typed_result_beyond_the_machines_magnitude_is_refused(session):
    """add(x, x) at x = 2^50 wrote 2^51, past where the blocks stay isolated, unflagged."""
    session.execute(f"set x {2.0 ** 50!r}")
    out = session.execute("y = add(x, x)")
    assert out == ("error: not run: its result leaves the machine's domain (every value "
                   "within |x| <= 2^50, finite), where its error bound does not hold")
    assert printed(session, "y") == [0]


def test_a_step_that_leaves_a_domain_stops_and_says_so(session):
    """`step` and `continue` ran such a call like any other: the transformer's inv(1000)
    and everything after it went on without an error bound and without a word."""
    session.execute("set x 1000")
    out = session.execute("continue").splitlines()
    assert out[0] == ("step 2: y = inv(x) if k <= 0 goto top: its operands leave inv's "
                      "domain (0.1 <= |a| <= 100 (widen it with --param inv.low=L or --param "
                      "inv.high=H)), where its error bound does not hold (see diff)")
    assert out[1].startswith("step 3  pc 0 (top)")
    session.execute("reset")
    assert session.execute("continue").splitlines()[0] == \
        "the program has halted (pc at EOF)", "inside every domain: no word"


def test_a_typed_copy_is_an_exact_add_of_the_zero_cell(session):
    out = session.execute("w = v")
    assert out.splitlines()[0].startswith("executed w = v"), out
    assert np.array_equal(printed(session, "w"), [1, 2])


def test_float32_flushes_and_lost_counts_are_flagged_as_run_flags_them(source, tmp_path):
    """In float32, k = add(k, one) at k = 2^24 left k at 2^24 and add(x, x) at x = 1e-40
    gave 0 while the reference counted on and gave 2e-40: `ltvm run` names both as leaving
    the machine's domain, the REPL stepped and typed them without a word."""
    from vm.runtime.config import EngineConfig

    repl = Repl(EngineConfig(dtype="float32"), picture_dir=tmp_path / "pictures")
    repl.execute(f"load {source}")
    repl.execute("set k 16777216")
    assert repl.execute("k = add(k, one)") == (
        "error: not run: it leaves the machine's domain (counters within |n| <= 2^24 in "
        "float32), where its error bound does not hold")
    assert printed(repl, "k") == [16777216], "nothing was written"
    assert repl.execute("step 2").splitlines()[0] == (
        "step 1: k = add(k, one): it leaves the machine's domain (counters within |n| <= "
        "2^24 in float32), where its error bound does not hold (see diff)")
    tiny = tmp_path / "tiny.fleq"
    tiny.write_text(".data\nx: 1e-40\ny: 0.0\n.code\ny = add(x, x)\nhalt\n")
    repl.execute(f"load {tiny}")
    assert repl.execute("step").splitlines()[0] == (
        "step 0: y = add(x, x): it leaves the machine's domain (nonzero |x| >= 1.18e-38 in "
        "float32; smaller values flush to 0), where its error bound does not hold (see diff)")


def test_set_refuses_what_float32_holds_only_as_a_subnormal(source, tmp_path):
    """`set M [[1e-40, 1], [2, 3]]` in float32 was taken; the next pass, which did not
    write M, flushed its 1e-40 to 0 on the transformer alone."""
    from vm.runtime.config import EngineConfig

    repl = Repl(EngineConfig(dtype="float32"), picture_dir=tmp_path / "pictures")
    repl.execute(f"load {source}")
    assert repl.execute("set M [[1e-40, 1], [2, 3]]") == (
        "error: 1e-40 is below 1.18e-38, the smallest normal float32: the machine flushes "
        "it to 0 (write 0)")
    assert np.array_equal(printed(repl, "M"), [1, 2, 3, 4])
    assert repl.execute("set x 2e-38").startswith("x = 2")


def test_set_of_a_whole_cell_keeps_its_variables_padding_zero(tmp_path):
    """`set cell2 [[3, 7], [7, 7]]` at x = 3 wrote the padding beside x; the blocks read
    whole cells, so matmul(x, y) gave 92 on the transformer, 3 * 5 = 15 on the reference,
    and `step` said nothing."""
    path = tmp_path / "pad.fleq"
    path.write_text(".d 2\n.data\nx: 3.0\ny: 5.0\nz: 0.0\n.code\nz = matmul(x, y)\nhalt\n")
    repl = Repl(picture_dir=tmp_path / "pictures")
    repl.execute(f"load {path}")
    cell = repl.loaded.program.variables["x"].cell
    assert repl.execute(f"set cell{cell} [[3, 7], [7, 7]]") == (
        f"error: cell{cell} holds x (1x1): its entries outside that must stay 0 (the blocks "
        "read whole cells); set x instead")
    assert repl.execute(f"set cell{cell} [[4, 0], [0, 0]]").startswith(f"cell{cell} = ")
    repl.execute("step")
    assert printed(repl, "z") == pytest.approx([4 * 5], abs=1e-6)


def test_a_block_whose_parameters_bound_nothing_is_flagged_as_run_flags_it(tmp_path):
    """With `.function mul scale=1e-50` the transformer wrote -1.4e31 into z and into both
    operands (the reference: 2 * 3 = 6); `ltvm run` names the block's domain, the REPL ran
    the typed and the stepped call without a word."""
    path = tmp_path / "unbounded.fleq"
    path.write_text(".function mul scale=1e-50\n.data\nx: 2.0\ny: 3.0\nz: 0.0\n.code\n"
                    "z = mul(x, y)\nhalt\n")
    repl = Repl(picture_dir=tmp_path / "pictures")
    repl.execute(f"load {path}")
    out = repl.execute("z = mul(x, y)")
    assert out.startswith("error: not run: it leaves mul's domain (none at scale=1e-50"), out
    assert printed(repl, "z") == [0] and printed(repl, "x") == [2], "nothing was run"
    out = repl.execute("step").splitlines()[0]
    assert out.startswith("step 0: z = mul(x, y): it leaves mul's domain (none at scale=1e-50")
    assert out.endswith("where its error bound does not hold (see diff)")


def test_switching_to_a_float32_transformer_says_which_reals_it_could_not_take_over(
        source, tmp_path):
    """`engine transformer` after `set x 0.1` on the reference said 'resynchronized' while
    float32 held x as 0.1000000015 and the reference 0.1: the engines still differed."""
    from vm.runtime.config import EngineConfig

    repl = Repl(EngineConfig(dtype="float32"), engine="reference",
                picture_dir=tmp_path / "pictures")
    repl.execute(f"load {source}")
    repl.execute("set x 0.1")
    held = f"{float(np.float32(0.1)):.10g}"
    out = repl.execute("engine transformer").splitlines()
    assert "resynchronized" not in out[0] and "still differ" in out[0], out
    assert out[1:] == [f"  x = {held} on the transformer, 0.1 on the reference"]
    assert printed(repl, "x") == [float(held)]
    repl.execute("engine reference")
    assert repl.execute("engine transformer") == \
        "engine: transformer (both engines agree at step 0)", "float32 values: taken exactly"


def test_set_takes_one_entry_of_a_vector_or_matrix_by_index(session):
    """`set v [1] 5` said "'[1] 5' is not a number", and `set v[1] 5` "no variable named
    'v[1]'", where the SUBLEQ REPL sets xs[1]: a vector could only be set whole."""
    assert session.execute("set v [1] 5") == "v[1] = 5 (was 2)"
    assert session.execute("set M[1, 0] 9") == "M[1, 0] = 9 (was 3)"
    assert session.execute("set M [0][1] -3") == "M[0, 1] = -3 (was 2)"
    for engine in ("reference", "transformer"):
        session.execute(f"engine {engine}")
        assert printed(session, "v").tolist() == [1, 5]
        assert printed(session, "M").tolist() == [1, -3, 9, 4]
        assert printed(session, "M[1, 0]").tolist() == [9]
    assert session.execute("set M [1] 3") == (
        "error: 'M' is a 2x2 matrix: name an entry as M[ROW, COLUMN]")
    assert session.execute("set v [2] 1") == "error: [2] is outside 'v' (2x1; indices from 0)"
    assert session.execute("set v [3, 4]").startswith("v = "), "a literal still sets it whole"
    assert printed(session, "v").tolist() == [3, 4]
    session.execute("step")
    assert printed(session, "w").tolist() == [3, 4], "w = add(w, v) from w = 0"


def test_a_typed_call_in_a_program_without_blocks_says_it_has_none(tmp_path):
    """It said 'error: the machine has only the blocks ' and named nothing."""
    path = tmp_path / "noblocks.fleq"
    path.write_text(".data\nx: 2.0\n.code\nhalt\n")
    repl = Repl(picture_dir=tmp_path / "pictures")
    repl.execute(f"load {path}")
    assert repl.execute("x = add(x, x)") == (
        "error: the machine has no blocks: the program calls none, and a typed instruction "
        "can call only the program's")
    assert printed(repl, "x") == [2]


def test_switching_refuses_to_hand_the_transformer_a_value_it_cannot_hold(tmp_path):
    """On the reference, inv(0) is inf; `engine transformer` wrote it into X and said
    'resynchronized', and every later step failed with 'X must be finite'."""
    path = tmp_path / "inf.fleq"
    path.write_text(".data\nx: 0.0\ny: 0.0\nz: 1.0\n.code\ny = inv(x)\nz = add(z, z)\nhalt\n")
    repl = Repl(engine="reference", picture_dir=tmp_path / "pictures")
    repl.execute(f"load {path}")
    repl.execute("step")
    assert repl.execute("print y") == "y = inf"
    assert repl.execute("engine transformer") == (
        "error: cannot resynchronize: the reference holds inf in y, which the transformer "
        "cannot hold in float64 (set it, or reset)")
    assert repl.execute("engine") == "engine: reference"
    assert repl.execute("step").splitlines()[0] == "step 2  pc 2  halt"
    assert printed(repl, "z") == [2]
    repl.execute("set y 1")
    assert repl.execute("engine transformer").startswith("engine: transformer (")
    assert printed(repl, "z") == pytest.approx([2], abs=1e-6)


def test_switching_refuses_a_program_counter_outside_the_program(session):
    """A transformer whose pc rows point outside the program (pc -35) handed that pc to the
    reference on `engine reference`, and the next `step` failed with 'IndexError: list index
    out of range'."""
    from vm.common.encoding import pm1_code

    machine = session.machine
    scratch = machine.layout.regions["scratch"]
    X = machine.X.clone()
    X[0, machine.layout["pc"], scratch.start:scratch.stop] = torch.as_tensor(
        pm1_code(3, machine.geometry.pos_bits), dtype=X.dtype)[:, None]  # the control column
    machine.X = X
    pc = machine.state("transformer").pc
    assert not 0 <= pc <= machine.program.eof
    assert session.execute("engine reference") == (
        f"error: cannot resynchronize: the transformer's pc {pc} is outside the program "
        "(use reset)")
    assert machine.state("reference").pc == 0 and session.execute("engine") == \
        "engine: transformer"
    session.execute("reset")
    assert session.execute("engine reference").startswith("engine: reference (both engines agree")


def test_an_echoed_typed_statement_escapes_its_control_characters(session):
    """`executed y = add(x, x) ; <ESC>[31m` echoed the ESC of a pasted comment as it was,
    and recoloured the terminal."""
    out = session.execute("y = add(x, x) ; \x1b[31m")
    assert out.splitlines()[0] == r"executed y = add(x, x) ; \x1b[31m (pc stays at 0 (top))"
