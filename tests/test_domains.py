"""The domain check: the first block call outside the domain its bound covers, by name."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vm.common.errors import InputError
from vm.isa import FLEQ
from vm.cli import main
from vm.machines.fleq.domains import first_domain_violation

SOURCE = """.data
x: {x}
y: 5.0
r: 0.0
n: 1
one: 1
.code
r = add(x, y)
n = sub(n, one)
r = {call}
halt
"""


@pytest.mark.parametrize("x, call, step, description", [
    (3e5, "mul(x, y)", 2, "|result| <= 1e+06"),
    (0.01, "inv(x)", 2, "0.1 <= |a| <= 100"),
    (-1.0, "sqrt(x)", 2, "a = 0 or 0.01 <= a <= 100"),
])
def test_the_first_call_outside_its_domain_is_named(x, call, step, description):
    program = FLEQ.assemble_text(SOURCE.format(x=x, call=call), "d.fleq")
    violation = first_domain_violation(program, 100)
    assert violation is not None
    assert (violation.step, violation.function, violation.domain) == \
        (step, call.split("(")[0], description)
    assert violation.describe().startswith(f"step {step}: r = {call} leaves")
    name = call.split("(")[0]
    assert f"--param {name}." in violation.describe(), "names the parameter that widens it"


def test_calls_inside_their_domains_pass_and_the_step_limit_is_respected():
    assert first_domain_violation(FLEQ.assemble_text(SOURCE.format(x=2.0, call="mul(x, y)"),
                                                "d.fleq"), 100) is None
    late = FLEQ.assemble_text(SOURCE.format(x=3e5, call="mul(x, y)"), "d.fleq")
    assert first_domain_violation(late, 2) is None


def test_run_prints_the_domain_line_and_exits_1_outside(tmp_path, capsys):
    inside, outside = tmp_path / "in.fleq", tmp_path / "out.fleq"
    inside.write_text(SOURCE.format(x=2.0, call="mul(x, y)"))
    outside.write_text(SOURCE.format(x=3e5, call="mul(x, y)"))
    assert main(["run", str(inside)]) == 0
    assert "domain: ok" in capsys.readouterr().out
    assert main(["run", str(outside), "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert payload["halted"] and payload["domain"].startswith("step 2: r = mul(x, y)")


DOUBLING = """.data
x: 1.0
k: -69
one: 1
.code
loop: k = add(k, one)
      x = add(x, x) if k <= 0 goto loop
      halt
"""


def test_a_value_past_the_machine_magnitude_is_flagged_at_the_step_that_writes_it():
    """x doubles 70 times; 2^51 is the first value past 2^50 (step 2 * 51 - 1 = 101)."""
    violation = first_domain_violation(FLEQ.assemble_text(DOUBLING, "double.fleq"), 1000)
    assert violation is not None and violation.function == "the machine"
    assert violation.step == 101
    assert "|x| <= 2^50" in violation.describe()


def test_a_run_past_the_magnitude_exits_1_and_its_json_holds_no_nan(capsys, tmp_path):
    source = tmp_path / "double.fleq"
    source.write_text(DOUBLING)
    assert main(["run", str(source), "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert "the machine's domain" in payload["domain"]
    assert all(value is None or abs(value) < float("inf")
               for value in payload["memory"].values())


@pytest.mark.parametrize("literal", ["2e18", "-1.2e15", "1e400"])
def test_literals_beyond_the_magnitude_are_refused_where_they_stand(literal, capsys, tmp_path):
    source = tmp_path / "big.fleq"
    source.write_text(f".data\nx: {literal}\n.code\nhalt\n")
    assert main(["asm", str(source)]) == 2
    err = capsys.readouterr().err
    assert "big.fleq:2:4: error:" in err and "^" in err


def test_values_inside_the_magnitude_stay_exact_on_the_transformer(capsys, tmp_path):
    source = tmp_path / "edge.fleq"
    source.write_text(".data\nx: 5e14\ny: 0.0\nc: 3.0\nd: 4.0\ne: 0.0\n.code\n"
                      "y = add(x, x)\ne = add(c, d)\nhalt\n")
    assert main(["run", str(source), "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert (memory["y"], memory["c"], memory["e"]) == (1e15, 3.0, 7.0)


def test_a_counter_past_2_to_the_24_is_flagged_in_float32_only():
    source = ".data\nn: 16777200\nstep: 100\n.code\nloop: n = add(n, step)\nhalt\n"
    program = FLEQ.assemble_text(source, "count.fleq")
    assert first_domain_violation(program, 10, "float64") is None
    violation = first_domain_violation(program, 10, "float32")
    assert violation is not None and "2^24 in float32" in violation.describe()


def test_a_literal_operand_beyond_the_magnitude_is_refused(capsys, tmp_path):
    source = tmp_path / "lit.fleq"
    source.write_text(".data\nx: 1.0\ny: 0.0\n.code\ny = mul(x, 1e20)\nhalt\n")
    assert main(["asm", str(source)]) == 2
    assert "lit.fleq:5:12: error: values must lie within |x| <= 2^50" in capsys.readouterr().err


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from([-1.0, 1.0]), st.floats(-3, 19)), min_size=3,
                max_size=3),
       st.lists(st.tuples(st.sampled_from(["add", "sub"]), st.integers(0, 2),
                          st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=4))
def test_a_run_is_within_bound_or_refused_or_flagged_never_silently_wrong(values, steps):
    """Random magnitudes up to 1e19 and random add/sub chains (blocks exact to rounding): the
    assembler refuses, or the replay's domain check flags (run exits 1), or every cell the
    transformer ends with equals the exact run's."""
    from vm.machines.fleq.punchcard import fleq_geometry_for
    from vm.machines.fleq.reference import run_fleq_reference
    from vm.runtime.executor import run_transformer
    names = ("p", "q", "r")
    data = [f"{name}: {sign * 10.0 ** power!r}" for name, (sign, power) in zip(names, values)]
    code = [f"{names[c]} = {f}({names[a]}, {names[b]})" for f, a, b, c in steps]
    source = "\n".join([".data", *data, ".code", *code, "halt"]) + "\n"
    try:
        program = FLEQ.assemble_text(source, "random.fleq")
    except InputError as error:
        assert "2^50" in str(error) or "domain" in str(error) or "finite" in str(error)
        return
    if first_domain_violation(program, 100) is not None:
        return
    exact = program.named_memory(run_fleq_reference(program, 100).cells)
    got = program.named_memory(run_transformer(program, fleq_geometry_for(program), 100).memory)
    assert got == exact, source


