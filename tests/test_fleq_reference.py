"""The FLEQ reference interpreter: counters, branches, jumps, matrices, the step limit."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from vm.isa import FLEQ
from vm.machines.fleq.reference import FleqReference, run_fleq_reference
from vm.routines.base import matrix_literal
from fleq_sources import GROW

ROOT = Path(__file__).resolve().parents[1]

LOOP = """.data
n: {k}
one: 1
x: 0.1
acc: 0.0
.code
loop: acc = add(acc, x)
      n = sub(n, one)
      if n <= 0 goto done
      goto loop
done: halt
"""


@pytest.mark.parametrize("k", [1, 2, 7])
def test_a_counter_loop_runs_k_times(k):
    program = FLEQ.assemble_text(LOOP.format(k=k), "loop.fleq")
    result = run_fleq_reference(program, trace=True)
    memory = program.named_memory(result.cells)
    expected = 0.0
    for _ in range(k):
        expected += 0.1
    assert result.halted and result.pc == program.eof
    assert memory["n"] == 0 and memory["acc"] == expected
    assert result.steps == 4 * k, "add, sub, if, goto per pass; the last pass jumps to halt"
    branches = [(step.pc, step.jumped) for step in result.trace if step.pc == 2]
    assert branches == [(2, False)] * (k - 1) + [(2, True)]
    assert all(step.jumped and step.next_pc == 0 for step in result.trace if step.pc == 3)


@pytest.mark.parametrize("value, jumps", [(-2, True), (0, True), (1, False), (5, False)])
def test_a_branch_jumps_exactly_when_the_counter_is_at_most_zero(value, jumps):
    source = (f".data\nn: {value}\nx: 1.5\ny: 0.0\n.code\ny = add(x, x) if n <= 0 goto skip\n"
              "y = sub(y, x)\nskip: halt\n")
    program = FLEQ.assemble_text(source, "b.fleq")
    result = run_fleq_reference(program, trace=True)
    first = result.trace[0]
    assert first.jumped is jumps and first.next_pc == (2 if jumps else 1)
    assert first.written == program.variables["y"].cell, "the write happens either way"
    assert program.named_memory(result.cells)["y"] == (3.0 if jumps else 1.5)


def test_goto_skips_and_halt_stops_before_later_instructions():
    source = (".data\nx: 1.0\n.code\ngoto over\nx = add(x, x)\nover: x = sub(x, x)\nhalt\n"
              "x = add(x, x)\n")
    program = FLEQ.assemble_text(source, "g.fleq")
    result = run_fleq_reference(program, trace=True)
    assert [step.pc for step in result.trace] == [0, 2, 3]
    assert result.halted and program.named_memory(result.cells)["x"] == 0.0


def test_matrices_add_and_subtract_elementwise_and_keep_their_padding_zero():
    A = np.array([[0.1, -0.7], [1.3, 2.9]])
    B = np.array([[0.3, 0.2], [-1e-3, 7.1]])
    source = (f".d 3\n.data\nA: {matrix_literal(A)}\nB: {matrix_literal(B)}\n"
              "S: .zeros 2x2\nD: .zeros 2x2\n.code\nS = add(A, B)\nD = sub(A, B)\nhalt\n")
    program = FLEQ.assemble_text(source, "m.fleq")
    result = run_fleq_reference(program)
    cells = {name: result.cells[program.variables[name].cell] for name in ("S", "D")}
    np.testing.assert_array_equal(cells["S"][:2, :2], A + B)
    np.testing.assert_array_equal(cells["D"][:2, :2], A - B)
    for cell in cells.values():
        assert cell.shape == (3, 3) and not cell[2].any() and not cell[:, 2].any()


def test_the_calculator_computes_the_papers_formula():
    program = FLEQ.assemble_file(ROOT / "programs" / "fleq" / "calculator.fleq")
    result = run_fleq_reference(program)
    assert result.halted and result.steps == 7
    expected = math.sqrt(1 / (((3 + 5) - 1) * 2)) / 100
    assert program.named_memory(result.cells)["t"] == pytest.approx(expected, rel=1e-15)


def test_the_step_limit_stops_a_program_that_does_not_halt():
    program = FLEQ.assemble_text(".data\nx: 1.0\n.code\nspin: x = add(x, x)\ngoto spin\n", "s.fleq")
    result = run_fleq_reference(program, max_steps=11)
    assert not result.halted and result.steps == 11 and result.pc == 1
    assert program.named_memory(result.cells)["x"] == 2.0 ** 6


def test_running_does_not_change_the_program_and_a_halted_machine_stays_put():
    program = FLEQ.assemble_text(LOOP.format(k=3), "loop.fleq")
    initial = [cell.copy() for cell in program.cells]
    machine = FleqReference(program)
    machine.run(1000)
    assert all(np.array_equal(a, b) for a, b in zip(program.cells, initial, strict=True))
    cells = [cell.copy() for cell in machine.cells]
    record = machine.step()
    assert record.written is None and record.next_pc == program.eof
    assert all(np.array_equal(a, b) for a, b in zip(machine.cells, cells, strict=True))
    machine.reset()
    assert machine.pc == 0 and machine.steps == 0
    assert all(np.array_equal(a, b) for a, b in zip(machine.cells, initial, strict=True))


@pytest.mark.parametrize("op", ["mul", "add"])
def test_a_value_beyond_the_machines_domain_stops_the_run_without_numpy_warnings(op):
    import warnings
    program = FLEQ.assemble_text(GROW.format(op=op))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = run_fleq_reference(program, 1000)
    assert not result.halted and result.steps == 1
    assert result.left_domain is not None and result.left_domain.step == 0
    assert result.left_domain.violation(program).describe().startswith(
        f"step 0: a = {op}(a, a) leaves the machine's domain (every value within |x| <= 2^50")


def test_overflow_inside_a_step_is_silent_and_reported_as_leaving_the_domain():
    import warnings
    program = FLEQ.assemble_text(GROW.format(op="mul"))
    reference = FleqReference(program)
    reference.cells[program.variables["a"].cell][0, 0] = 1e200  # as if a run had got here
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        record = reference.step()
    assert not np.isfinite(record.new[0, 0]) and reference.left_domain.step == 0


def test_a_program_inside_the_domain_has_no_domain_exit():
    assert run_fleq_reference(FLEQ.assemble_text(LOOP.format(k=3))).left_domain is None


def test_the_reference_refuses_what_is_no_fleq_program_and_a_trace_flag_no_bool():
    """run_fleq_reference(None) (or a SUBLEQ program) failed with "no attribute
    'functions'", and trace='no' recorded every step."""
    from assembler.subleq import assemble
    from vm.common.errors import InputError
    for program in (None, assemble(".code\nhalt\n")):
        with pytest.raises(InputError, match="the FLEQ reference takes a FLEQ program"):
            run_fleq_reference(program)
    program = FLEQ.assemble_text(".data\nx: 1.0\n.code\nx = add(x, x)\nhalt\n")
    with pytest.raises(InputError, match="trace must be True or False"):
        run_fleq_reference(program, 5, trace="no")
    assert run_fleq_reference(program, 5).halted
