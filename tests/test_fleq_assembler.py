"""The .fleq dialect: typed data, cell layout, statements, and every located error."""

from __future__ import annotations

import re
from pathlib import Path

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
    program = FLEQ.assemble_text(".data\nn: 0\n.code\nif n <= 0 goto EOF\ngoto eof\nlast:\n",
                                 "e.fleq")
    assert [i.target for i in program.instructions] == [2, 2]
    assert program.labels == {"last": 2} and program.eof == 2


def test_block_size_defaults_to_the_largest_shape_and_can_be_overridden():
    source = ".data\nv: .vector [1, 2]\nx: 1.0\n.code\nx = add(x, x)\n"
    assert FLEQ.assemble_text(source).d == 2
    assert FLEQ.assemble_text(".d 5\n" + source).d == 5
    assert FLEQ.assemble_text(".d 5\n" + source, d=3).d == 3


def test_options_add_blocks_and_override_parameters():
    source = ".function mul scale=1e-3\n.data\nx: 1.0\n.code\nx = mul(x, x)\n"
    program = FLEQ.assemble_text(source, parameters={"mul": {"anchor": 8.0}},
                            functions=["sub"])
    functions = {name: dict(values) for name, values in program.functions}
    assert sorted(functions) == ["mul", "sub"]
    defaults = {p.name: p.default for p in REGISTRY["mul"].parameters}
    assert functions["mul"] == {**defaults, "scale": 1e-3, "anchor": 8.0}
    with pytest.raises(InputError, match="unknown function 'nope'"):
        FLEQ.assemble_text(source, functions=["nope"])


@pytest.mark.parametrize("options, message", [
    ({"parameters": [1]}, "parameters must map block names to {parameter: value} dicts"),
    ({"parameters": {"mul": 5}}, "parameters must map block names"),    # a TypeError
    ({"parameters": {"mul": {5: 1.0}}}, "parameters must map block names"),
    ({"parameters": "mul.scale=1"}, "parameters must map block names"),  # an AttributeError
    ({"defaults": [1]}, "defaults must map block names"),
    ({"functions": "mul"}, "functions must be a list of block names, got 'mul'"),  # 'm'
    ({"functions": 5}, "functions must be a list of block names"),      # not iterable
    ({"functions": [None]}, "functions must be a list of block names"),
])
def test_options_of_the_wrong_type_are_named(options, message):
    """Through the Python API a list of parameters failed with an AttributeError, and
    functions='mul' was read as the blocks 'm', 'u' and 'l' ("unknown function 'm'")."""
    source = ".data\nx: 1.0\n.code\nx = mul(x, x)\n"
    with pytest.raises(InputError) as caught:
        FLEQ.assemble_text(source, **options)
    assert str(caught.value).startswith(message)


ROUTINE_SETTINGS = ("'inverse' is a routine, not a function block (its settings go in the "
                    "call: inverse(..., iters=...))")


def test_a_routine_named_as_a_block_is_called_a_routine():
    """.function, --param and --functions said "unknown function 'inverse' (registered:
    ...)" of a routine the program calls."""
    source = (".data\nA: .matrix 2x2 [[1.0, 0.0], [0.0, 2.0]]\nX: .zeros 2x2\n.code\n"
              "X = inverse(A)\nhalt\n")
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(".function inverse iters=3\n" + source, "p.fleq")
    assert str(caught.value).startswith(f"p.fleq:1:11: error: {ROUTINE_SETTINGS}")
    with pytest.raises(InputError) as caught:
        FLEQ.assemble_text(source, "p.fleq", parameters={"inverse": {"iters": 5.0}})
    assert str(caught.value) == f"--param inverse.iters: {ROUTINE_SETTINGS}"
    with pytest.raises(InputError) as caught:
        FLEQ.assemble_text(source, "p.fleq", functions=["inverse"])
    assert str(caught.value) == f"--functions inverse: {ROUTINE_SETTINGS}"