@pytest.mark.parametrize("call, parameters, bound", [
    ("mul(x, y)", {"mul": {"scale": 1e-50}}, "6.89e+35 + 1.78e-15 |f|"),  # computed NaN
    ("inv(x)", {"inv": {"sharpness": 1e-300}}, "0 + inf |f|"),  # gave 5e-16 for 1/2
    ("sigmoid_prime(x)", {"sigmoid_prime": {"step": 1e-300}}, "1.33e+285 + 0 |f|"),  # gave 0
])
def test_a_call_of_a_block_whose_parameters_leave_it_no_bound_is_flagged(call, parameters,
                                                                          bound):
    """Such calls ran with `domain: ok` and exit 0 whatever the transformer computed."""
    program = FLEQ.assemble_text(SOURCE.format(x=2.0, call=call), "p.fleq",
                                 parameters=parameters)
    violation = first_domain_violation(program, 100)
    assert violation is not None and violation.step == 2
    assert f"its error bound is {bound} in float64" in violation.describe()


def test_run_exits_1_where_a_block_has_no_bound(tmp_path, capsys):
    source = tmp_path / "p.fleq"
    source.write_text(SOURCE.format(x=2.0, call="mul(x, y)"))
    assert main(["run", str(source), "--param", "mul.scale=1e-50"]) == 1
    assert "domain: step 2: r = mul(x, y) leaves mul's domain (none at scale=1e-50" in \
        capsys.readouterr().out



def test_values_float32_holds_only_as_subnormals_are_flagged():
    """The passes flush subnormals: in float32 1e-40 + 1e-40 gave 0, with `domain: ok`."""
    program = FLEQ.assemble_text(SOURCE.format(x=1e-40, call="add(x, x)"), "p.fleq")
    assert first_domain_violation(program, 100, "float64") is None
    violation = first_domain_violation(program, 100, "float32")
    assert violation is not None and violation.step == 0
    assert "nonzero |x| >= 1.18e-38 in float32; smaller values flush to 0" in \
        violation.describe()


@pytest.mark.parametrize("arguments, message", [
    ((-1, "float64"), "max_steps must be a whole number"),
    ((1.5, "float64"), "max_steps must be a whole number"),
    ((5, "float16"), "dtype must be one of float32, float64"),
    ((5, None), "dtype must be one of float32, float64")])
def test_the_domain_replay_refuses_a_step_count_or_dtype_it_cannot_replay(arguments, message):
    """first_domain_violation(program, -1) replayed nothing and answered None (no
    violation), 1.5 failed in range(), dtype 'float16' or None with a KeyError."""
    program = FLEQ.assemble_text(".data\nx: 1.0\n.code\nx = add(x, x)\nhalt\n")
    with pytest.raises(InputError, match=message):
        first_domain_violation(program, *arguments)
    with pytest.raises(InputError, match="the domain replay takes a FLEQ program"):
        first_domain_violation(None, 5)
    assert first_domain_violation(program, 5, "float32") is None
