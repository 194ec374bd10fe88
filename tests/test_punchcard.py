"""Punchcard encoding: the layout of Eq. (5), and decode(encode(p)) == p."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from vm.machines.subleq.punchcard import (decode_instructions, decode_memory, decode_pc, encode,
                                 geometry_for)
from assembler.subleq import assemble
from strategies import programs
from vm.common.encoding import pm1_code, word_value
from vm.common.errors import InputError
from vm.machines.subleq.layout import subleq_layout


@settings(max_examples=60, deadline=None)
@given(programs())
def test_encode_then_decode_round_trips_memory_pc_and_instructions(program):
    geometry = geometry_for(program)
    layout = subleq_layout(geometry)
    X = encode(program, geometry, layout)
    assert decode_memory(X, layout) == program.memory
    assert decode_pc(X, layout) == 0
    decoded = decode_instructions(X, layout)
    assert [(i.a, i.b, i.c) for i in decoded[:-1]] == \
        [(i.a, i.b, i.c) for i in program.instructions]
    assert (decoded[-1].a, decoded[-1].b, decoded[-1].c) == (*program.eof_operands, program.eof)


def test_entries_are_pm1_codes_where_defined_and_zero_elsewhere():
    program = assemble(".data\nx: 5\ny: -3\n.code\nsubleq x, y\nhalt\n", "t.sq")
    geometry = geometry_for(program, scratch=2)
    layout = subleq_layout(geometry)
    X = encode(program, geometry, layout)
    scratch, memory, code = (layout.regions[r] for r in ("scratch", "memory", "instructions"))
    assert X.shape == (layout.rows, 2 + 4 + 3)
    assert set(np.unique(X)) <= {-1.0, 0.0, 1.0}
    # indicator rows: scratch marks both scratch columns, cpu only the first
    assert list(X[layout["scratch"]][0]) == [1, 1] + [0] * 7
    assert list(X[layout["cpu"]][0]) == [1] + [0] * 8
    # positions: zero in scratch, the column index's code elsewhere (MSB first)
    assert not X[layout["pos"], :2].any()
    assert list(X[layout["pos"], 5]) == [-1, 1, -1, 1]  # 5 = 0b0101
    # memory words: two's complement, MSB first; y = -3 -> 11111101
    y = memory.start + program.symbols["y"].address
    assert list(X[layout["mem"], y]) == [1, 1, 1, 1, 1, 1, -1, 1]
    assert word_value(X[layout["mem"], y]) == -3
    # the program counter points at the first instruction column
    assert list(X[layout["pc"], scratch.start]) == list(pm1_code(code.start, 4))
    # every working field is zero before the first pass
    for name in ("cur", "inc", "va", "vb", "res", "wbuf"):
        assert not X[layout[name]].any()


def test_eof_instruction_points_at_itself_through_the_reserved_cells():
    program = assemble(".code\nhalt\n", "t.sq")
    geometry = geometry_for(program)
    layout = subleq_layout(geometry)
    X = encode(program, geometry, layout)
    eof = geometry.eof_column
    assert list(X[layout["instr_c"], eof]) == list(pm1_code(eof, geometry.pos_bits))
    assert list(X[layout["instr_a"], eof]) == list(pm1_code(geometry.memory_column(0),
                                                                    geometry.pos_bits))
    assert decode_memory(X, layout)[:2] == [0, -1]


@pytest.mark.parametrize("scratch", [2.5, "2", True])
def test_a_scratch_width_that_is_not_an_integer_is_refused(scratch):
    """2.5 failed in int.bit_length, '2' in a comparison; True ran as 1."""
    program = assemble(".data\nx: 1\n.code\nhalt\n", "x.sq")
    with pytest.raises(InputError, match="geometry scratch must be an integer"):
        geometry_for(program, scratch=scratch)


def test_geometry_functions_refuse_another_instruction_sets_program():
    """Each failed with an AttributeError ('memory', 'd')."""
    from vm.isa import FLEQ
    from vm.machines.fleq.punchcard import fleq_geometry_for
    with pytest.raises(InputError, match="geometry_for takes a SUBLEQ program"):
        geometry_for(FLEQ.assemble_text(".data\na: 1.0\n.code\n halt\n"))
    with pytest.raises(InputError, match="fleq_geometry_for takes a FLEQ program"):
        fleq_geometry_for(assemble(".data\nx: 1\n.code\nhalt\n", "x.sq"))
