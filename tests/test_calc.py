"""`ltvm calc`: compilation to FLEQ, the error bound, and the command line."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from assembler.diagnostics import SourceError
from vm.isa import FLEQ
from vm.apps.calc import calculate, compile_expression
from vm.cli import main
from vm.common.errors import InputError
from vm.runtime.executor import EngineConfig
from vm.machines.fleq.reference import run_fleq_reference
from vm.functions import make_block

ROOT = Path(__file__).resolve().parents[1]
PAPER = "sqrt(1/(((a+b)-c)*d))/100"
PAPER_INPUTS = {"a": 3.0, "b": 5.0, "c": 1.0, "d": 2.0}


def reference_value(expression: str, inputs: dict[str, float]) -> float:
    compiled = compile_expression(expression, inputs)
    program = FLEQ.assemble_text(compiled.source, "<calc>")
    result = run_fleq_reference(program, 1000)
    assert result.halted
    return program.named_memory(result.cells)[compiled.result]


def test_the_paper_expression_compiles_to_algorithm_3():
    compiled = compile_expression(PAPER, PAPER_INPUTS)
    program = FLEQ.assemble_text(compiled.source, "<calc>")
    paper = FLEQ.assemble_file(ROOT / "programs" / "fleq" / "calculator.fleq")
    assert [i.function for i in program.instructions] == \
        [i.function for i in paper.instructions]


def test_division_by_a_name_is_mul_after_inv():
    functions = [s.function for s in compile_expression("a / b", {"a": 1.0, "b": 2.0}).steps]
    assert functions == ["inv", "mul"]


leaf = st.one_of(st.sampled_from(["x", "y"]),
                 st.floats(0.5, 4.0).map(lambda v: f"{v:.3f}"))


def expressions(depth: int = 3):
    if depth == 0:
        return leaf
    smaller = expressions(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(smaller, st.sampled_from(["+", "-", "*"]), smaller).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"),
        smaller.map(lambda e: f"-{e}"),
        smaller.map(lambda e: f"{e}%"),
    )


def python_value(expression: str, inputs: dict[str, float]) -> float:
    return eval(expression.replace("%", "/100"), {"sqrt": math.sqrt}, dict(inputs))


@settings(max_examples=60, deadline=None)
@given(expressions(), st.floats(-3, 3, allow_subnormal=False),
       st.floats(-3, 3, allow_subnormal=False))  # refused as inputs: the machine flushes them
def test_compiled_programs_compute_the_expression(expression, x, y):
    inputs = {name: value for name, value in (("x", x), ("y", y)) if name in expression}
    expected = python_value(expression, inputs)
    assert reference_value(expression, inputs) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_paper_expression_on_the_transformer_is_within_its_bound():
    result = calculate(PAPER, PAPER_INPUTS)
    exact = math.sqrt(1 / (((3 + 5) - 1) * 2)) / 100
    assert result.exact == pytest.approx(exact, rel=1e-15)
    assert result.error <= result.bound
    assert result.bound < 0.05 * exact, "the bound says something useful"
    assert result.steps == 7


def test_the_paper_expression_is_accurate_to_1e_8_in_float64():
    """inv and sqrt are refined by Newton steps and the products are exact to ~1e-11 below
    10: the whole expression is within 1e-8 relative of the exact value, and so is its
    bound."""
    result = calculate(PAPER, PAPER_INPUTS)
    assert result.error <= result.bound <= 1e-8 * abs(result.exact)


def test_float32_runs_use_the_products_float32_eps_unless_a_parameter_says_otherwise():
    """float32 resolves scores only to ulp(C): calc gives mul and percentage their larger
    float32 eps (docs/fleq_machine.md, Precision); an explicit --param still wins."""
    config = EngineConfig(dtype="float32")
    automatic = calculate(PAPER, PAPER_INPUTS, config=config)
    assert dict(automatic.program.functions)["mul"] == \
        tuple(sorted({**make_block("mul").values, "scale": 5e-3}.items()))
    assert automatic.error <= automatic.bound < 0.1 * automatic.exact
    forced = calculate(PAPER, PAPER_INPUTS, {"mul": {"scale": 1e-4},
                                             "percentage": {"scale": 1e-3}}, config)
    assert forced.error <= forced.bound
    assert automatic.bound < forced.bound / 10
    float64 = calculate(PAPER, PAPER_INPUTS)
    assert dict(float64.program.functions)["mul"] == tuple(sorted(make_block("mul").values.items()))


@pytest.mark.parametrize("expression, inputs", [
    ("(2.5*x - 1)/(x+3) + 7%", {"x": 1.2}),
    ("sqrt(x*x + y*y)", {"x": 3.0, "y": 4.0}),
    ("-x/4", {"x": 2.0}),
])
def test_other_expressions_are_within_their_bounds(expression, inputs):
    result = calculate(expression, inputs)
    assert result.error <= result.bound
    assert result.exact == pytest.approx(python_value(expression, inputs), rel=1e-12)


@pytest.mark.parametrize("expression, inputs, message", [
    ("1/x", {"x": 0.01}, "inv is accurate only for 0.1 <= |a| <= 100"),
    ("x*y", {"x": 1e4, "y": 200.0}, "mul is accurate only for |result| <= 1e+06 (widen it "
                                     "with --param mul.span=N)"),
    ("sqrt(x)", {"x": -1.0}, "sqrt is accurate only for a = 0 or 0.01 <= a <= 100"),
    ("sqrt(x)", {"x": 0.001}, "sqrt is accurate only for a = 0 or 0.01 <= a <= 100"),
    ("a + b", {"a": 1.0}, "no value for 'b' (give --set b=VALUE)"),
    ("inv + 1", {"inv": 1.0}, "'inv' is a reserved name"),
    ("t1 + 1", {"t1": 1.0}, "'t1' is a reserved name"),
])
def test_inputs_outside_the_blocks_are_refused_with_a_caret(expression, inputs, message):
    with pytest.raises(SourceError) as caught:
        calculate(expression, inputs)
    assert message in caught.value.message


@pytest.mark.parametrize("expression, inputs, caret", [
    ("1/0", {}, "      ^"), ("2/(a-a)", {"a": 3.0}, "       ^~~"), ("1/x", {"x": 0.0}, "      ^"),
])
def test_division_by_an_exact_zero_is_named_at_the_divisor(expression, inputs, caret):
    """It was inv's domain, 'here its operands can lie in [0, 0]', under the whole `1/0`."""
    with pytest.raises(SourceError) as caught:
        calculate(expression, inputs)
    assert caught.value.message.startswith("division by zero")
    assert str(caught.value).splitlines()[2] == caret


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_prints_one_line_per_quantity(capsys):
    args = ["calc", PAPER] + [f"--set={k}={v}" for k, v in PAPER_INPUTS.items()]
    code, out, _ = run_cli(capsys, *args)
    lines = dict(line.split(": ", 1) for line in out.strip().splitlines())
    assert code == 0
    transformer, exact, error = (float(lines[k]) for k in ("transformer", "exact", "error"))
    assert abs(transformer - exact) == pytest.approx(error, rel=1e-6)
    assert error <= float(lines["bound"])


