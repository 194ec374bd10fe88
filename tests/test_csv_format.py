"""The column-index CSV format: import, validation with located errors, export."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from assembler.csv_format import SETTINGS_FILE, csv_settings, load_csv, save_csv
from assembler.diagnostics import MAX_SOURCE_BYTES, SourceError
from strategies import programs
from vm.common.errors import InputError
from vm.machines.subleq.reference import run_reference


def write_pair(directory: Path, commands: str, memory: str) -> tuple[Path, Path]:
    (directory / "c.csv").write_text(commands)
    (directory / "m.csv").write_text(memory)
    return directory / "c.csv", directory / "m.csv"


def test_imports_absolute_columns_as_memory_and_instruction_indices(tmp_path):
    # s=2, memory columns 2..5 (0, -1, 7, 3), instructions 6..7 (one + EOF)
    cmds, mem = write_pair(tmp_path, "a,b,c\n5,4,7\n2,3,7\n", "mem\n0\n-1\n7\n3\n")
    program = load_csv(cmds, mem, scratch=2)
    assert program.memory == [0, -1, 7, 3]
    assert [(i.a, i.b, i.c) for i in program.instructions] == [(3, 2, 1)]
    assert program.eof_operands == (0, 1) and program.bits == 8
    result = run_reference(program)
    assert result.halted and result.memory[2] == 4


@pytest.mark.parametrize("commands,memory,line,message", [
    ("x,y,z\n2,3,4\n", "mem\n0\n-1\n", 1, "expected the header 'a,b,c'"),
    ("a,b,c\n2,3,9\n", "mem\n0\n-1\n", 2, "c = 9 is not an instruction column"),
    ("a,b,c\n1,3,4\n", "mem\n0\n-1\n", 2, "a = 1 is not a memory column"),
    ("a,b,c\n2,3,4\n2,3,4\n", "mem\n0\n-1\n", 3, "the last row must be the EOF instruction"),
    ("a,b,c\n3,2,4\n", "mem\n0\n-1\n", 2, "the EOF instruction must subtract a 0 cell"),
    ("a,b,c\n2,x,4\n", "mem\n0\n-1\n", 2, "'x' is not an integer"),
    ("a,b,c\n2,3\n", "mem\n0\n-1\n", 2, "expected 3 value(s), got 2"),
    # was an InputError without a caret, naming mem[0] for column 2
    ("a,b,c\n4,2,6\n2,3,6\n", "mem\n0\n-1\n5\n", 2, "b = 2 is a cell the EOF instruction"),
])
def test_bad_csv_is_reported_at_its_line(tmp_path, commands, memory, line, message):
    cmds, mem = write_pair(tmp_path, commands, memory)
    with pytest.raises(SourceError) as caught:
        load_csv(cmds, mem, scratch=2)
    assert caught.value.line == line and message in str(caught.value)


def test_memory_value_out_of_range_for_given_bits(tmp_path):
    cmds, mem = write_pair(tmp_path, "a,b,c\n2,3,5\n", "mem\n0\n-1\n300\n")
    with pytest.raises(SourceError, match="value 300 does not fit in 8-bit words"):
        load_csv(cmds, mem, scratch=2, bits=8)
    assert load_csv(cmds, mem, scratch=2).bits == 10


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(programs())
def test_export_then_import_gives_the_same_program(tmp_path, program):
    cmds, mem = save_csv(program, tmp_path, scratch=3)
    loaded = load_csv(cmds, mem, scratch=3, bits=program.bits)
    assert loaded.memory == program.memory
    assert [(i.a, i.b, i.c) for i in loaded.instructions] == \
        [(i.a, i.b, i.c) for i in program.instructions]
    assert loaded.eof_operands == program.eof_operands


def test_an_oversized_settings_file_is_refused_not_read_whole(tmp_path):
    commands = tmp_path / "commands.csv"
    commands.write_text("")
    with open(tmp_path / SETTINGS_FILE, "wb") as handle:
        handle.truncate(MAX_SOURCE_BYTES + 1)
    with pytest.raises(InputError, match="source larger than"):
        csv_settings(commands)


def test_a_directory_named_like_the_settings_file_is_refused(tmp_path):
    """It was passed over with the note 'no program.json beside commands.csv'."""
    commands = tmp_path / "commands.csv"
    commands.write_text("")
    (tmp_path / SETTINGS_FILE).mkdir()
    with pytest.raises(InputError, match="program.json: it is a directory"):
        csv_settings(commands)


@pytest.mark.parametrize("bits", [1, 65, 1000])
def test_a_settings_file_with_a_word_size_out_of_range_is_named(tmp_path, bits):
    """bits 1000 in program.json was reported as '--bits must be between 2 and 64', an option
    the user never typed."""
    commands = tmp_path / "commands.csv"
    commands.write_text("")
    (tmp_path / SETTINGS_FILE).write_text(
        f'{{"format": "ltvm-csv/1", "scratch": 1, "bits": {bits}}}')
    with pytest.raises(InputError, match=rf"program.json: bits must be between 2 and 64, "
                                         rf"got {bits}"):
        csv_settings(commands)


def test_a_value_no_word_holds_is_named_at_its_line_not_as_bits(tmp_path):
    """Without --bits, a value past 64 bits was refused as '--bits must be between 2 and 64,
    got 101', an option nobody typed; it is a value error at its line."""
    cmds, mem = write_pair(tmp_path, "a,b,c\n2,3,4\n", "mem\n0\n-1\n" + "9" * 30 + "\n")
    with pytest.raises(SourceError) as caught:
        load_csv(cmds, mem)
    message = str(caught.value)
    assert "value " + "9" * 30 + " does not fit in 64-bit words" in message
    assert ":4:" in message and "--bits" not in message


