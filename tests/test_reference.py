"""The reference interpreter: SUBLEQ semantics with N-bit wraparound, halting, trace."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from assembler.program import Instruction, Program, wrap
from assembler.subleq import assemble
from vm.machines.subleq.reference import ReferenceMachine, run_reference


def test_subtracts_and_branches_on_non_positive():
    program = assemble(""".data
x: 3
y: 5
r: 0
.code
subleq x, y, neg      ; y = 2 > 0: falls through
subleq y, r, neg      ; r = -2 <= 0: jumps
subleq x, x
neg: halt
""", "t.sq")
    result = run_reference(program, trace=True)
    assert result.halted and result.steps == 3  # halt is an instruction (a jump to EOF)
    memory = program.named_memory(result.memory)
    assert (memory["x"], memory["y"], memory["r"]) == (3, 2, -2)
    first, second, _ = result.trace
    assert (first.old, first.new, first.jumped, first.next_pc) == (5, 2, False, 1)
    assert (second.old, second.new, second.jumped, second.next_pc) == (0, -2, True, 3)


def test_zero_result_takes_the_branch():
    program = assemble(".data\nx: 4\n.code\nsubleq x, x, end\nsubleq x, x\nend: halt\n", "t.sq")
    result = run_reference(program, trace=True)
    assert result.trace[0].jumped and result.steps == 2


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 20), st.integers(-(10**7), 10**7), st.integers(-(10**7), 10**7))
def test_results_wrap_like_an_n_bit_twos_complement_adder(bits, a, b):
    a, b = wrap(a, bits), wrap(b, bits)
    program = Program([Instruction(2, 3, 1)], [0, -1, a, b], bits=bits)
    result = run_reference(program)
    expected = (b - a) % (1 << bits)
    if expected >= 1 << (bits - 1):
        expected -= 1 << bits
    assert result.memory[3] == expected
    assert -(1 << (bits - 1)) <= result.memory[3] < 1 << (bits - 1)


def test_step_limit_stops_a_loop_that_never_halts():
    program = assemble(".code\nloop: goto loop\n", "t.sq")
    result = run_reference(program, max_steps=50)
    assert not result.halted and result.steps == 50 and result.pc == 0


def test_eof_changes_nothing_and_stays_put():
    program = assemble(".data\nx: 9\n.code\nhalt\n", "t.sq")
    machine = ReferenceMachine(program)
    machine.step()
    before = list(machine.memory)
    for _ in range(3):
        record = machine.step()
        assert record.pc == program.eof and record.next_pc == program.eof
    assert machine.memory == before


def test_the_reference_refuses_what_is_no_subleq_program_and_a_trace_flag_no_bool():
    """run_reference(None) (or a FLEQ program) failed with "no attribute 'memory'", and
    trace='no' recorded every step."""
    import pytest

    from vm.common.errors import InputError
    from vm.isa import FLEQ
    fleq = FLEQ.assemble_text(".data\nx: 1.0\n.code\nhalt\n")
    for program in (None, fleq):
        with pytest.raises(InputError, match="the SUBLEQ reference takes a SUBLEQ program"):
            run_reference(program)
    program = assemble(".code\nhalt\n")
    with pytest.raises(InputError, match="trace must be True or False"):
        run_reference(program, 5, trace="no")
    assert run_reference(program, 5).halted
