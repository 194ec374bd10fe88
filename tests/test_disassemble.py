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



@pytest.mark.parametrize("commands, memory, expected", [
    ("3,4,6\n2,3,6\n", "0\n-1\n5\n", {"m1": -1, "m2": 6}),  # reads the reserved -1
    ("2,3,7\n4,5,7\n", "7\n20\n0\n-1\n", {"m0": 7, "m1": 13, "m2": 0, "m3": -1}),
    ("2,2,6\n3,4,6\n", "7\n0\n-1\n", {"m0": 0, "m1": 0, "m2": -1}),  # was listed as halt
])
def test_a_csv_program_naming_cells_0_and_1_lists_as_source_that_assembles(
        tmp_path, commands, memory, expected):
    """`asm --csv C M --listing` wrote `subleq m1, m2` (x += 1 with the -1 cell, a common
    CSV idiom) or `subleq m0, m1` without defining m0 or m1, so the listing failed to
    assemble ('undefined name'); the cells are now listed as data and the program computes
    the same."""
    from assembler.csv_format import load_csv
    from vm.machines.subleq.reference import run_reference

    (tmp_path / "c.csv").write_text("a,b,c\n" + commands)
    (tmp_path / "m.csv").write_text("mem\n" + memory)
    program = load_csv(tmp_path / "c.csv", tmp_path / "m.csv")
    again = assemble(disassemble(program), "listing.sq")
    result = run_reference(again)
    assert result.halted and {name: result.memory[symbol.address]
                              for name, symbol in again.symbols.items()} == expected


@pytest.mark.parametrize("source", [
    ".data\nx: 3\nL3: 1\n.code\nsubleq L3, x, A+1\nsubleq L3, x\nA: subleq L3, x\n"
    "subleq x, x\nhalt\n",                                  # a data cell named L3
    ".data\nx: 3\ny: 1\n.code\nsubleq y, x, A+1\nL3: subleq y, x\nA: subleq y, x\n"
    "subleq x, x, L3\nhalt\n",                              # a label L3 elsewhere
])
def test_a_generated_label_never_takes_a_name_the_program_defines(source):
    """A jump to `A+1` gets the generated label L3; where the program defines L3 itself,
    the listing defined it twice and did not assemble ('duplicate definition of L3')."""
    program = assemble(source, "t.sq")
    again = assemble(disassemble(program), "listing.sq")
    assert again.memory == program.memory
    assert [(i.a, i.b, i.c) for i in again.instructions] == \
        [(i.a, i.b, i.c) for i in program.instructions]


def test_a_goto_to_the_next_instruction_gets_a_label():
    """A CSV row `subleq 0, 0` jumping to the next row is a goto whose target had no label:
    the listing failed with a KeyError traceback."""
    from assembler.program import Instruction, Program

    program = Program([Instruction(0, 0, 1), Instruction(0, 0, 2)], [0, -1])
    text = disassemble(program)
    assert "goto L1" in text and "L1:" in text
    assert [(i.a, i.b, i.c) for i in assemble(text, "listing.sq").instructions] == \
        [(0, 0, 1), (0, 0, 2)]


def test_a_program_of_its_eof_instruction_alone_lists_as_source_that_assembles():
    """A CSV pair whose commands are the EOF row alone was listed with an empty .code, which
    the assembler refuses ('empty program')."""
    from assembler.program import Program
    from vm.machines.subleq.reference import run_reference

    program = Program([], [0, -1, 5], bits=4)
    again = assemble(disassemble(program), "listing.sq")
    assert again.memory == program.memory and run_reference(again).memory == program.memory
