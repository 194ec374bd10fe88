"""The .fleq dialect: typed data, cell layout, statements, and every located error."""

from __future__ import annotations

import numpy as np
import pytest

from assembler.diagnostics import SourceError
from assembler.fleq import MAX_BLOCK
from vm.isa import FLEQ
from assembler.fleq_program import ONE_CELL, ZERO_CELL
from vm.cli import main
from vm.common.errors import InputError
from vm.functions import REGISTRY

PROGRAM = """\
; a header, then .data and .code
.d 3
.function mul scale=1e-4   # a block parameter

.data
n: 4                       ; integer literal: an integer counter
x: 2.5
tiny: -1e-3
v: .vector [1, 2.5, -3]
A: .matrix 2x3 [[1, 2, 3], [4, 5, 6]]
S: .zeros 2x3

.code
loop: S = add(S, A)
      n = sub(n, one)
      if n <= 0 goto done
      goto loop
done:
      x = mul(x, tiny) if n <= 0 goto end
      x = inv(x)
end:  halt
.data
one: 1
"""


@pytest.fixture(scope="module")
def program():
    return FLEQ.assemble_text(PROGRAM, "p.fleq")


def test_literals_give_typed_variables_with_their_shapes(program):
    kinds = {name: (v.kind, v.shape, v.integer) for name, v in program.variables.items()}
    assert kinds == {"n": ("int", (1, 1), True), "x": ("real", (1, 1), False),
                     "tiny": ("real", (1, 1), False), "v": ("vector", (3, 1), False),
                     "A": ("matrix", (2, 3), False), "S": ("matrix", (2, 3), False),
                     "one": ("int", (1, 1), True)}


def test_every_cell_is_d_by_d_with_the_value_in_its_top_left_corner(program):
    assert program.d == 3
    assert all(cell.shape == (3, 3) for cell in program.cells)
    assert program.cells[ZERO_CELL][0, 0] == 0 and program.cells[ONE_CELL][0, 0] == 1
    expected = {"n": [[4]], "x": [[2.5]], "tiny": [[-1e-3]], "v": [[1], [2.5], [-3]],
                "A": [[1, 2, 3], [4, 5, 6]], "S": [[0, 0, 0], [0, 0, 0]], "one": [[1]]}
    cells = [program.variables[name].cell for name in expected]
    assert sorted(cells) == list(range(2, 2 + len(expected))), "declaration order after 0 and 1"
    for name, value in expected.items():
        cell = program.cells[program.variables[name].cell]
        value = np.array(value, dtype=float)
        rows, columns = value.shape
        np.testing.assert_array_equal(cell[:rows, :columns], value)
        assert not cell[rows:].any() and not cell[:, columns:].any()


def test_statements_become_fleq_instructions_with_resolved_labels(program):
    cell = {name: v.cell for name, v in program.variables.items()}
    eof = len(program.instructions)
    assert eof == 7 and program.labels == {"loop": 0, "done": 4, "end": 6}
    fields = [(i.function, i.a, i.b, i.c, i.flag, i.target, i.shape)
              for i in program.instructions]
    assert fields == [
        ("add", cell["S"], cell["A"], cell["S"], ONE_CELL, 1, (2, 3)),
        ("sub", cell["n"], cell["one"], cell["n"], ONE_CELL, 2, (1, 1)),
        (None, 0, 0, 0, cell["n"], 4, (1, 1)),                   # if n <= 0 goto done
        (None, 0, 0, 0, ZERO_CELL, 0, (1, 1)),                   # goto loop
        ("mul", cell["x"], cell["tiny"], cell["x"], cell["n"], 6, (1, 1)),
        ("inv", cell["x"], ZERO_CELL, cell["x"], ONE_CELL, 6, (1, 1)),
        (None, 0, 0, 0, ZERO_CELL, eof, (1, 1)),                 # halt jumps to EOF
    ]
    assert program.instructions[0].a_shape == program.instructions[0].b_shape == (2, 3)
    assert program.instructions[4].text == "x = mul(x, tiny) if n <= 0 goto end"


def test_only_called_blocks_are_built_with_their_declared_parameters(program):
    functions = dict(program.functions)
    assert sorted(functions) == ["add", "inv", "mul", "sub"]
    assert dict(functions["mul"])["scale"] == 1e-4
    assert dict(functions["add"]) == {}


def test_jumps_to_eof_and_a_trailing_label_point_past_the_last_instruction():
    program = FLEQ.assemble_text(".data\nn: 0\n.code\nif n <= 0 goto EOF\ngoto eof\nlast:\n", "e.fleq")
    assert [i.target for i in program.instructions] == [2, 2]
    assert program.labels == {"last": 2} and program.eof == 2


