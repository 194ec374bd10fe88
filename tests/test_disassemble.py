"""The disassembler: readable text that assembles back to the same program."""

from __future__ import annotations

from pathlib import Path

import pytest

from assembler.disassemble import disassemble
from assembler.subleq import assemble, assemble_file

PROGRAMS = sorted(Path(__file__).resolve().parents[1].glob("programs/subleq/*.sq"))


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_reassembling_the_listing_gives_the_same_program(path):
    program = assemble_file(path)
    again = assemble(disassemble(program), "listing.sq")
    assert again.memory == program.memory and again.bits == program.bits
    assert [(i.a, i.b, i.c) for i in again.instructions] == \
        [(i.a, i.b, i.c) for i in program.instructions]


def test_listing_uses_labels_names_and_pseudo_instructions():
    program = assemble(".data\nx: 1\nys: .array 2, 3\n.code\ntop: subleq ys+1, x, end\n"
                       "goto top\nend: halt\n", "t.sq")
    text = disassemble(program)
    assert "top:      subleq ys+1, x, end" in text
    assert "goto top" in text and "halt" in text
    assert "ys: .array 2, 3" in text