@pytest.mark.parametrize("parameters, message", [
    ({"inv": {"terms": 3.5}}, "--param inv.terms=3.5: inv.terms must be an integer in 1..512"),
    ({"mul": {"scale": 0.0}}, "--param mul.scale=0: mul.scale must be in (0, 1]"),
    ({"inv": {"terms": 1e8}}, "--param inv.terms=100000000: inv.terms must be an integer "
                              "in 1..512"),
    ({"mul": {"scale": "x"}}, "--param mul.scale='x': mul.scale must be a number, got 'x'"),
    ({"mul": {"scale": None}}, "--param mul.scale=None: mul.scale must be a number, got None"),
])
def test_a_param_the_block_refuses_is_named_with_its_value(parameters, message):
    """'inv.terms must be an integer in 1..512' said neither that --param gave it nor
    what it gave (the block was first built by the instruction that calls it); a value
    that is no number (from the Python API) failed in the message's own format, a
    ValueError "Unknown format code 'g' for object of type 'str'"."""
    source = ".data\nx: 2.0\n.code\nx = inv(x)\nx = mul(x, x)\nhalt\n"
    with pytest.raises(InputError) as caught:
        FLEQ.assemble_text(source, "p.fleq", parameters=parameters)
    assert str(caught.value) == message


def test_comments_blank_lines_crlf_and_a_missing_final_newline_are_accepted():
    source = "# c\r\n\r\n.data ; c\r\nx: 1.0 # c\r\n.code\r\nx = add(x, x) ; c\r\nhalt"
    program = FLEQ.assemble_text(source)
    assert [i.function for i in program.instructions] == ["add", None]