def test_block_size_defaults_to_the_largest_shape_and_can_be_overridden():
    source = ".data\nv: .vector [1, 2]\nx: 1.0\n.code\nx = add(x, x)\n"
    assert FLEQ.assemble_text(source).d == 2
    assert FLEQ.assemble_text(".d 5\n" + source).d == 5
    assert FLEQ.assemble_text(".d 5\n" + source, d=3).d == 3


def test_options_add_blocks_and_override_parameters():
    source = ".function mul scale=1e-3\n.data\nx: 1.0\n.code\nx = mul(x, x)\n"
    program = FLEQ.assemble_text(source, parameters={"mul": {"anchor": 20.0}},
                            functions=["sub"])
    functions = {name: dict(values) for name, values in program.functions}
    assert sorted(functions) == ["mul", "sub"]
    defaults = {p.name: p.default for p in REGISTRY["mul"].parameters}
    assert functions["mul"] == {**defaults, "scale": 1e-3, "anchor": 20.0}
    with pytest.raises(InputError, match="unknown function 'nope'"):
        FLEQ.assemble_text(source, functions=["nope"])


def test_comments_blank_lines_crlf_and_a_missing_final_newline_are_accepted():
    source = "# c\r\n\r\n.data ; c\r\nx: 1.0 # c\r\n.code\r\nx = add(x, x) ; c\r\nhalt"
    program = FLEQ.assemble_text(source)
    assert [i.function for i in program.instructions] == ["add", None]


def test_integer_results_may_go_to_reals_but_reals_not_to_counters():
    program = FLEQ.assemble_text(".data\nn: 2\nx: 0.0\n.code\nx = add(n, n)\nx = inv(n)\n")
    assert len(program.instructions) == 2


def located(source: str) -> SourceError:
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(source, "bad.fleq")
    return caught.value


def assert_located(error: SourceError, source: str, line: int, column: int) -> None:
    """file:line:col in the first line, the source line, and the caret under the column."""
    first, shown, caret = str(error).splitlines()
    assert first.startswith(f"bad.fleq:{line}:{column}: error: ")
    assert (error.line, error.column) == (line, column)
    assert shown == "    " + source.splitlines()[line - 1]
    assert caret.index("^") == 4 + column - 1


DATA = ".data\nn: 1\none: 1\nx: 1.0\nM: .zeros 2x2\n.code\n"
"""Line 7 is the first code line."""