@pytest.mark.parametrize("commands,line,column,message", [
    # a quoted field over two lines shifted every later row's line number up by one
    ('a,b,c\n"4\n",6,9\n6,6,x\n', 4, 5, "'x' is not an integer"),
    # int() took these as 10 and 3
    ("a,b,c\n1_0,6,9\n", 2, 1, "'1_0' is not an integer"),
    ("a,b,c\n4,\u0663,9\n", 2, 3, "'\u0663' is not an integer"),
    ("a,b,c\n4,,9\n", 2, 3, "'' is not an integer"),
    ("a,b,c\n4,  x ,9\n", 2, 5, "'x' is not an integer"),
])
def test_fields_are_ascii_integers_located_at_their_own_line_and_column(
        tmp_path, commands, line, column, message):
    cmds, mem = write_pair(tmp_path, commands, "mem\n0\n-1\n")
    with pytest.raises(SourceError) as caught:
        load_csv(cmds, mem, scratch=2)
    assert (caught.value.line, caught.value.column) == (line, column)
    assert message in str(caught.value)


def test_a_pair_given_in_the_wrong_order_says_which_comes_first(tmp_path):
    cmds, mem = write_pair(tmp_path, "a,b,c\n2,3,4\n", "mem\n0\n-1\n")
    with pytest.raises(SourceError, match="found 'a,b,c'; the pair is given as --csv CMDS MEM, "
                                          "the commands first"):
        load_csv(mem, cmds)


def test_rows_past_the_machine_columns_are_located_at_the_first_that_does_not_fit(
        tmp_path, monkeypatch):
    """2,000,000 memory rows were refused by the geometry as '2000003 columns exceed the
    limit of 65536', naming no file (the limit lowered here to keep the files small)."""
    import assembler.csv_format

    monkeypatch.setattr(assembler.csv_format, "MAX_COLUMNS", 10)
    cmds, mem = write_pair(tmp_path, "a,b,c\n2,3,9\n", "mem\n0\n-1\n" + "0\n" * 5)
    assert len(load_csv(cmds, mem, scratch=2).memory) == 7  # 2 + 7 + the EOF column: 10
    cmds, mem = write_pair(tmp_path, "a,b,c\n2,3,10\n", "mem\n0\n-1\n" + "0\n" * 6)
    with pytest.raises(SourceError, match="more memory cells than the machine's 10 columns "
                                          "hold beside 2 scratch columns") as caught:
        load_csv(cmds, mem, scratch=2)
    assert (caught.value.file, caught.value.line) == (str(mem), 9)
    cmds, mem = write_pair(tmp_path, "a,b,c\n2,2,7\n2,2,7\n2,2,7\n2,3,10\n",
                           "mem\n0\n-1\n0\n0\n0\n")
    with pytest.raises(SourceError, match="more instructions than the machine's 10 columns "
                                          "hold beside 2 scratch columns and 5 memory") as caught:
        load_csv(cmds, mem, scratch=2)
    assert (caught.value.file, caught.value.line) == (str(cmds), 5)