def test_integer_results_may_go_to_reals_but_reals_not_to_counters():
    program = FLEQ.assemble_text(".data\nn: 2\nx: 0.0\n.code\nx = add(n, n)\nx = inv(n)\n")
    assert [i.function for i in program.instructions] == ["add", "inv"]
    with pytest.raises(SourceError, match="'n' is an integer counter; add of these operands"):
        FLEQ.assemble_text(".data\nn: 2\nx: 0.0\n.code\nn = add(x, x)\n")


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
    (DATA + "if n <= x y goto L\n", "unexpected 'y'", 7, 11),
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
    # at the parameter that fails, not at the start of the directive
    (".function mul bogus=1\n.data\nx: 1.0\n.code\nhalt\n", "mul has no parameter 'bogus'",
     1, 15),
    (".function mul scale=2\n.data\nx: 1.0\n.code\nhalt\n", "mul.scale must be in (0, 1]",
     1, 15),
    (".function inv terms=16 terms2=2.5\n.data\nx: 1.0\n.code\nhalt\n",
     "inv has no parameter 'terms2'", 1, 24),
    (".function inv terms=2.5\n.data\nx: 1.0\n.code\nhalt\n", "inv.terms must be an integer",
     1, 15),
    (".function inv low=5 high=1\n.data\nx: 1.0\n.code\nhalt\n", "inv needs 0 < low < high",
     1, 1),
    # data
    (".data\nM: .matrix 2x2 [[1, 2], [3]]\n.code\nhalt\n",
     "matrix literal does not have the declared shape 2x2", 2, 16),
    (".data\nM: .matrix 2x3 [[1, 2], [3, 4]]\n.code\nhalt\n",
     "matrix literal does not have the declared shape 2x3", 2, 16),
    (".data\nM: .zeros 0x2\n.code\nhalt\n", "shapes need at least one row and one column", 2, 11),
    (".data\nx: 1e999\n.code\nhalt\n", "too large for float64 (at most 1.798e+308)", 2, 4),
    # at the entry, not under the whole matrix (as a subnormal entry already was)
    (".data\nM: .matrix 2x2 [[1, 1e999], [3, 4]]\n.code\nhalt\n",
     "too large for float64 (at most 1.798e+308)", 2, 21),
    (".data\nv: .vector [1, -2e20]\n.code\nhalt\n", "values must lie within |x| <= 2^50",
     2, 16),
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
    # a branch is lowered before labels are numbered: 'undefined variable' for a label
    (DATA + "L: if L <= 0 goto L\n", "'L' is a label, not a variable", 7, 7),
    (DATA + "L: if x <= L goto L\n", "'L' is a label, not a variable", 7, 12),
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
    (DATA + "if M <= 0 goto L\nL: halt\n", "a comparison takes scalars; 'M' is 2x2", 7, 4),
    (DATA + "  n = add(n, x)\n", "'n' is an integer counter; add of these operands gives a "
     "real number", 7, 3),
    (DATA + "n = mul(n, one)\n", "'n' is an integer counter; mul of these operands", 7, 1),
    (DATA + "n = inv(one)\n", "'n' is an integer counter; inv of these operands", 7, 1),
    (DATA + "n = sub(n, one) if n <= 0 goto L\nL: halt\n",
     "'n' is written by this instruction and tested by its branch", 7, 20),
    # literals, copies and comparisons
    (DATA + "2.0 = add(x, x)\n", "cannot assign to the literal 2.0", 7, 1),
    (DATA + "x = add(x, 1e400)\n", "too large for float64 (at most 1.798e+308)", 7, 12),
    (DATA + "n = add(n, 1.0)\n", "write the integer literal 1.0 without a fraction", 7, 12),
    (DATA + "n = add(n, x)\n", "'n' is an integer counter; add of these operands", 7, 1),
    (DATA + "n = 2.5\n", "'n' is an integer counter; 2.5 is a real literal", 7, 5),
    (DATA + "n = x\n", "'n' is an integer counter; 'x' is real", 7, 5),
    (DATA + "x = M\n", "'M' is 2x2 but 'x' is 1x1", 7, 1),
    (DATA + "3 = n\n", "cannot assign to the literal 3", 7, 1),
    (DATA + "x = y\n", "undefined variable 'y'", 7, 5),
    (DATA + "if M <= 1.0 goto L\nL: halt\n", "a comparison takes scalars; 'M' is 2x2", 7, 4),
    (DATA + "if x <= M goto L\nL: halt\n", "a comparison takes scalars; 'M' is 2x2", 7, 9),
    (DATA + "if 3 <= n goto L\nL: halt\n", "a branch tests a counter variable, not a literal",
     7, 4),
    (DATA + "n = sub(n, 1) if n <= 3 goto L\nL: halt\n", "'n' is written by this instruction",
     7, 18),
    (DATA + "x = add(x, 1.0)\n_const_1.0 = add(x, x)\n", "unexpected '.0'", 8, 9),
    (DATA + "n = add(n, 1)\n_const_1 = add(n, n)\n", "the assembler's own read-only cell",
     8, 1),
    (DATA + "M = inverse(2.0)\n", "'inverse' is a routine: its operands must be variables",
     7, 13),
    # a setting given twice took the last value silently
    (".function inv terms=8 terms=100\n.data\nx: 1.0\n.code\nhalt\n",
     "inv.terms is given twice", 1, 23),
    (DATA + "M = inverse(M, iters=3, iters=4)\n", "'inverse': iters is given twice", 7, 25),
    # inverse overwrote M with X_0, then read it as the matrix: a wrong inverse, no word
    (DATA + "M = inverse(M, iters=8)\n", "'M' is both the destination and an operand", 7, 13),
    # a parse error said only "unexpected '.d'", not what the line could hold
    (".data\n.d 2\nx: 1.0\n.code\nhalt\n",
     "unexpected '.d'; expected '.code', '.data', a name, end of file", 2, 1),
    (".function inv terms\n.data\nx: 1.0\n.code\nhalt\n",
     "unexpected end of line; expected '='", 1, 20),
    (".data\nZ: .zeros 2 x 2\n.code\nhalt\n", "unexpected '2'; expected a shape RxC", 2, 11),
    (".dat\n", "unknown directive '.dat' (expected .d, .function, .data, .code,", 1, 1),
    # sgd_step updated W2 in place, then read the new W2 as the input: a wrong W1, no word
    (".data\nW1: .matrix 1x2 [[0.5, -0.25]]\nW2: .vector [0.75, 0.5]\ny: .vector [1, 0]\n"
     "l: 0.0\n.code\nl = sgd_step(W1, W2, W2, y)\n", "'W2' is passed as two operands of the "
     "routine 'sgd_step', whose expansion updates it in place", 7, 22),
    # literals the machine flushes to 0 (1e-400 was read as 0 without a word)
    (".data\nx: 1e-400\n.code\nhalt\n", "1e-400 is below 2.23e-308", 2, 4),
    (DATA + "x = mul(x, -3e-310)\n", "-3e-310 is below 2.23e-308", 7, 12),
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


@pytest.mark.parametrize("d", [0, MAX_BLOCK + 1, 100_000])
def test_a_block_size_option_out_of_range_is_refused_before_any_cell_is_made(d):
    """--block-size 100000 made 100000 x 100000 cells first and ended out of memory."""
    with pytest.raises(InputError, match=f"block size d must be between 1 and {MAX_BLOCK}"):
        FLEQ.assemble_text(".data\nx: 1.0\n.code\nhalt\n", "p.fleq", d=d)