def test_cli_json_and_show(capsys):
    code, out, _ = run_cli(capsys, "calc", "x * 2", "--set", "x=1.5", "--show", "--json")
    assert code == 0
    data = json.loads(out)  # the program inside the object: stdout stays one JSON document
    FLEQ.assemble_text(data["program"], "<shown>")
    assert data["exact"] == 3.0 and data["within_bound"] is True


@pytest.mark.parametrize("argv, message", [
    (["calc", "x +"], "<expression>:1:4: error: unexpected end of expression"),
    (["calc", "x", "--set", "x"], "--set x: expected NAME=NUMBER"),
    (["calc", "x", "--set", "x=1", "--set", "y=2"], "the expression has no input 'y'"),
    (["calc", "x", "--set", "x=inf"], "must be finite"),
    # a finite literal past float64 said "the value must be finite, got inf", a value not typed
    (["calc", "x", "--set", "x=1e309"], "--set x: the number is too large for float64 (at most"),
    (["calc", "x", "--set", "x=" + "9" * 400], "--set x: the number is too large for float64"),
    # float() reads other scripts' digits: x=٥ (Arabic-Indic five) ran as 5
    (["calc", "x", "--set", "x=\u0665"], "--set x=\u0665: expected NAME=NUMBER"),
    (["calc", "x", "--set", "x=1_0"], "--set x=1_0: expected NAME=NUMBER"),
    (["calc", "1/x", "--set", "x=0"], "<expression>:1:3: error: division by zero"),
    (["calc", "1e400+1"], "<expression>:1:1: error: the number is too large for float64"),
    (["calc", "2*-1e999", "--show"], "<expression>:1:4: error: the number is too large"),
    (["calc", "1+1e-400"], "<expression>:1:3: error: the number is too small for float64"),
    (["calc", "x+1", "--set", "x=-2e-999"], "--set x=-2e-999: the number is too small"),
    (["calc", "1e-320"], "<expression>:1:1: error: the number is too small for float64"),
    (["calc", "x", "--set", "x=3e-310"], "--set x=3e-310: the number is too small"),
    # past 2^50 the caret pointed into the generated program (`k1: 1e+308`), not at EXPR
    (["calc", "1e308*10"], "<expression>:1:1: error: values must lie within |x| <= 2^50"),
    (["calc", "x", "--set", "x=1e16"], "--set x=1e+16: values must lie within |x| <= 2^50"),
])
def test_cli_bad_input_exits_2_without_traceback(capsys, argv, message):
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert message in err and "Traceback" not in err