@pytest.mark.parametrize("scratch", [0, -3, 2.5, "2", True, None, 65537])
def test_a_scratch_width_that_is_no_column_count_is_refused_on_export_and_import(tmp_path,
                                                                                scratch):
    """save_csv wrote columns '4.5,4.5,6.5' for 2.5 and '-1,-1,1' for -3, files no import
    reads back; load_csv('2') failed with a TypeError."""
    program = load_csv(*write_pair(tmp_path, "a,b,c\n2,3,4\n", "mem\n0\n-1\n"), scratch=2)
    with pytest.raises(InputError, match="--scratch must be a whole number from 1 to 65536"):
        save_csv(program, tmp_path / "out", scratch)
    assert not (tmp_path / "out").exists()
    with pytest.raises(InputError, match="--scratch must be a whole number from 1 to 65536"):
        load_csv(tmp_path / "c.csv", tmp_path / "m.csv", scratch=scratch)


@pytest.mark.parametrize("which", ["commands", "memory"])
def test_a_file_of_more_rows_than_the_machine_columns_is_refused_where_reading_stops(
        tmp_path, which):
    """2 million rows (4 MiB) were all read and parsed, 8 s and 860 MB, before the column
    check refused them; reading now stops at the 65,537th row."""
    commands, memory = "a,b,c\n2,3,4\n", "mem\n0\n-1\n"
    if which == "commands":
        commands = "a,b,c\n" + "2,2,3\n" * 200_000
    else:
        memory = "mem\n" + "0\n" * 200_000
    cmds, mem = write_pair(tmp_path, commands, memory)
    with pytest.raises(SourceError) as caught:
        load_csv(cmds, mem)
    assert caught.value.message == ("more than 65536 rows, the machine's columns for scratch, "
                                    "memory and instructions together")
    assert (caught.value.file, caught.value.line) == (str(cmds if which == "commands" else mem),
                                                      1 + 65_537)


def test_blank_lines_do_not_count_as_rows(tmp_path):
    cmds, mem = write_pair(tmp_path, "a,b,c\n" + "\n" * 70_000 + " , ,\n2,3,4\n",
                           "mem\n0\n-1\n")
    program = load_csv(cmds, mem)
    assert program.memory == [0, -1] and program.instructions == []


def test_the_header_of_a_long_file_is_checked_before_its_length(tmp_path):
    cmds, mem = write_pair(tmp_path, "a,b,c\n2,3,4\n", "mem\n" + "0\n" * 70_000)
    with pytest.raises(SourceError, match="the pair is given as --csv CMDS MEM"):
        load_csv(mem, cmds)


def test_a_settings_key_written_twice_is_refused(tmp_path):
    """json keeps the last value of a repeated key: '"bits": 8, "bits": 16' imported a
    program with 16-bit words in silence."""
    cmds, _ = write_pair(tmp_path, "a,b,c\n2,3,4\n", "mem\n0\n-1\n")
    (tmp_path / SETTINGS_FILE).write_text(
        '{"format": "ltvm-csv/1", "scratch": 2, "bits": 8, "bits": 16}')
    with pytest.raises(InputError) as caught:
        csv_settings(cmds)
    assert str(caught.value) == f"{tmp_path / SETTINGS_FILE}: 'bits' is given twice"


