"""The .sq assembler: accepted syntax, resolved addresses and located errors."""

from __future__ import annotations

import textwrap

import pytest

from assembler.diagnostics import SourceError
from assembler.program import MINUS_ONE_CELL, ZERO_CELL
from assembler.subleq import assemble, assemble_file
from vm.common.errors import InputError


def asm(source: str, bits: int | None = None):
    return assemble(textwrap.dedent(source), "t.sq", bits)


def test_data_section_lays_out_cells_arrays_and_zero_blocks_after_reserved_cells():
    program = asm("""
        .data
        x: 7
        xs: .array 3, -1, 4
        buf: .zero 2
        .code
        halt
        """)
    assert program.memory == [0, -1, 7, 3, -1, 4, 0, 0]
    assert program.symbols["x"].address == 2
    assert (program.symbols["xs"].address, program.symbols["xs"].size) == (3, 3)
    assert (program.symbols["buf"].address, program.symbols["buf"].size) == (6, 2)


def test_operands_resolve_to_addresses_and_labels_with_optional_c():
    program = asm("""
        .data
        xs: .array 1, 2, 3
        y: 0
        .code
        top:  subleq xs+2, y, top
              SUBLEQ xs, y        ; c omitted: next instruction
              Goto top
              HALT
        """)
    first, second, goto, halt = program.instructions
    assert (first.a, first.b, first.c) == (4, 5, 0)
    assert (second.a, second.b, second.c) == (2, 5, 2)
    assert (goto.a, goto.b, goto.c) == (ZERO_CELL, ZERO_CELL, 0)
    assert (halt.a, halt.b, halt.c) == (ZERO_CELL, ZERO_CELL, program.eof)
    assert program.labels == {"top": 0}


def test_literals_in_decimal_hex_binary_and_negative_with_constants():
    program = asm("""
        .const LEN = 2
        .data
        a: 0x1F
        b: -0b101
        c: 007
        d: LEN + 3 - 1
        e: -(LEN)
        buf: .zero LEN
        .code
        halt
        """)
    assert program.memory[2:] == [31, -5, 7, 4, -2, 0, 0]


def test_comments_blank_lines_and_sections_in_any_order():
    program = asm("""
        # a comment
        .code      ; code first

        start: subleq x, x   # trailing comment
        .data
        x: 5
        """)
    assert program.instructions[0].a == program.symbols["x"].address


def test_word_size_is_derived_from_literals_declared_or_overridden():
    assert asm(".data\nx: 5\n.code\nhalt\n").bits == 8
    assert asm(".data\nx: 1000\n.code\nhalt\n").bits == 11
    assert asm(".bits 16\n.data\nx: 5\n.code\nhalt\n").bits == 16
    assert asm(".data\nx: 5\n.code\nhalt\n", bits=4).bits == 4


def test_instruction_keeps_its_source_position_and_text():
    program = asm(".data\nx: 1\n.code\n  loop: subleq x, x, loop\n")
    instruction = program.instructions[0]
    assert (instruction.pos.line, instruction.pos.column) == (4, 9)
    assert instruction.text == "subleq x, x, loop"


def test_reserved_cells_hold_zero_and_minus_one_for_eof():
    program = asm(".code\nhalt\n")
    assert program.memory[ZERO_CELL] == 0 and program.memory[MINUS_ONE_CELL] == -1
    assert program.eof_operands == (ZERO_CELL, MINUS_ONE_CELL)