BAD = [
    # syntax
    (".bogus\n.data\nx: 1.0\n.code\nhalt\n", "unknown directive '.bogus'", 1, 1),
    (DATA + "x = add(x x)\n", "unexpected 'x'", 7, 11),
    (DATA + "x = add(x, x\n", "unexpected end of line", 7, 13),
    (DATA + "if n < 0 goto L\n", "unexpected character '<'", 7, 6),
    (DATA + "if n <= 1 goto L\n", "unexpected '1'", 7, 9),
    (".data\nx: 1.0 $\n.code\nhalt\n", "unexpected character '$'", 2, 8),
    (".data\nx: 1.0\n.d 2\n.code\nhalt\n", "unexpected '.d'", 3, 1),
    (".data\nx: 1.0\n", "empty program", 1, 1),
    # header
    (".d 2\n.d 3\n.data\nx: 1.0\n.code\nhalt\n", ".d given twice (first on line 1)", 2, 1),
    (".function inv terms=8\n.function inv terms=16\n.data\nx: 1.0\n.code\nhalt\n",
     ".function inv given twice (first on line 1)", 2, 1),
    (f".d {MAX_BLOCK + 1}\n.data\nx: 1.0\n.code\nhalt\n",
     f"block size must be between 1 and {MAX_BLOCK}", 1, 4),
    (".d 0\n.data\nx: 1.0\n.code\nhalt\n", "block size must be between", 1, 4),
    (".function foo\n.data\nx: 1.0\n.code\nhalt\n", "unknown function 'foo'", 1, 11),
    (".function mul bogus=1\n.data\nx: 1.0\n.code\nhalt\n", "mul has no parameter 'bogus'", 1, 1),
    (".function mul scale=2\n.data\nx: 1.0\n.code\nhalt\n", "mul.scale must be in (0, 1]", 1, 1),
    (".function inv terms=2.5\n.data\nx: 1.0\n.code\nhalt\n", "inv.terms must be an integer",
     1, 1),
    # data
    (".data\nM: .matrix 2x2 [[1, 2], [3]]\n.code\nhalt\n",
     "matrix literal does not have the declared shape 2x2", 2, 16),
    (".data\nM: .matrix 2x3 [[1, 2], [3, 4]]\n.code\nhalt\n",
     "matrix literal does not have the declared shape 2x3", 2, 16),
    (".data\nM: .zeros 0x2\n.code\nhalt\n", "shapes need at least one row and one column", 2, 11),
    (".data\nx: 1e999\n.code\nhalt\n", "values must be finite", 2, 4),
    (".d 1\n.data\nx: 1.0\nM: .zeros 2x2\n.code\nhalt\n",
     "'M' is 2x2, larger than the block size d=1", 4, 1),
    # names
    (DATA + "halt\n.data\nx: 2.0\n", "duplicate definition of 'x' (first defined at bad.fleq:4:1)",
     9, 1),
    (DATA + "L: halt\nL: halt\n", "duplicate definition of 'L' (first defined at bad.fleq:7:1)",
     8, 1),
    (DATA + "x: halt\n", "duplicate definition of 'x'", 7, 1),
    (".code\nL: halt\n.data\nL: 1.0\n",
     "duplicate definition of 'L' (first defined at bad.fleq:2:1)", 4, 1),
    (".data\nEOF: 1\n.code\nhalt\n", "'EOF' is reserved", 2, 1),
    (DATA + "eof: halt\n", "'eof' is reserved", 7, 1),
    (".data\n_x: 1.0\n.code\nhalt\n", "'_x' is reserved", 2, 1),
    (".data\nadd: 1.0\n.code\nhalt\n", "'add' is a function name", 2, 1),
    (DATA + "sqrt: halt\n", "'sqrt' is a function name", 7, 1),
    (DATA + "x = add(x, y)\n", "undefined variable 'y'", 7, 12),
    (DATA + "L: x = add(L, x)\n", "'L' is a label, not a variable", 7, 12),
    (DATA + "goto nowhere\n", "undefined label 'nowhere'", 7, 6),
    (DATA + "goto x\n", "'x' is a variable, not a label", 7, 6),
    # calls
    (DATA + "x = foo(x, x)\n", "unknown function 'foo' (registered: "
     + ", ".join(sorted(REGISTRY)) + ")", 7, 5),
    (DATA + "x = add(x)\n", "'add' takes 2 operands, got 1", 7, 1),
    (DATA + "x = inv(x, x)\n", "'inv' takes 1 operand, got 2", 7, 1),
    (DATA + "x = add(x, x, k=1)\n", "'add' is a function block and takes no keyword arguments",
     7, 15),
    (DATA + "M = add(M, x)\n", "add: operands must have the same shape, got 2x2 and 1x1", 7, 1),
    (DATA + "M = mul(M, M)\n", "mul: mul multiplies scalars", 7, 1),
    (DATA + "x = add(M, M)\n", "add(...) is 2x2 but 'x' is 1x1", 7, 1),
    # types
    (DATA + "if x <= 0 goto L\nL: halt\n", "'x' is not an integer counter; a branch tests one",
     7, 4),
    (DATA + "if M <= 0 goto L\nL: halt\n", "'M' is not an integer counter", 7, 4),
    (DATA + "  n = add(n, x)\n", "'n' is an integer counter; add of these operands gives a "
     "real number", 7, 3),
    (DATA + "n = mul(n, one)\n", "'n' is an integer counter; mul of these operands", 7, 1),
    (DATA + "n = inv(one)\n", "'n' is an integer counter; inv of these operands", 7, 1),
    (DATA + "n = sub(n, one) if n <= 0 goto L\nL: halt\n",
     "'n' is written by this instruction and tested by its branch", 7, 20),
]


@pytest.mark.parametrize("source, message, line, column", BAD,
                         ids=[message[:40] for _, message, _, _ in BAD])
def test_bad_input_is_a_located_error_with_a_caret(source, message, line, column):
    error = located(source)
    assert message in error.message
    assert_located(error, source, line, column)


def test_a_block_size_option_too_small_for_a_variable_is_located_at_it():
    source = DATA + "halt\n"
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(source, "bad.fleq", d=1)
    assert "'M' is 2x2, larger than the block size d=1" in caught.value.message
    assert_located(caught.value, source, 5, 1)


def test_cli_run_of_a_bad_program_exits_2_with_the_located_message(tmp_path, capsys):
    path = tmp_path / "bad.fleq"
    path.write_text(DATA + "x = add(x, y)\n")
    code = main(["run", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"{path}:7:12: error: undefined variable 'y'")
    assert "x = add(x, y)" in err and "^" in err and "Traceback" not in err
