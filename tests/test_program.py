"""assembler/program.py: the names a SUBLEQ program gives its cells and instructions."""

from __future__ import annotations

import pytest

from assembler.subleq import assemble
from vm.common.errors import InputError
from vm.isa import SUBLEQ

SOURCE = """.data
x: 5
xs: .array 1, 2, 3
.code
top:  subleq x, xs+2
again:
next: subleq xs, x, top
      halt
"""


class CountingDict(dict):
    """A dict that counts the scans of its items."""

    scans = 0

    def items(self):
        CountingDict.scans += 1
        return super().items()


def test_cells_and_instructions_are_named_by_their_first_symbol_and_label():
    program = assemble(SOURCE, "names.sq")
    assert [program.address_name(a) for a in range(len(program.memory) + 1)] == [
        "@zero", "@minus_one", "x", "xs+0", "xs+1", "xs+2", "mem[6]"]
    assert [program.label_at(i) for i in range(program.eof + 1)] == ["top", "again", None,
                                                                    "EOF"]


def test_naming_every_instruction_scans_the_labels_once_not_once_a_name():
    """label_at scanned every label for each call: a trace of 30,000 steps through 30,000
    labels took over a minute in it."""
    program = assemble(SOURCE, "names.sq")
    program.labels = CountingDict(program.labels)
    CountingDict.scans = 0
    names = [program.label_at(i) for i in range(program.eof)] * 100
    assert names[:3] == ["top", "again", None] and CountingDict.scans <= 1


@pytest.mark.parametrize("memory,message", [
    ([0, -1], "memory holds 2 words, the program has 6"),
    ([0] * 20, "memory holds 20 words, the program has 6"),
    (None, "must be a list of the program's 6 words, got NoneType")])
def test_named_memory_refuses_a_memory_of_another_length(memory, message):
    """A short memory failed with an IndexError, None with a TypeError, and a longer one
    (another program's) was named as if it were this program's."""
    program = assemble(SOURCE, "names.sq")
    with pytest.raises(InputError, match=message):
        program.named_memory(memory)
    unnamed = assemble(".code\nhalt\n", "unnamed.sq")  # SUBLEQ names none of it: `mem`
    with pytest.raises(InputError, match="memory holds 1 word, the program has 2"):
        SUBLEQ.named_memory(unnamed, [0])
