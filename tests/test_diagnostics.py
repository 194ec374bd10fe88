"""Reading source files (`assembler.diagnostics.read_source`): text as Path.read_text gives it,
and a bounded read, so a file over MAX_SOURCE_BYTES, /dev/zero or an endless pipe is refused
with exit 2 by every command that reads a program, instead of being read until memory runs
out."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

import assembler.diagnostics
import vm.common.files
from assembler.dec import load_image
from assembler.diagnostics import (MAX_SOURCE_BYTES, SHOWN_LINE, SourceError, _columns,
                                  read_source, shown_in_source)
from assembler.subleq import assemble as assemble_sq
from assembler.vsq import assemble as assemble_vsq
from vm.cli import main
from vm.common.errors import InputError, PlacedInputError

ROOT = Path(__file__).resolve().parents[1]


def test_text_is_what_read_text_gives(tmp_path):
    """Universal newlines and the BOM handling of the encoding, as before the read was
    bounded (line numbers in errors depend on the first); by default a leading BOM, which
    editors hide, is not part of the program."""
    path = tmp_path / "crlf.sq"
    path.write_bytes(b"\xef\xbb\xbfa\r\nb\rc\n")
    assert read_source(path) == path.read_text(encoding="utf-8-sig") == "a\nb\nc\n"
    assert read_source(path, encoding="utf-8") == "\ufeffa\nb\nc\n"


@pytest.mark.parametrize("source", ["subleq/factorial.sq", "fleq/calculator.fleq",
                                    "vsubleq/hello.vsq", "vsubleq/hello.dec"])
def test_a_source_saved_with_a_byte_order_mark_assembles_as_without(source, tmp_path, capsys):
    """Editors that save UTF-8 with a BOM hide it; it was refused as an unexpected character."""
    original = Path(__file__).resolve().parents[1] / "programs" / source
    marked = tmp_path / original.name
    marked.write_bytes(b"\xef\xbb\xbf" + original.read_bytes())
    outputs = []
    for path in (original, marked):
        assert main(["asm", str(path)]) == 0
        outputs.append(capsys.readouterr().out.replace(str(path), "PROGRAM"))
    assert outputs[0] == outputs[1]


def test_a_file_at_the_cap_is_read_and_one_byte_more_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(assembler.diagnostics, "MAX_SOURCE_BYTES", 1 << 20)
    path = tmp_path / "prog.sq"
    path.write_text("x" * (1 << 20))
    assert read_source(path) == "x" * (1 << 20)
    path.write_text("x" * ((1 << 20) + 1))
    with pytest.raises(InputError, match=r"prog\.sq: source larger than 1 MiB"):
        read_source(path)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_that_never_ends_is_refused(monkeypatch):
    monkeypatch.setattr(assembler.diagnostics, "MAX_SOURCE_BYTES", 1 << 10)
    with pytest.raises(InputError, match="/dev/zero: source larger than"):
        read_source("/dev/zero")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_with_no_writer_says_what_it_waits_for(monkeypatch, tmp_path, capsys):
    """open() blocked in silence until a writer came, forever when none did (`ltvm run
    PIPE`, the REPL's `load PIPE`); now a line on stderr says so, and a writer that comes
    later is still read."""
    monkeypatch.setattr(vm.common.files, "PIPE_NOTICE_SECONDS", 0.1)
    pipe = tmp_path / "pipe.sq"
    os.mkfifo(pipe)

    def write_late() -> None:
        time.sleep(0.5)
        pipe.write_text("halt\n")
    writer = threading.Thread(target=write_late)
    writer.start()
    assert read_source(pipe) == "halt\n"
    writer.join()
    assert capsys.readouterr().err == (f"ltvm: waiting for a program to write to {pipe} "
                                       f"(a pipe; Ctrl-C stops)\n")


def test_a_pipe_with_a_writer_is_read_without_a_notice(capsys):
    read, write = os.pipe()
    os.write(write, b"halt\n")
    os.close(write)
    assert read_source(f"/dev/fd/{read}") == "halt\n"
    os.close(read)
    assert capsys.readouterr().err == ""


def _oversized(directory: Path, name: str) -> Path:
    """A sparse file one byte over the cap (no disk blocks, read in a few milliseconds)."""
    path = directory / name
    with open(path, "wb") as handle:
        handle.truncate(MAX_SOURCE_BYTES + 1)
    return path


@pytest.mark.parametrize("command", ["asm", "run", "compare", "inspect"])
@pytest.mark.parametrize("name", ["prog.sq", "prog.fleq", "prog.vsq", "prog.dec"])
def test_every_command_refuses_an_oversized_source(command, name, tmp_path, capsys):
    path = _oversized(tmp_path, name)
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"ltvm: error: {path}: source larger than 4 MiB (the most a source file " \
                  f"may hold)\n"


def test_csv_import_refuses_an_oversized_file(tmp_path, capsys):
    shutil.copytree(ROOT / "programs" / "csv" / "countdown", tmp_path / "countdown")
    commands = tmp_path / "countdown" / "commands.csv"
    commands.unlink()
    _oversized(commands.parent, commands.name)
    memory = commands.with_name("memory.csv")
    assert main(["run", "--csv", str(commands), str(memory)]) == 2
    assert f"{commands}: source larger than 4 MiB" in capsys.readouterr().err


@pytest.mark.parametrize("column", [1, 5_000, 150_000, 299_990])
def test_an_error_on_a_huge_line_shows_a_window_with_the_caret_under_its_column(column):
    """A 300 KB line used to be echoed whole (half a megabyte of stderr)."""
    line = "".join(chr(ord("a") + i % 26) for i in range(300_000))
    error = SourceError("bad " + "x" * 10_000, "big.sq", f"ok\n{line}\n", 2, column, width=3)
    _, shown, caret = str(error).split("\n")
    assert len(str(error)) < 1_000
    assert shown[caret.index("^")] == line[column - 1]
    assert caret.strip() == "^~~"


@pytest.mark.parametrize("column", [1, 150, 400, 599])
def test_a_long_line_of_wide_characters_is_cut_to_as_many_terminal_columns(column):
    """The cut counted characters: 160 CJK characters took 320 terminal columns."""
    line = "漢字かな" * 150
    error = SourceError("bad", "wide.sq", f"{line}\n", 1, column)
    _, shown, caret = str(error).split("\n")
    assert _columns(shown.strip(" .")) <= SHOWN_LINE and shown.strip(" .") in line
    width, under = 0, None
    for character in shown:
        if width == caret.index("^"):
            under = character
        width += _columns(character)
    assert under == line[column - 1]


def test_bytes_that_are_not_utf8_are_located(tmp_path):
    """Such a file used to be only 'not a text file', with no line or column."""
    path = tmp_path / "bad.sq"
    path.write_bytes(b".data\nx: 1\n.code\nsubleq x, x ; caf\xc3\xa9\nhalt \xff\xfe\n")
    with pytest.raises(SourceError) as raised:
        read_source(path)
    header, shown, caret = str(raised.value).split("\n")
    assert header == f"{path}:5:6: error: not UTF-8 text: byte 0xff cannot be decoded"
    assert shown[caret.index("^"):] == "\ufffd\ufffd"


def test_tabs_and_control_characters_keep_the_caret_under_its_column():
    error = SourceError("unknown", "t.sq", "\tfoo\x00 bar\n", 1, 7, width=3)
    _, shown, caret = str(error).split("\n")
    assert shown == "     foo? bar" and shown[caret.index("^"):][:3] == "bar"


def test_a_placed_error_is_shown_in_its_source_only_where_the_file_can_be_read(tmp_path):
    source = tmp_path / "p.fleq"
    source.write_text(".data\nn: 3\n")
    shown = shown_in_source(PlacedInputError("too big", str(source), 2, 4))
    assert str(shown).splitlines() == [f"{source}:2:4: error: too big", "    n: 3", "       ^"]
    missing = PlacedInputError("too big", str(tmp_path / "gone.fleq"), 2, 4)
    other = InputError("plain")
    assert shown_in_source(missing) is missing and shown_in_source(other) is other


def test_a_quoted_control_character_is_shown_as_an_escape(tmp_path, capsys):
    """An ESC in a source reached the terminal inside the message and turned it red."""
    source = tmp_path / "esc.sq"
    source.write_text(".data\nx: 1\n.code\nsubleq x, x \x1b[31m\n")
    assert main(["asm", str(source)]) == 2
    err = capsys.readouterr().err
    assert "unexpected character '\\x1b'" in err and "\x1b" not in err


@pytest.mark.parametrize("separator", ["\f", "\v", "\u2028", "\x85"])
def test_a_page_break_in_a_comment_does_not_shift_the_line_an_error_shows(separator):
    """Lark counts lines at '\\n' alone; the shown line came from str.splitlines(), which
    also splits at a form feed or U+2028, so an error after one showed another line."""
    from vm.isa import FLEQ

    source = f".data\nx: 1 ; a{separator}b\n.code\nx = add(x, z)\nhalt\n"
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(source, "p.fleq")
    assert str(caught.value).splitlines()[1:] == ["    x = add(x, z)", "               ^"]



def _assemble_text(suffix: str, text: str, file: str) -> object:
    """The program of `text` through the Python text API of the dialect of `suffix`."""
    from vm.isa import FLEQ

    assemble = {".sq": assemble_sq, ".fleq": FLEQ.assemble_text, ".vsq": assemble_vsq,
                ".dec": load_image}[suffix]
    return assemble(text, file)


@pytest.mark.parametrize("source, bad_line, bad_column", [
    ("subleq/factorial.sq", "    subleq n, $, 7", 15),
    ("fleq/calculator.fleq", "x = add(x, @)", 12),
    ("vsubleq/hello.vsq", ".word 1, $", 10),
    ("vsubleq/hello.dec", "1 2 x3", 5)])
@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_old_mac_and_windows_line_ends_read_alike_from_a_string_and_a_file(
        source, bad_line, bad_column, newline, tmp_path):
    """A lone '\r' made a .sq or .fleq source one line, a comment to its end, when assembled
    from a string ("empty program"), although the same bytes in a file assembled."""
    text = (ROOT / "programs" / source).read_text()
    suffix = Path(source).suffix
    assert (_assemble_text(suffix, text.replace("\n", newline), "p") ==
            _assemble_text(suffix, text, "p"))
    broken = text + bad_line + "\n"
    path = tmp_path / f"p{suffix}"
    path.write_bytes(broken.replace("\n", newline).encode())
    errors = []
    for given in (broken.replace("\n", newline), read_source(path)):
        with pytest.raises(SourceError) as caught:
            _assemble_text(suffix, given, "p")
        errors.append(str(caught.value))
    assert errors[0] == errors[1]
    assert errors[0].startswith(f"p:{text.count(chr(10)) + 1}:{bad_column}: error:")


@pytest.mark.parametrize("source", ["subleq/factorial.sq", "fleq/calculator.fleq",
                                    "vsubleq/hello.vsq", "vsubleq/hello.dec"])
def test_a_byte_order_mark_is_dropped_from_a_string_as_from_a_file(source, tmp_path):
    """A string that began with a BOM was refused ("unexpected character '\ufeff'", a caret
    under it), where the same bytes saved in a file assembled."""
    text = (ROOT / "programs" / source).read_text()
    suffix = Path(source).suffix
    path = tmp_path / f"p{suffix}"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert (_assemble_text(suffix, "\ufeff" + text, "p") == _assemble_text(suffix, text, "p")
            == _assemble_text(suffix, read_source(path), "p"))


@pytest.mark.parametrize("assemble, source", [(assemble_sq, ".data\nx: 1.5\n.code\nhalt\n"),
                                              (assemble_vsq, ".word 1, 2.25\n")])
def test_a_fraction_in_an_integer_dialect_is_no_unknown_directive(assemble, source):
    """`x: 1.5` said "unknown directive '.5' (expected .data, .code, ...)"."""
    with pytest.raises(SourceError) as caught:
        assemble(source, "t")
    assert caught.value.message == "unexpected character '.': numbers here are integers"
    assert str(caught.value).splitlines()[2].index("^") - 4 == caught.value.column - 1


RUN_OF_ZEROS = "0," * 600_000 + "0"
"""1.2 MB of one-character tokens: lark took 30 s and 640 MB to parse it."""


FEW_SECONDS = "100,000 tokens (names, numbers, signs, comments, line ends), the most an " \
    "assembly parses in a few seconds"
FULL_MACHINE = "655,360 tokens (names, numbers, signs, comments, line ends), 10 for each of " \
    "the largest machine's 65,536 columns"


@pytest.mark.parametrize("name, before, header_tokens, limit, message", [
    ("big.sq", ".data\nx: .array ", 5, 655_360, FULL_MACHINE),  # .data, newline, x, ':', .array
    ("big.fleq", ".data\nv: .vector [", 6, 100_000, FEW_SECONDS),  # ..., v, ':', .vector, '['
    ("big.vsq", "\n.word ", 2, 100_000, FEW_SECONDS),  # newline, .word
])
def test_a_source_of_too_many_tokens_is_refused_at_the_first_one_past_the_limit(
        name, before, header_tokens, limit, message, tmp_path, capsys):
    """Each character of the run is one token, so the first past the limit sits on line 2
    at the run's start plus the tokens left after the header."""
    path = tmp_path / name
    path.write_text(before + RUN_OF_ZEROS + "\n")
    started = time.monotonic()
    assert main(["asm", str(path)]) == 2
    assert time.monotonic() - started < 10
    column = len(before.split("\n")[1]) + 1 + (limit - header_tokens)
    first = capsys.readouterr().err.splitlines()[0]
    assert first == f"{path}:2:{column}: error: more than {message}"


def test_the_token_limit_counts_line_ends_and_a_comment_as_one(monkeypatch):
    monkeypatch.setattr(assembler.diagnostics, "MAX_SOURCE_TOKENS", 8)
    assemble_vsq("a: .word 1, ? ; a long comment\n")  # a : .word 1 , ? comment line-end
    with pytest.raises(SourceError) as caught:
        assemble_vsq("a: .word 1, ?, 2 ; a long comment\n")
    assert (caught.value.line, caught.value.column) == (1, 18)  # the comment, ninth
    with pytest.raises(SourceError) as caught:
        assemble_vsq("\n" * 8 + ".word 1\n")
    assert (caught.value.line, caught.value.column) == (9, 1)


def test_the_largest_standard_subleq_image_fits_in_the_token_limit():
    """32,768 words are the most a .vsq image holds; written as one .word they are 65,537
    tokens, under the limit, and assemble."""
    words = assemble_vsq(".word " + ", ".join(["1"] * 32_768) + "\n").words
    assert words == [1] * 32_768


def test_the_caret_counts_a_wide_character_before_it_as_two_columns():
    """A comment of CJK characters moved the caret of an error after it left by one column
    for each: 'x: .array ; 漢字漢字 comment' put it under the 'm' of 'comment'."""
    with pytest.raises(SourceError) as caught:
        assemble_sq(".data\nx: .array ; \u6f22\u5b57\u6f22\u5b57 comment\n.code\nhalt\n", "w.sq")
    _, shown, caret = str(caught.value).split("\n")
    assert caught.value.column == 25  # characters: 12, 4 wide, 8
    assert caret == " " * 4 + " " * (12 + 2 * 4 + 8) + "^"


def test_a_caret_under_wide_characters_spans_both_columns_of_each():
    with pytest.raises(SourceError) as caught:
        assemble_sq(".code\nhalt \u6f22\u5b57 $\n", "w.sq")
    assert str(caught.value).split("\n")[2] == " " * 4 + " " * 5 + "^~~~"


@pytest.mark.parametrize("line, caret", [
    ("subleq x, y$z", "^"), ("subleq x, \x00x", "^"), ("subleq x, \u6f22)", "^~"),
    ("subleq x, \u6f22\u5b57\u00e9x", "^~~~~"),
])
def test_an_unexpected_character_is_marked_without_the_text_after_it(line, caret):
    """The caret ran to the next blank: under '$z' of 'y$z' and '漢)' of '漢)', though
    'z' and ')' read well."""
    with pytest.raises(SourceError) as caught:
        assemble_sq(f".data\nx: 1\ny: 1\n.code\n{line}\n", "c.sq")
    assert str(caught.value).split("\n")[2] == " " * (4 + 10 + (1 if "$" in line else 0)) + caret


def test_a_source_of_comment_lines_past_the_token_limit_says_comments_count(tmp_path, capsys):
    path = tmp_path / "notes.sq"
    path.write_text("; a note\n" * 400_000 + ".code\nhalt\n")
    assert main(["asm", str(path)]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith(f"{path}:327681:1: error: more than 655,360 tokens")  # 2 a line
    assert "comments" in first


def test_parsing_reports_each_line_end_and_builds_the_same_tree():
    """`parse_located` tells `progress` of every line it has parsed, in order, and the tree is
    the one lark's own parse gives (a long assembly showed nothing for seconds)."""
    from assembler.diagnostics import parse_located
    from assembler.subleq import _parser

    text = ".data\nx: 1 ; note\n\n.code\nloop: subleq x, x, loop\n"
    lines: list[int] = []
    tree = parse_located(_parser(), text, "p.sq", progress=lines.append)
    assert lines == [1, 2, 3, 4, 5]
    assert tree == _parser().parse(text)


def test_parsing_with_progress_gives_the_same_errors():
    lines: list[int] = []
    with pytest.raises(SourceError) as caught:
        assemble_sq(".data\nx: 1\n.code\nsubleq x, , x\n", "e.sq", progress=lines.append)
    assert (caught.value.line, caught.value.column) == (4, 11)
    assert lines == [1, 2, 3]


@pytest.mark.parametrize("bits, shown", [(10 ** 5000, "about 10^5000"),
                                         (-10 ** 400, "about -10^400"),
                                         (10 ** 19, "10000000000000000000")],
                         ids=["10**5000", "-10**400", "10**19"])  # no str() past 4,300 digits
@pytest.mark.parametrize("suffix", [".sq", ".vsq", ".dec"])
def test_a_word_size_past_python_s_digit_limit_is_refused_with_its_magnitude(suffix, bits,
                                                                             shown):
    """str() of 10**5000 raises ValueError, so the message itself failed in a traceback; 400
    digits filled the screen."""
    text = (ROOT / "programs" / {".sq": "subleq/factorial.sq", ".vsq": "vsubleq/hello.vsq",
                                 ".dec": "vsubleq/hello.dec"}[suffix]).read_text()
    assemble = {".sq": assemble_sq, ".vsq": assemble_vsq, ".dec": load_image}[suffix]
    with pytest.raises(InputError) as caught:
        assemble(text, "p", bits=bits)
    assert str(caught.value) == f"--bits must be between 2 and 64, got {shown}"


def test_parsing_a_long_line_reports_the_lines_before_it_as_it_goes(monkeypatch):
    """A line of many tokens (a legal `.array` of 65,000 cells, or a hostile 600,000-token
    line parsed for 17 s) kept `progress` silent until its end."""
    monkeypatch.setattr(assembler.diagnostics, "TOKENS_BETWEEN_REPORTS", 100)
    lines: list[int] = []
    assemble_sq(".data\nx: .array " + ", ".join(["0"] * 1000) + "\n.code\nhalt\n", "a.sq",
                progress=lines.append)
    assert lines[0] == 1 and lines[-3:] == [2, 3, 4]
    assert lines.count(1) > 10 and lines == sorted(lines)