BAD_INPUTS = [
    ("unknown mnemonic", ".code\n    sub x, y\n", 2, 5, "unknown mnemonic 'sub'"),
    ("undefined name", ".data\nx: 1\n.code\nsubleq x, y\n", 4, 11, "undefined name 'y'"),
    ("undefined label", ".data\nx: 1\n.code\ngoto nowhere\n", 4, 6, "undefined name 'nowhere'"),
    ("duplicate label", ".data\nx: 1\n.code\nl: halt\nl: halt\n", 5, 1,
     "duplicate definition of 'l' (first defined at t.sq:4:1)"),
    ("duplicate data name", ".data\nx: 1\nx: 2\n.code\nhalt\n", 3, 1,
     "duplicate definition of 'x'"),
    ("data name as jump target", ".data\nx: 1\n.code\nsubleq x, x, x\n", 4, 14,
     "a data name cannot be a jump target"),
    ("label as data operand", ".data\nx: 1\n.code\nl: subleq l, x\n", 4, 11,
     "a label cannot be a data operand"),
    ("value out of range", ".bits 8\n.data\nx: 200\n.code\nhalt\n", 3, 4,
     "value 200 does not fit in 8-bit words (range -128..127)"),
    ("value past 64 bits", ".data\nz: 0\nx: 100000000000000000000000\n.code\nhalt\n", 3, 4,
     "value 100000000000000000000000 does not fit in 64-bit words"),
    ("too few operands", ".data\nx: 1\n.code\nsubleq x\n", 4, 1,
     "'subleq' takes 2 or 3 operands, got 1"),
    ("too many operands", ".data\nx: 1\n.code\nl: subleq x, x, l, l\n", 4, 4,
     "'subleq' takes 2 or 3 operands, got 4"),
    ("operand to halt", ".data\nx: 1\n.code\nhalt x\n", 4, 1, "'halt' takes 0 operands, got 1"),
    ("empty program", ".data\nx: 1\n", 1, 1, "empty program"),
    ("offset outside array", ".data\nxs: .array 1, 2\n.code\nsubleq xs+2, xs\n", 4, 8,
     "offset 2 is outside 'xs' (size 2)"),
    ("number as data operand", ".data\nx: 1\n.code\nsubleq 3, x\n", 4, 8,
     "a data operand must name a data cell, not a number"),
    ("unknown directive", ".data\nx: .word 3\n.code\nhalt\n", 2, 4, "unknown directive '.word'"),
    ("bad character", ".data\nx: 1\n.code\nsubleq x, x @\n", 4, 13, "unexpected character '@'"),
    ("missing comma", ".data\nx: 1\n.code\nsubleq x x\n", 4, 10, "unexpected 'x'"),
    ("zero-size block", ".data\nb: .zero 0\n.code\nhalt\n", 2, 10, "'.zero' needs a positive size"),
    ("bits out of range", ".bits 99\n.code\nhalt\n", 1, 7, "word size must be between 2 and 64"),
    ("label in data", ".data\nx: 1\n.code\nhalt\n.data\ny: x\n", 6, 4,
     "expected a number, got a data address"),
    ("reserved EOF", ".data\nEOF: 1\n.code\nhalt\n", 2, 1, "'EOF' is reserved"),
    ("jump past end", ".data\nx: 1\n.code\nl: goto l+5\n", 4, 9, "jump target is outside the program"),
    # was "undefined name 'K'", for a name the file defines
    ("constant used above it", ".data\nx: K\n.const K = 3\n.code\nhalt\n", 2, 4,
     "'K' is defined only below, at t.sq:3:8"),
    # said "'x' is defined only below, at t.sq:2:1", the start of the very same line
    ("cell used in its own value", ".data\nx: .array 1, x\n.code\nhalt\n", 2, 14,
     "'x' is used in its own definition"),
    ("constant used in its own value", ".const K = K + 1\n.code\nhalt\n", 1, 12,
     "'K' is used in its own definition"),
    ("header directive in code", ".code\nhalt\n.const K = 3\n", 3, 1,
     "unexpected '.const'; expected '.code', '.data', a name, end of file"),
]


