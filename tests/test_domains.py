"""The domain check: the first block call outside the domain its bound covers, by name."""

from __future__ import annotations

import json

import pytest

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
    (10.0, "mul(x, y)", 2, "|result| <= 20"),
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


def test_calls_inside_their_domains_pass_and_the_step_limit_is_respected():
    assert first_domain_violation(FLEQ.assemble_text(SOURCE.format(x=2.0, call="mul(x, y)"),
                                                "d.fleq"), 100) is None
    late = FLEQ.assemble_text(SOURCE.format(x=10.0, call="mul(x, y)"), "d.fleq")
    assert first_domain_violation(late, 2) is None


def test_run_prints_the_domain_line_and_exits_1_outside(tmp_path, capsys):
    inside, outside = tmp_path / "in.fleq", tmp_path / "out.fleq"
    inside.write_text(SOURCE.format(x=2.0, call="mul(x, y)"))
    outside.write_text(SOURCE.format(x=10.0, call="mul(x, y)"))
    assert main(["run", str(inside)]) == 0
    assert "domain: ok" in capsys.readouterr().out
    assert main(["run", str(outside), "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert payload["halted"] and payload["domain"].startswith("step 2: r = mul(x, y)")
