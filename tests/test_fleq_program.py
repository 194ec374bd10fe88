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