def test_a_literal_too_large_for_float64_is_shown_under_the_expression(capsys):
    code, out, err = run_cli(capsys, "calc", "1 + 1e400")
    assert code == 2 and out == ""
    assert err.splitlines()[1:] == ["    1 + 1e400", "        ^~~~~"]


@pytest.mark.parametrize("expression, inputs, exact", [
    ("-1/7", [], -1 / 7), ("-x*2", ["--set", "x=3"], -6.0), ("-(2+1)", [], -3.0),
    ("--1", [], 1.0), ("--(2+1)", [], 3.0)])
def test_an_expression_may_start_with_a_minus_without_a_double_dash(capsys, expression,
                                                                    inputs, exact):
    code, out, err = run_cli(capsys, "calc", expression, *inputs, "--json")
    assert code == 0, err
    assert json.loads(out)["exact"] == pytest.approx(exact, rel=1e-15)


@pytest.mark.parametrize("zero", ["0e-400", "0.000e5"])
def test_a_written_zero_is_not_an_underflow(capsys, zero):
    """1e-400 rounds to 0 and printed `exact: 0`; it is refused, but a zero is a zero."""
    code, out, _ = run_cli(capsys, "calc", f"{zero}+1", "--json")
    assert code == 0 and json.loads(out)["exact"] == 1.0


@pytest.mark.parametrize("value, message", [
    (True, "expected a real number, got True"),          # 'unexpected True' in <calc>
    (1 + 2j, "expected a real number"),                   # a TypeError
    ("3", "expected a real number, got '3'"),
    (np.array([1.0, 2.0]), "expected a real number"),
    (2 ** 2000, "too large for float64"),                 # an OverflowError
    (1e-320, "too small for float64"),                    # computed on as 0, exit 'not within'
    (2.0 ** 51, "values must lie within"),
])
def test_calculate_refuses_inputs_the_program_cannot_hold(value, message):
    with pytest.raises(InputError, match=re.escape(message)):
        calculate("x", {"x": value})


def test_calculate_takes_numpy_scalars_as_numbers():
    """np.float32(2.5) was written into the program as `np.float32(2.5)`."""
    result = calculate("x * 2", {"x": np.float32(2.5)})
    assert result.exact == 5.0 and result.within_bound


@pytest.mark.parametrize("parameters", [{"inv": {"high": math.inf}},       # ZeroDivisionError
                                        {"inv": {"terms": math.nan}},
                                        {"mul": {"scale": -math.inf}}])
def test_calculate_refuses_block_parameters_that_are_not_finite(parameters):
    (name, values), = parameters.items()
    (key, _), = values.items()
    with pytest.raises(InputError, match=rf"{name}\.{key} must be a finite number"):
        calculate("1/3*2", {}, parameters)


def test_an_error_past_the_bound_leaves_the_json_whole(capsys, monkeypatch):
    """The verdict line went to stdout after the JSON object, which no reader could parse."""
    import vm.apps.calc as calc

    def beyond(*args, **kwargs):
        result = calculate(*args, **kwargs)
        result.bound = 0.0
        result.transformer = result.exact + 1e-9
        return result

    monkeypatch.setattr(calc, "calculate", beyond)
    code, out, err = run_cli(capsys, "calc", "1/3", "--json")
    assert code == 1 and json.loads(out)["within_bound"] is False
    assert "exceeds the documented bound" in err


def test_a_bound_wider_than_the_machine_is_refused_before_the_run(capsys):
    """mul.scale=1e-300 has a finite bound of 7e285: the run went on, its state turned NaN,
    it never halted, and calc ended in a RuntimeError traceback."""
    code, out, err = run_cli(capsys, "calc", "2*3", "--param", "mul.scale=1e-300")
    assert code == 2 and out == ""
    assert "error bound on these operands is 6.89e+285" in err and "Traceback" not in err


def test_max_seconds_stops_a_long_calculation(capsys):
    """An expression is a step per operator, 0.1 s each at a thousand: a long one ran for
    minutes with no output and no way to bound it; --max-seconds stops it as it does `run`."""
    code, out, err = run_cli(capsys, "calc", "1+2*3", "--max-seconds", "1e-9")
    assert code == 1 and out == ""
    assert "stopped by --max-seconds 1e-09 after 1 step," in err


