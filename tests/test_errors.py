"""How errors name paths (`vm.common.errors.shown_path`): a file name holding control
characters (ESC [31m, a newline, a tab) is shown quoted and escaped in every message, so a
hostile name can neither recolour the terminal nor forge a line of output; and no other
error the command line prints carries a control character from an option or argument, or
runs to kilobytes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vm.cli import main
from vm.common.errors import PlacedInputError, counted, escaped, shown_path

ROOT = Path(__file__).resolve().parents[1]
FACTORIAL = str(ROOT / "programs" / "subleq" / "factorial.sq")
RED = "\x1b[31m"


@pytest.mark.parametrize("path", ["prog.sq", "dir with spaces/é 漢字.fleq", Path("a/b.npy")])
def test_a_printable_path_is_shown_as_it_is(path):
    assert shown_path(path) == str(path)


@pytest.mark.parametrize("path, shown", [
    (f"bad{RED}red.sq", r"'bad\x1b[31mred.sq'"),
    ("two\nlines.sq", r"'two\nlines.sq'"),
    (Path("tab\there.fleq"), r"'tab\there.fleq'"),
])
def test_a_path_with_control_characters_is_quoted_and_escaped(path, shown):
    assert shown_path(path) == shown


def test_a_placed_error_escapes_its_file_name():
    error = PlacedInputError("counter too large", f"p{RED}.fleq", 3, 7)
    assert str(error) == r"'p\x1b[31m.fleq':3:7: counter too large"


def _stderr_of(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


def test_a_missing_file_is_named_without_its_escape_sequence(tmp_path, capsys):
    err = _stderr_of(capsys, "run", str(tmp_path / f"no{RED}ne.sq"))
    assert "\x1b" not in err
    assert err.endswith(r"no\x1b[31mne.sq': No such file or directory" + "\n")


def test_a_source_error_in_a_file_named_with_a_newline_stays_three_lines(tmp_path, capsys,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("two\nlines.sq").write_text(".code\n    subleq $\n")
    err = _stderr_of(capsys, "asm", "two\nlines.sq")
    assert err.splitlines()[0].startswith(r"'two\nlines.sq':2:12: error: ")
    assert len(err.splitlines()) == 3


def test_an_output_in_a_missing_directory_is_named_escaped(tmp_path, capsys):
    target = tmp_path / "new\tdir" / f"x{RED}.npy"
    err = _stderr_of(capsys, "asm", FACTORIAL, "-o", str(target))
    assert "\x1b" not in err and "\t" not in err
    assert r"new\tdir/x\x1b[31m.npy': directory '" in err
    assert err.rstrip().endswith(r"new\tdir' does not exist")


def test_an_unknown_suffix_is_named_escaped(capsys):
    err = _stderr_of(capsys, "run", f"prog.s{RED}")
    assert "\x1b" not in err
    assert r"'prog.s\x1b[31m': unknown program type '.s\x1b[31m'" in err


def test_escaped_writes_control_characters_as_escapes_and_keeps_what_it_is_told():
    assert escaped(f"a{RED}\tb\nc") == r"a\x1b[31m\tb\nc"
    assert escaped(f"a{RED}\nc", keep="\n") == "a\\x1b[31m\nc"


@pytest.mark.parametrize("argv, shown", [
    (["run", FACTORIAL, f"x{RED}y"], r"unrecognized arguments: x\x1b[31my"),
    (["calc", "1 + 2", "--set", f"x{RED}=1"], r"--set x\x1b[31m: the expression has no input"),
    (["calc", "sqrt(4)", "--param", f"sqrt{RED}.k=1"], r"unknown function 'sqrt\x1b[31m'"),
])
def test_a_control_character_in_an_argument_is_escaped_in_the_error(argv, shown, capsys):
    """'unrecognized arguments', --set's and --param's errors echoed an ESC [31m given on the
    command line as it was, and recoloured the terminal."""
    try:
        code = main(argv)
    except SystemExit as exit:  # argparse's own errors
        code = exit.code
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert "\x1b" not in captured.err and shown in captured.err


@pytest.mark.parametrize("argv", [["run", FACTORIAL, "--scratch", "9" * 4_000],
                                  ["run", FACTORIAL, "--max-steps", "-" + "9" * 4_000]])
def test_an_error_about_a_huge_value_is_cut_to_a_readable_length(argv, capsys):
    """A 4,000-digit --scratch came back as a 10 KB line of digits."""
    try:
        code = main(argv)
    except SystemExit as exit:  # argparse's own errors
        code = exit.code
    err = capsys.readouterr().err
    assert code == 2
    last = err.splitlines()[-1]
    assert len(last) < 1_100 and re.search(r"\.\.\. \([0-9,]+ characters\)$", last)


def test_an_empty_path_is_shown_quoted():
    """`--input-file "$UNSET"` said "cannot read : No such file or directory"."""
    assert shown_path("") == "''"


@pytest.mark.parametrize("option", ["--input-file", "--matrix", "--data"])
def test_an_empty_file_option_names_the_empty_path(option, capsys):
    command = {"--input-file": ["run", FACTORIAL], "--matrix": ["linalg", "inverse"],
               "--data": ["train"]}[option]
    assert main([*command, option, ""]) == 2
    assert "cannot read '':" in capsys.readouterr().err


def test_a_source_that_is_no_path_is_named_by_str():
    """A program built in Python may name its source None; naming it must not fail."""
    assert shown_path(None) == "None"


def test_a_disassembly_names_its_source_on_one_comment_line():
    """'; disassembly of two<newline>lines.sq' put 'lines.sq' on a line of its own, which
    the assembler then read as code."""
    from assembler.disassemble import disassemble
    from vm.isa import SUBLEQ
    program = SUBLEQ.assemble_text(Path(FACTORIAL).read_text(), "two\nlines.sq")
    text = disassemble(program)
    assert text.splitlines()[0] == r"; disassembly of 'two\nlines.sq'"
    assert SUBLEQ.assemble_text(text, "again.sq").memory == program.memory


def test_a_count_names_its_noun_in_the_singular_only_for_one():
    assert [counted(n, "step") for n in (0, 1, 2, 4096)] == ["0 steps", "1 step", "2 steps",
                                                            "4096 steps"]