@pytest.mark.parametrize("source,line,column,message",
                         [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_is_reported_at_its_line_and_column_with_a_caret(source, line, column,
                                                                   message):
    with pytest.raises(SourceError) as caught:
        assemble(source, "t.sq")
    error = caught.value
    assert (error.line, error.column) == (line, column)
    first, shown_line, caret = str(error).splitlines()
    assert first.startswith(f"t.sq:{line}:{column}: error: ")
    assert message in first
    assert shown_line.strip() == source.splitlines()[line - 1].strip() or line == 1
    assert caret.index("^") - 4 == column - 1
    assert error.exit_code == 2


def test_enough_distinct_bad_inputs_are_covered():
    assert len({case[4] for case in BAD_INPUTS}) >= 15


def test_bits_override_rechecks_literals_at_their_position():
    with pytest.raises(SourceError) as caught:
        assemble(".data\nx: 100\n.code\nhalt\n", "t.sq", bits=7)
    assert (caught.value.line, caught.value.column) == (2, 4)
    with pytest.raises(InputError, match="--bits must be between 2 and 64"):
        assemble(".code\nhalt\n", "t.sq", bits=65)


def test_instruction_text_comes_from_its_own_line_after_a_form_feed_in_a_comment():
    program = assemble(".data\nx: 5\n.code\nsubleq x, x ; \x0c page\u2028break\nhalt\n", "t.sq")
    assert [i.text for i in program.instructions] == ["subleq x, x", "halt"]


def test_the_data_cell_past_the_column_limit_is_the_one_refused(monkeypatch):
    """Single cells were not counted: a file of them was refused at its first instruction."""
    import assembler.subleq as subleq

    monkeypatch.setattr(subleq, "MAX_COLUMNS", 8)
    with pytest.raises(SourceError) as caught:
        asm(".data\n" + "".join(f"x{i}: {i}\n" for i in range(10)) + ".code\nhalt\n")
    assert (caught.value.line, caught.value.column) == (6, 1)  # x4, with scratch and EOF 9
    assert "more than 8 columns" in str(caught.value)


@pytest.mark.parametrize("call", [lambda: assemble(None), lambda: assemble(b".code\nhalt\n"),
                                  lambda: assemble(".code\nhalt\n", bits="8"),
                                  lambda: assemble(".code\nhalt\n", bits=True),
                                  lambda: assemble_file(None)])
def test_the_python_entry_points_refuse_arguments_of_another_type(call):
    """assemble(None) failed on `.split`, bytes and bits="8" in comparisons deep inside,
    assemble_file(None) in pathlib."""
    with pytest.raises(InputError, match="the source must be a str|bits must be an integer|"
                                         "a source file's path must be"):
        call()


def _labelled_program(instructions: int) -> str:
    """`instructions` labelled, commented three-operand instructions over four data cells,
    the last a halt: 10 tokens an instruction line."""
    lines = [".bits 16", ".data", "a: 1", "b: 2", "t: 0", "z: 0", ".code"]
    lines += [f"L{i}: subleq a, t, L{i + 1} ; why" for i in range(instructions - 1)]
    return "\n".join(lines + [f"L{instructions - 1}: subleq z, z, EOF ; stop"]) + "\n"


def test_a_program_filling_the_largest_machine_is_parsed_not_refused(monkeypatch):
    """Every column of the largest machine (65,536: a scratch column, 6 cells, 65,528
    instructions and EOF) a labelled, commented instruction: 655,000 tokens, which the
    assemblers' 100,000-token limit refused though the machine holds it. The parse itself
    (about 15 s) is stood in for; the same program, shorter, assembles."""
    import assembler.subleq
    from vm.common.geometry import MAX_COLUMNS

    small = assemble(_labelled_program(100), "small.sq")
    assert (len(small.memory), len(small.instructions)) == (6, 100)

    class Parsed(Exception):
        """The token count let the source through to the parser."""

    def parse_located(*arguments, **options):
        raise Parsed

    monkeypatch.setattr(assembler.subleq, "parse_located", parse_located)
    with pytest.raises(Parsed):
        assemble(_labelled_program(MAX_COLUMNS - 1 - 6 - 1), "full.sq")
    with pytest.raises(SourceError, match="more than 655,360 tokens"):
        assemble(_labelled_program(MAX_COLUMNS - 1 - 6 - 1) * 2, "twice.sq")