def test_a_too_long_sum_is_refused_in_the_expression_not_in_the_generated_program(capsys):
    """A 20 KB sum compiled to a program past the assembler's token limit, whose caret
    pointed at `<calc>:20003:16`, a line of a program the user never wrote."""
    group = "(" + "+".join(["1"] * 50) + ")"
    expression = "+".join([group] * 50)
    code, out, err = run_cli(capsys, "calc", expression)
    assert code == 2 and out == ""
    assert err.startswith("<expression>:1:") and "more than 2,000 operators" in err
    with pytest.raises(SourceError, match="more than 2,000 operators") as caught:
        calculate(expression, {})
    assert caught.value.file == "<expression>"


def test_a_result_beyond_the_machine_s_domain_is_refused_at_its_operator():
    """2^50 + 2^50 came back at exit 0, 'within the bound', while `ltvm run` of the same
    program said the value leaves the machine's domain, where the bound does not hold."""
    with pytest.raises(SourceError) as caught:
        calculate("a + a + 1", {"a": 2.0 ** 50})
    assert caught.value.message.startswith("the result here is 2.2518e+15: values must lie "
                                           "within |x| <= 2^50")
    assert str(caught.value).splitlines()[1:] == ["    a + a + 1", "    ^~~~~"]
    assert calculate("a + 0", {"a": 2.0 ** 50}).exact == 2.0 ** 50


@pytest.mark.parametrize("expression, dtype, message, caret", [
    # exit 0 with `exact: 1e-310` and a relative error of 4e297
    ("1e-150*1e-150*1e-10", "float64",
     "the result here is 1e-310, below the smallest normal float64 number 2.225e-308",
     "    ^~~~~~~~~~~~~~~~~~~"),
    ("2*(1e-200*1e-200)", "float64",
     "the result here, 1e-200 * 1e-200, rounds to 0: it lies below the smallest normal "
     "float64 number", "       ^~~~~~~~~~~~~"),
    ("1e-20*1e-20+1", "float32",
     "the result here is 1e-40, below the smallest normal float32 number 1.175e-38",
     "    ^~~~~~~~~~~"),
    ("1e-40+1", "float32",
     "an operand here is 1e-40, below the smallest normal float32 number 1.175e-38",
     "    ^~~~~~~"),
])
def test_a_value_the_machine_flushes_to_0_is_refused_as_a_literal_is(capsys, expression, dtype,
                                                                      message, caret):
    """A literal below the smallest normal number is refused; an exact intermediate or result
    there came back at exit 0, with a relative error against a value the machine cannot
    hold and a bound that assumes normal numbers."""
    code, out, err = run_cli(capsys, "calc", expression, "--dtype", dtype)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith("<expression>:1:") and message in err
    assert err.splitlines()[2] == caret


def test_a_normal_result_near_the_smallest_is_computed(capsys):
    code, out, _ = run_cli(capsys, "calc", "1e-300*1e-7", "--json")
    assert code == 0 and json.loads(out)["exact"] == pytest.approx(1e-307, rel=1e-15)


def test_no_relative_error_is_reported_against_an_exact_0(capsys):
    """sqrt(0) printed the absolute error, 3.6e-14, as its relative error; relative to 0 it
    is unbounded, not small. (The absolute error depends on the CPU's rounding: on an
    AVX-512 Xeon the transformer's sqrt(0) is exactly 0, so only its sign is asserted.)"""
    code, out, _ = run_cli(capsys, "calc", "sqrt(0)", "--json")
    data = json.loads(out)
    assert code == 0 and data["exact"] == 0.0 and data["error"] >= 0
    assert data["relative_error"] is None
    code, out, _ = run_cli(capsys, "calc", "sqrt(0)")
    assert code == 0 and "relative_error: none (the exact value is 0)" in out.splitlines()


@pytest.mark.parametrize("expression, inputs, message", [
    (None, {}, "the expression must be a str, got NoneType"),       # a TypeError
    (b"1+1", {}, "the expression must be a str, got bytes"),         # a TypeError
    ("1+1", None, "the inputs must map names (str) to numbers, got None"),  # not iterable
    ("x", [("x", 1.0)], "the inputs must map names (str) to numbers"),  # no input "('x', 1.0)"
    ("x", {1: 2.0}, "the inputs must map names (str) to numbers"),
])
def test_calculate_names_arguments_of_the_wrong_type(expression, inputs, message):
    with pytest.raises(InputError) as caught:
        calculate(expression, inputs)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize("config,message", [
    (None, "config must be an EngineConfig, got NoneType"),
    ({"dtype": "float32"}, "config must be an EngineConfig, got dict"),
    (EngineConfig(sampling=0.5), "calc runs the exact transformer, not stochastic reads")])
def test_calculate_refuses_a_config_that_is_none_or_sampled(config, message):
    """None and a dict failed with an AttributeError on `.dtype`; a sampling config returned
    6 = 2 * 3 as 9e-166, against a bound that holds only for exact reads."""
    with pytest.raises(InputError, match=message):
        calculate("a * b", {"a": 2, "b": 3}, config=config)
