"""Routines: the assembler splices their FLEQ expansion in place of the call."""

import pytest

from vm.isa import FLEQ
from assembler.diagnostics import SourceError
from vm.routines import base as library
from vm.machines.fleq.reference import FleqReference
from vm.routines.base import Expansion, Routine, RoutineCall


def _triple(call: RoutineCall) -> Expansion:
    """c = 3a, with a counter loop: the expansion has its own data, labels and branch."""
    (a,) = call.arguments
    k, k0, zero, acc, one, loop = (call.name(s) for s in ("k", "k0", "zero", "acc", "one", "loop"))
    return Expansion(
        data=[f"{k}: 0", f"{k0}: {int(call.keywords['times'])}", f"{zero}: 0", f"{acc}: 0.0",
              f"{one}: 1"],
        code=[f"{k} = add({k0}, {zero})",
              f"{acc} = sub({acc}, {acc})",
              f"{loop}: {acc} = add({acc}, {a.name})",
              f"{k} = sub({k}, {one})",
              f"if {k} <= 0 goto {loop}_done",
              f"goto {loop}",
              f"{loop}_done: {call.destination.name} = add({acc}, {acc})",
              f"{call.destination.name} = sub({call.destination.name}, {acc})"])


@pytest.fixture
def triple(monkeypatch):
    routine = Routine("times_n", "a added n times", 1, {"times": 3.0}, _triple)
    monkeypatch.setitem(library.ROUTINES, routine.name, routine)
    return routine


SOURCE = """
.data
x: 1.5
y: 0.0
z: 0.0
n: 2
one: 1
.code
start: y = times_n(x)
       z = times_n(y, times=2)
       n = sub(n, one)
       if n <= 0 goto end
       goto start
end:   halt
"""


def test_expansion_runs_and_labels_point_at_the_first_generated_statement(triple):
    program = FLEQ.assemble_text(SOURCE, "t.fleq")
    names = [v for v in program.variables if v.startswith("_")]
    assert names and all(n.startswith("_times_n") for n in names)
    assert program.labels["start"] == 0
    result = FleqReference(program).run(max_steps=200)
    assert result.halted
    memory = program.named_memory(result.cells)
    assert memory["y"] == pytest.approx(4.5)
    assert memory["z"] == pytest.approx(9.0)
    assert result.steps > 2 * 12, "the loop ran twice through both expansions"


def test_two_expansions_do_not_share_names(triple):
    program = FLEQ.assemble_text(SOURCE, "t.fleq")
    prefixes = {n.split("_")[2] for n in program.variables if n.startswith("_")}
    assert len(prefixes) == 2


@pytest.mark.parametrize("line, message, column", [
    ("y = times_n(x, often=2)", "has no argument 'often'", 16),
    ("y = times_n(x, x)", "takes 1 operand, got 2", 1),
    ("y = times_n(x) if y <= 0 goto end", "cannot branch", 16),
])
def test_bad_calls_are_located_in_the_user_file(triple, line, message, column):
    source = f".data\nx: 1.0\ny: 0.0\n.code\n{line}\nend: halt\n"
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(source, "bad.fleq")
    text = str(caught.value)
    assert message in text and "bad.fleq:5:" in text
    assert f"bad.fleq:5:{column}" in text


def test_user_names_may_not_take_the_generated_prefix():
    with pytest.raises(SourceError, match="reserved"):
        FLEQ.assemble_text(".data\n_x: 1.0\n.code\nhalt\n", "r.fleq")