@pytest.mark.parametrize("commands, column, caret", [
    ("a,b,c\n2,33,4\n", 3, "      ^~"),
    ("a,b,c\n1,3,4\n", 1, "    ^"),
    ("a,b,c\n2,3,19\n", 5, "        ^~"),
    # a field written with blanks around it: the caret stood under the blank before it
    ("a,b,c\n2, 6 ,99\n", 4, "       ^"),
    ("a,b,c\n2,3,  +19\n", 7, "          ^~~"),
])
def test_a_column_index_out_of_range_is_shown_under_its_own_field(tmp_path, commands, column,
                                                                  caret):
    """The caret of 'b = 33 is not a memory column' stood under the row's first field."""
    cmds, mem = write_pair(tmp_path, commands, "mem\n0\n-1\n")
    with pytest.raises(SourceError) as caught:
        load_csv(cmds, mem, scratch=2)
    assert caught.value.column == column
    assert str(caught.value).splitlines()[2] == caret


def test_a_memory_value_no_word_holds_is_shown_under_the_value_past_its_blanks(tmp_path):
    cmds, mem = write_pair(tmp_path, "a,b,c\n2,3,4\n", "mem\n0\n  -99999999999999999999\n")
    with pytest.raises(SourceError) as caught:
        load_csv(cmds, mem, scratch=2)
    assert (caught.value.line, caught.value.column) == (3, 3)
    assert str(caught.value).splitlines()[2] == "      ^" + "~" * 20


@pytest.mark.parametrize("bits, message", [("8", "bits must be an integer, got '8'"),
                                           (8.5, "bits must be an integer, got 8.5"),
                                           (10 ** 5000, "--bits must be between 2 and 64, got "
                                                        "about 10^5000")],
                         ids=["str", "float", "10**5000"])  # no str() past 4,300 digits
def test_a_word_size_that_is_no_bit_count_is_named(tmp_path, bits, message):
    """'8' and 8.5 failed with TypeErrors, 10**5000 with a ValueError from str()."""
    cmds, mem = write_pair(tmp_path, "a,b,c\n2,3,4\n", "mem\n0\n-1\n")
    with pytest.raises(InputError) as caught:
        load_csv(cmds, mem, scratch=2, bits=bits)
    assert str(caught.value) == message


def test_settings_that_are_not_json_are_shown_at_line_and_column(tmp_path):
    """A settings file with a stray comma said 'cannot read program.json: Expecting
    property name ...: line 2 column 15 (char 40)', as if the file could not be read."""
    cmds, _ = write_pair(tmp_path, "a,b,c\n2,3,4\n", "mem\n0\n-1\n")
    (tmp_path / SETTINGS_FILE).write_text('{"format": "ltvm-csv/1",\n "scratch": 2,,}')
    with pytest.raises(SourceError) as caught:
        csv_settings(cmds)
    assert str(caught.value).splitlines() == [
        f"{tmp_path / SETTINGS_FILE}:2:15: error: not JSON: Expecting property name "
        "enclosed in double quotes", '     "scratch": 2,,}', " " * 18 + "^"]


@pytest.mark.parametrize("directory", [None, 5, "/dev/full", ""])
def test_save_csv_refuses_a_directory_it_cannot_write_with_an_input_error(tmp_path, directory):
    """save_csv(program, None) failed with a TypeError and save_csv(program, '/dev/full')
    with a FileExistsError from mkdir."""
    program = load_csv(*write_pair(tmp_path, "a,b,c\n2,3,4\n", "mem\n0\n-1\n"), scratch=2)
    with pytest.raises(InputError, match="output directory|cannot write /dev/full"):
        save_csv(program, directory, 2)


def test_save_csv_writes_all_three_files_or_none(tmp_path, monkeypatch):
    """A write that failed after commands.csv left it beside the memory file of the program
    exported there before."""
    program = load_csv(*write_pair(tmp_path, "a,b,c\n2,3,4\n", "mem\n0\n-1\n"), scratch=2)
    out = tmp_path / "out"
    save_csv(program, out, 2)
    before = {name: (out / name).read_text() for name in ("commands.csv", "memory.csv")}
    original = Path.write_text

    def full(self, text, *args, **kwargs):
        if self.name == "memory.csv":
            raise OSError(28, "No space left on device")
        return original(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(InputError, match="No space left on device"):
        save_csv(program, out, 3)
    assert {name: (out / name).read_text() for name in before} == before
    assert sorted(p.name for p in out.iterdir()) == ["commands.csv", "memory.csv", "program.json"]