def test_a_block_size_past_python_s_digit_limit_is_refused_with_its_magnitude():
    """str() of 10**5000 raises ValueError: the message itself failed, in a traceback."""
    with pytest.raises(InputError) as caught:
        FLEQ.assemble_text(".data\nx: 1.0\n.code\nhalt\n", "p.fleq", d=10 ** 5000)
    assert str(caught.value) == (f"block size d must be between 1 and {MAX_BLOCK}, got about "
                                 "10^5000")


def test_cli_run_of_a_bad_program_exits_2_with_the_located_message(tmp_path, capsys):
    path = tmp_path / "bad.fleq"
    path.write_text(DATA + "x = add(x, y)\n")
    code = main(["run", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"{path}:7:12: error: undefined variable 'y'")
    assert "x = add(x, y)" in err and "^" in err and "Traceback" not in err


CONVENIENCES = """\
.data
n: 0
x: 1.5
y: 0.0
v: .vector [1.0, -2.0]
w: .zeros 2x1
.code
loop: x = mul(x, 2.0)        ; a real literal operand
      n = add(n, 1)          ; an integer literal keeps n a counter
      if n <= 2 goto loop    ; runs the body three times
      y = x                  ; copy
      w = v
      y = sub(y, 0.5) if n <= 3 goto end
      y = 100.0
end:  halt
"""


def run_on_both(source: str) -> tuple[dict, dict]:
    """Named memory after running `source` on the exact reference and on the transformer."""
    from vm.machines.fleq.punchcard import fleq_geometry_for
    from vm.machines.fleq.reference import run_fleq_reference
    from vm.runtime.executor import EngineConfig, run_transformer
    program = FLEQ.assemble_text(source, "conv.fleq")
    reference = run_fleq_reference(program, 200)
    transformer = run_transformer(program, fleq_geometry_for(program), 200,
                                  EngineConfig(dtype="float64"))
    assert reference.halted and transformer.halted
    assert transformer.steps == reference.steps and transformer.pc == reference.pc
    return program.named_memory(reference.cells), program.named_memory(transformer.memory)


def test_literals_copies_and_integer_comparisons_run_alike_on_both_engines():
    reference, transformer = run_on_both(CONVENIENCES)
    for memory in (reference, transformer):
        assert memory["n"] == 3
        assert memory["x"] == pytest.approx(12.0, rel=1e-9)
        assert memory["y"] == pytest.approx(11.5, rel=1e-9), "the n <= 3 branch skipped y = 100"
        assert memory["w"] == [[1.0], [-2.0]]


def test_each_distinct_literal_gets_one_read_only_named_constant_cell():
    program = FLEQ.assemble_text(".data\nx: 1.0\nn: 0\n.code\nx = mul(x, 2.0)\n"
                                 "x = add(x, 2.0)\nx = mul(x, 2)\nn = add(n, 2)\n"
                                 "if n <= 7 goto EOF\nif n <= 7 goto EOF\n")
    constants = {name: (v.integer, float(program.cells[v.cell][0, 0]))
                 for name, v in program.variables.items() if name.startswith("_const")}
    assert constants == {"_const_2.0": (False, 2.0), "_const_2": (True, 2.0),
                         "_const_7": (True, 7.0)}
    texts = [program.instruction_text(i) for i in range(program.eof)]
    assert texts[4] == "_cmp = sub(n, _const_7)" and texts[6] == "_cmp = sub(n, _const_7)"
    assert program.instructions[5].flag == program.variables["_cmp"].cell


def test_a_copy_is_exact_add_of_the_zero_cell_and_keeps_counters_counters():
    program = FLEQ.assemble_text(".data\nn: 5\nm: 0\n.code\nm = n\nif m <= 4 goto EOF\n")
    copy = program.instructions[0]
    assert (copy.function, copy.a, copy.b) == ("add", program.variables["n"].cell, ZERO_CELL)
    assert program.variables["m"].integer


def test_a_comparison_keeps_the_label_and_runs_before_the_instruction_it_guards():
    source = (".data\nn: 3\none: 1\nhits: 0\n.code\n"
              "top: hits = add(hits, one) if n <= 1 goto done\n"
              "     n = sub(n, one)\n     goto top\n"
              "done: halt\n")
    program = FLEQ.assemble_text(source)
    assert program.labels == {"top": 0, "done": 4} and program.instructions[0].function == "sub"
    reference, transformer = run_on_both(source)
    # n = 3, 2: no jump; n = 1: jump, and the guarded instruction still writes (hits = 3)
    assert reference == transformer
    assert (reference["n"], reference["hits"]) == (1, 3)


def test_counters_may_be_compared_with_each_other():
    source = ".data\nn: 0\nk: 4\n.code\nloop: n = add(n, 1)\nif n <= k goto loop\n"
    reference, transformer = run_on_both(source)
    assert reference["n"] == transformer["n"] == 5


def test_the_readme_conveniences_example_runs_as_its_comments_say():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    source = next(block for block in re.findall(r"```\n(.*?)```", readme, flags=re.S)
                  if block.startswith("; conveniences"))
    reference, transformer = run_on_both(source)
    for memory in (reference, transformer):
        assert memory["x"] == pytest.approx(12.0, rel=1e-9)
        assert memory["y"] == pytest.approx(11.5, rel=1e-9) and memory["n"] == 3


REAL_BRANCHES = """.data
x: 0.3
y: 0.5
k: 0
.code
loop: x = add(x, 0.125)
      k = add(k, 1)
      if x <= y goto loop
      if x <= 0.9 goto loop
      if x <= 0 goto loop
      halt
"""


def test_comparisons_of_reals_run_alike_on_both_engines():
    """x climbs by 1/8 from 0.3 while x <= 0.5, then while x <= 0.9: 5 rounds in all."""
    x, rounds = 0.3, 0
    while True:
        x, rounds = x + 0.125, rounds + 1
        if x <= 0.5 or x <= 0.9:
            continue
        break
    for memory in run_on_both(REAL_BRANCHES):
        assert memory["k"] == rounds and memory["x"] == pytest.approx(x)


def test_a_comparison_of_reals_is_two_instructions_before_the_branch():
    program = FLEQ.assemble_text(REAL_BRANCHES, "real.fleq")
    texts = [i.text for i in program.instructions]
    assert texts[2:5] == ["_diff = sub(x, y)", "_cmp = relu_prime(_diff)",
                          "if x <= y goto loop"]
    assert program.labels["loop"] == 0 and program.instructions[4].target == 0


def test_a_label_after_the_last_statement_names_the_end_not_a_routine():
    """`end:` on the last line once became the label of the first instruction of an
    earlier routine's expansion, so `goto end` ran the routine instead of halting."""
    source = (".data\nA: .matrix 2x2 [[2, 0], [0, 2]]\nB: .zeros 2x2\nn: 0\n.code\n"
              "      if n <= 0 goto end\n      B = inverse(A, iters=2)\nend:\n")
    program = FLEQ.assemble_text(source, "end.fleq")
    assert program.labels["end"] == len(program.instructions)
    assert program.instructions[0].target == len(program.instructions)


def test_an_instruction_after_a_page_break_keeps_its_own_text():
    """The listing and the compare table cut each instruction's text from its line."""
    program = FLEQ.assemble_text(".data\nx: 1 ; a\fb\ny: 2\n.code\nx = add(x, y)\nhalt\n")
    assert [i.text for i in program.instructions] == ["x = add(x, y)", "halt"]


def test_a_variable_passed_twice_to_a_routine_that_only_reads_it_is_accepted():
    """Only an operand the expansion writes may not be passed twice: y = x (an autoencoder's
    target) is read, never written."""
    program = FLEQ.assemble_text(".data\nW: .matrix 2x2 [[1, 0], [0, 1]]\nx: .vector [1, 2]\n"
                                 "l: 0.0\n.code\nl = sgd_step_linear(W, x, x)\nhalt\n", "ae.fleq")
    assert program.instructions[-1].function is None


def test_routine_calls_past_the_machine_columns_stop_at_the_call(monkeypatch):
    """Each expansion is parsed on its own: the 170,000 calls a 4 MiB source holds took
    minutes before the geometry refused the columns; the assembler stops at the first call
    whose instructions and cells cannot fit (the limit lowered here to keep the test fast)."""
    import assembler.fleq

    monkeypatch.setattr(assembler.fleq, "MAX_COLUMNS", 60)
    source = (".data\nA: .matrix 2x2 [[2, 0], [0, 2]]\nB: .zeros 2x2\n.code\n"
              + "B = inverse(A, iters=2)\n" * 10 + "halt\n")
    with pytest.raises(SourceError, match="more than 60 instructions and memory cells") as caught:
        FLEQ.assemble_text(source, "many.fleq")
    assert caught.value.file == "many.fleq" and caught.value.line == 7


def test_comparison_steps_past_the_machine_columns_stop_at_the_comparison(monkeypatch):
    """`if x <= y` is three steps: lines the line count lets through could need more
    instructions than the machine has columns, and the geometry refused them with no line
    ('120018 columns exceed the limit') after 40,000 such lines."""
    import assembler.fleq

    monkeypatch.setattr(assembler.fleq, "MAX_COLUMNS", 20)
    source = ".data\nx: 1.0\ny: 2.0\n.code\nL: halt\n" + "if x <= y goto L\n" * 6
    with pytest.raises(SourceError, match="more than 20 instructions and memory cells") as caught:
        FLEQ.assemble_text(source, "cmp.fleq")
    # 2 reserved cells, x, y and halt are 5: the sixth comparison's steps make 23
    assert caught.value.file == "cmp.fleq" and caught.value.line == 11


def test_more_lines_than_columns_are_refused_before_parsing(monkeypatch):
    """A source with more data lines and statements than the machine has columns is refused
    at the line past the limit, before lark spends minutes on the 200,000 lines a 4 MiB
    source holds; comments, blank lines, directives and lone labels take no column."""
    import assembler.fleq

    monkeypatch.setattr(assembler.fleq, "MAX_COLUMNS", 8)
    fits = (".d 1\n.data\nx: 1 ; a cell\n\n# note\n.code\nstart:\nx = add(x, 1)\n"
            "x = add(x, 1)\nhalt\n")
    assert len(FLEQ.assemble_text(fits, "fits.fleq").instructions) == 3
    monkeypatch.setattr(assembler.fleq, "parse_fleq", lambda *a: pytest.fail("parsed"))
    with pytest.raises(SourceError, match="more than 6 data lines and statements") as caught:
        FLEQ.assemble_text(fits + "x = add(x, 1)\n" * 3, "long.fleq")
    assert caught.value.line == 13


def test_operand_shapes_are_checked_against_the_block_the_run_builds():
    """--param overrides the `.function` header: shapes checked against the header alone let
    `--param attention_oracle.dim=3` through, and the run failed in a numpy traceback."""
    source = (".function attention_oracle dim=2 length=2\n.data\nq: .zeros 2x2\n"
              "kv: .zeros 4x2\ns: .zeros 4x2\n.code\ns = attention_oracle(q, kv)\nhalt\n")
    assert FLEQ.assemble_text(source, "a.fleq").instructions[0].shape == (4, 2)
    with pytest.raises(SourceError, match=r"attention_oracle: takes a query chunk 3x2") as caught:
        FLEQ.assemble_text(source, "a.fleq", parameters={"attention_oracle": {"dim": 3}})
    assert (caught.value.line, caught.value.column) == (7, 1)


@pytest.mark.parametrize("call", [lambda: FLEQ.assemble_text(None),
                                  lambda: FLEQ.assemble_text(b".code\nhalt\n"),
                                  lambda: FLEQ.assemble_text(".code\nhalt\n", d=1.5),
                                  lambda: FLEQ.assemble_text(".code\nhalt\n", d="4"),
                                  lambda: FLEQ.assemble_file(None)])
def test_the_python_entry_points_refuse_arguments_of_another_type(call):
    """None failed on `.split`, d=1.5 with "'float' object cannot be interpreted as an
    integer", a None path inside pathlib."""
    with pytest.raises(InputError, match="the source must be a str|block size d must be an "
                                         "integer|a source file's path must be"):
        call()


def test_a_routine_expansion_comparing_with_a_literal_gets_its_comparison_step():
    """An expansion's `if n <= 3 goto L` branched on a _cmp no step had written (0, so it
    always jumped) because only the file's own statements were lowered; here n = 5 > 3, so
    the doubling runs."""
    from assembler.fleq import assemble_fleq
    from vm.common.signatures import Catalogue, Expansion, Routine
    from vm.isa.fleq import CATALOGUE
    from vm.machines.fleq.reference import run_fleq_reference

    def expand(call):
        end = call.name("end")
        return Expansion([], [f"if {call.arguments[0].name} <= 3 goto {end}",
                              f"{call.destination.name} = add({call.destination.name}, "
                              f"{call.destination.name})", f"{end}:"])

    routine = Routine("double_above_three", "x doubles unless n <= 3", 1, {}, expand)
    catalogue = Catalogue(CATALOGUE.blocks, {**CATALOGUE.routines, routine.name: routine})
    for n, doubled in ((5, 2.0), (3, 1.0)):
        program = assemble_fleq(f".data\nn: {n}\nx: 1.0\n.code\nx = double_above_three(n)\n"
                                "halt\n", "r.fleq", catalogue=catalogue)
        result = run_fleq_reference(program, 20)
        assert result.halted and program.named_memory(result.cells)["x"] == doubled


@pytest.mark.parametrize("line, where", [
    ("x = add(x, x)\nhalt: halt", (5, 1)),  # a label
    ("goto: halt", (4, 1)),
    ("if = x\nhalt", (4, 1)),  # a copy
    ("Halt = add(x, x)\nhalt", (4, 1)),  # an assignment; keywords ignore case
])
def test_a_keyword_used_as_a_name_is_called_a_keyword(line, where):
    """'halt: halt' was "unexpected ':'; expected end of line", 'if = x' "unexpected '=';
    expected a name, ...", though each reads as a name."""
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(f".data\nx: 1.0\n.code\n{line}\n", "k.fleq")
    keyword = re.search(r"\b(if|goto|halt)\b", str(caught.value).splitlines()[1],
                        re.IGNORECASE)
    assert caught.value.message == f"'{keyword.group()}' is a keyword and cannot be a name"
    assert (caught.value.line, caught.value.column) == where


def test_a_data_line_named_like_a_keyword_is_called_a_keyword():
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(".data\nif: 1.0\n.code\nhalt\n", "k.fleq")
    assert caught.value.message == "'if' is a keyword and cannot be a name"
    assert (caught.value.line, caught.value.column) == (2, 1)


def test_the_token_limit_applies_to_the_source_not_to_a_routine_expansion(monkeypatch):
    """The shipped chunked attention (457 tokens) expands to 2,199; with the limit between
    them it assembles, as 128 chunks (a 16,091-byte source expanding past 100,000 tokens)
    did before the limit was checked on expansions too."""
    import assembler.diagnostics

    source = (Path(__file__).resolve().parents[1] / "programs" / "fleq" /
              "chunked_attention.fleq").read_text()
    monkeypatch.setattr(assembler.diagnostics, "MAX_SOURCE_TOKENS", 1_000)
    program = FLEQ.assemble_text(source, "ca.fleq")
    assert any(i.function == "attention_oracle" for i in program.instructions)
    monkeypatch.setattr(assembler.diagnostics, "MAX_SOURCE_TOKENS", 400)
    with pytest.raises(SourceError, match="more than 400 tokens") as caught:
        FLEQ.assemble_text(source, "ca.fleq")
    assert caught.value.file == "ca.fleq"


def test_progress_counts_the_lines_of_routine_expansions_and_changes_nothing():
    """A routine call's expansion is parsed like the file (128 chunks of chunked_attention:
    37,000 lines, 10 s), and `progress` hears of its lines after the file's; the program is
    the one assembled without it."""
    source = (Path(__file__).resolve().parents[1] / "programs" / "fleq" /
              "chunked_attention.fleq").read_text()
    counts: list[int] = []
    program = FLEQ.assemble_text(source, "ca.fleq", progress=counts.append)
    plain = FLEQ.assemble_text(source, "ca.fleq")
    file_lines = source.count("\n")
    assert counts == sorted(counts) and counts[:file_lines] == list(range(1, file_lines + 1))
    assert counts[-1] > file_lines + len(program.instructions)
    assert program.instructions == plain.instructions
    assert all(np.array_equal(a, b) for a, b in zip(program.cells, plain.cells, strict=True))


@pytest.mark.parametrize("isa_name,source", [("SUBLEQ", ".code\nhalt\n"),
                                             ("FLEQ", ".data\nx: 1.0\n.code\nhalt\n")])
def test_a_progress_that_cannot_be_called_is_refused_before_parsing(isa_name, source):
    """progress=5 failed with "'int' object is not callable" at the first line end parsed
    (SUBLEQ.load and FLEQ.load with ProgramOptions(progress=5) alike)."""
    import vm.isa
    isa = getattr(vm.isa, isa_name)
    with pytest.raises(InputError, match="progress must be a function of the lines parsed"):
        isa.assemble_text(source, "p" + isa.suffixes[0], progress=5)
