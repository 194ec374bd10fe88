"""assembler/fleq_program.py: the names a FLEQ program gives its cells and instructions."""

from __future__ import annotations

import numpy as np
import pytest

from vm.common.errors import InputError
from vm.isa import FLEQ

SOURCE = ".data\nx: 1.0\nn: 2\n.code\ntop: x = add(x, 1.0)\nagain:\nnext: goto top\n"


class CountingDict(dict):
    """A dict that counts the scans of its values and items."""

    scans = 0

    def items(self):
        CountingDict.scans += 1
        return super().items()

    def values(self):
        CountingDict.scans += 1
        return super().values()


def test_cells_and_instructions_are_named_by_their_variable_and_first_label():
    program = FLEQ.assemble_text(SOURCE, "names.fleq")
    assert [program.cell_name(c) for c in range(len(program.cells) + 1)] == [
        "@zero", "@one", "x", "n", "_const_1.0", f"cell{len(program.cells)}"]
    assert [program.label_at(i) for i in range(program.eof + 1)] == ["top", "again", "EOF"]


def test_naming_every_cell_and_instruction_scans_each_table_once():
    """label_at and cell_name scanned every label and variable for each call: the listing of
    20,000 labelled statements spent 7 s in them."""
    program = FLEQ.assemble_text(SOURCE, "names.fleq")
    program.labels = CountingDict(program.labels)
    program.variables = CountingDict(program.variables)
    CountingDict.scans = 0
    for _ in range(100):
        assert [program.label_at(i) for i in range(program.eof)] == ["top", "again"]
        assert [program.cell_name(c) for c in (2, 3)] == ["x", "n"]
    assert CountingDict.scans <= 2


@pytest.mark.parametrize("cells,message", [
    ([np.zeros((1, 1))], "memory holds 1 cell, the program has 5"),
    ([0.0] * 5, r"memory cells must be 1 x 1 arrays, got one of shape \(\)"),
    (None, "must be a list of the program's 5 cells, got NoneType")])
def test_named_memory_refuses_cells_of_another_count_or_shape(cells, message):
    """Too few cells failed with an IndexError, flat floats with "too many indices for
    array", None with a TypeError."""
    program = FLEQ.assemble_text(SOURCE, "names.fleq")
    with pytest.raises(InputError, match=message):
        program.named_memory(cells)


@pytest.mark.parametrize("value,message", [
    (np.array([[np.nan]]), "holds a value the machine does not hold"),
    (np.array([[1e300]]), "holds a value the machine does not hold"),
    (np.array([[1e-320]]), "holds a value the machine does not hold"),
    (np.array([[3 + 1j]]), "must hold real numbers, got dtype complex128"),
    (np.array([[True]]), "must hold real numbers, got dtype bool"),
    (np.array([["3"]]), "must hold real numbers, got dtype <U1"),
    (np.array([1.0]), "every cell must be 1x1, cell 2 is 1")])
def test_a_cell_the_machine_cannot_hold_is_refused(value, message):
    """dataclasses.replace(program, cells=...) took NaN and 1e300 (the reference computed
    on with them, the transformer returned NaN) and 3 + 1j (its imaginary part dropped);
    '3' failed in a numpy ufunc."""
    import dataclasses
    program = FLEQ.assemble_text(SOURCE, "cells.fleq")
    cells = list(program.cells)
    cells[program.variables["x"].cell] = value
    with pytest.raises(InputError, match=message):
        dataclasses.replace(program, cells=cells)


def test_cells_given_as_lists_or_integers_are_kept_as_float64_arrays():
    """A nested list failed with "'list' object has no attribute 'shape'"."""
    import dataclasses
    program = FLEQ.assemble_text(SOURCE, "cells.fleq")
    cells = list(program.cells)
    cells[program.variables["x"].cell] = [[4]]
    copy = dataclasses.replace(program, cells=cells)
    assert all(isinstance(cell, np.ndarray) and cell.dtype == np.float64 for cell in copy.cells)
    assert FLEQ.run_reference(copy, 1).memory[program.variables["x"].cell][0, 0] == 5.0


@pytest.mark.parametrize("change,message", [
    ({"cells": None}, "cells must be a list of 1x1 arrays"),
    ({"cells": []}, "cells must be a list of 1x1 arrays"),
    ({"d": 1.0}, "the block size d must be a whole number")])
def test_cells_or_a_block_size_of_the_wrong_kind_are_refused(change, message):
    """cells=None failed with a TypeError in len(), [] with an IndexError; d = 1.0 passed."""
    import dataclasses
    with pytest.raises(InputError, match=message):
        dataclasses.replace(FLEQ.assemble_text(SOURCE, "cells.fleq"), **change)


@pytest.mark.parametrize("field", ["a", "target"])
def test_an_operand_or_jump_target_that_is_no_integer_is_refused(field):
    """An instruction with a = 2.0 or target = 1.0 passed the range checks and failed in
    the reference as a list index."""
    import dataclasses
    program = FLEQ.assemble_text(SOURCE, "cells.fleq")
    first = program.instructions[0]
    bad = dataclasses.replace(first, **{field: float(getattr(first, field))})
    with pytest.raises(InputError, match="operands and the jump target must be integers"):
        dataclasses.replace(program, instructions=[bad, *program.instructions[1:]])


@pytest.mark.parametrize("index", [-1, 1.5, True, None, "0", 10**6])
def test_lookups_by_index_refuse_what_is_no_index_of_the_program(index):
    """instruction_text(-1) gave the last instruction, (None) or (10**6) failed in list
    indexing, label_at(True) answered for instruction 1, cell_name('0') 'cell0'."""
    program = FLEQ.assemble_text(SOURCE)
    for lookup in (program.instruction_text, program.label_at):
        with pytest.raises(InputError, match="index must be a whole number from 0 to"):
            lookup(index)
    if index != 10**6:  # past the cells is a geometry's padding
        with pytest.raises(InputError, match="cell must be a whole number from 0"):
            program.cell_name(index)
    assert program.instruction_text(np.int64(program.eof)) == "EOF"
    assert program.label_at(0) == "top" and program.cell_name(10**6) == "cell1000000"


@pytest.mark.parametrize("field, value, message", [
    ("instructions", None, "instructions must be a list of FleqInstruction"),
    ("instructions", [None], "instruction 0 must be an FleqInstruction"),
    ("variables", None, "variables must be a dict"), ("labels", None, "labels must be a dict"),
    ("functions", None, r"functions must be \(name, parameters\) pairs"),
    ("functions", ["add"], r"functions must be \(name, parameters\) pairs")])
def test_a_program_refuses_instructions_names_or_blocks_of_the_wrong_kind(field, value, message):
    """replace(program, instructions=None) or functions=None failed with a TypeError,
    instructions=[None] with "no attribute 'pos'", and variables=None was taken, to fail in
    named_memory."""
    import dataclasses
    program = FLEQ.assemble_text(SOURCE)
    with pytest.raises(InputError, match=message):
        dataclasses.replace(program, **{field: value})
    assert dataclasses.replace(program, functions=list(program.functions)).eof == 2
