"""The labelled standard-SUBLEQ dialect (.vsq): words and labels, '?', the zero cell,
located errors, the CLI path, and the example programs on the reference and the
transformer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from assembler.diagnostics import SourceError
from assembler.vsq import assemble, assemble_file
from vm.cli import main
from vm.common.errors import InputError
from vm.isa import VSUBLEQ, for_path
from vm.machines.vsubleq.reference import Image
from vm.runtime.config import EngineConfig

PROGRAMS = Path(__file__).resolve().parents[1] / "programs" / "vsubleq"


def words(text: str, bits: int | None = None) -> list[int]:
    return assemble(text, "t.vsq", bits).words


def reference(path: Path, input_bytes: bytes = b"", text: str | None = None):
    program = assemble(text if text is not None else path.read_text(), str(path))
    image = Image.from_words(program.words, program.bits, str(path))
    return program, image, VSUBLEQ.run_reference(image, 10_000, input_bytes=input_bytes)


# -- words ---------------------------------------------------------------------
def test_instruction_words_and_the_implicit_next_address() -> None:
    assert words("start: subleq x, y\nsubleq y, x, start\nx: .word 7\ny: .word -2\n") == [
        6, 7, 3, 7, 6, 0, 7, -2]


def test_labels_name_code_and_data_words_and_patch_operands() -> None:
    text = "loop: subleq ptr + 1, x\nptr: subleq 0, 0, loop\nx: .word 1, 2\n.zero 2\nend:\n"
    program = assemble(text, "t.vsq")
    assert program.words == [4, 6, 3, 0, 0, 0, 1, 2, 0, 0]
    assert program.symbols == {"loop": 0, "ptr": 3, "x": 6, "end": 10}


def test_label_arithmetic_with_parentheses_and_negation() -> None:
    assert words("a: .word b - a, -(b + 1) + 3, b - -2\nb: .word 0\n") == [3, -1, 5, 0]


def test_question_mark_is_the_address_of_the_next_word() -> None:
    assert words(".word 0\nsubleq ?, ?, ?\n.word ?, ? + 10\n") == [0, 2, 3, 4, 5, 16]


def test_halt_and_goto_use_an_appended_zero_cell() -> None:
    program = assemble("goto end\nend: halt\n", "t.vsq")
    assert program.words == [6, 6, 3, 6, 6, -1, 0] and program.symbols["Z"] == 6


def test_a_defined_z_is_used_instead_of_the_implicit_one() -> None:
    assert words("halt\nZ: .word 0\n") == [3, 3, -1, 0]


def test_mnemonics_and_directives_ignore_case_and_bits_sets_the_word_size() -> None:
    program = assemble(".BITS 8\nSUBLEQ x, x\nx: .Word 127\n", "t.vsq")
    assert program.bits == 8 and program.words == [3, 3, 3, 127]
    assert assemble(".bits 8\nx: .word 1000\n", "t.vsq", bits=16).bits == 16


# -- located errors ---------------------------------------------------------------
@pytest.mark.parametrize("text, located, message", [
    ("subleq x, nowhere\nx: .word 0\n", "t.vsq:1:11:", "undefined label 'nowhere'"),
    ("x: .word 0\nx: .word 1\n", "t.vsq:2:1:", "duplicate label 'x' (first defined at "
                                               "t.vsq:1:1)"),
    ("subleq x, y $\n", "t.vsq:1:13:", "unexpected character '$'"),
    (".bits 8\nx: .word 5, 128\n", "t.vsq:2:13:", "value 128 does not fit in 8-bit words"),
    (".bits 8\nsubleq x, x, -129\nx: .word 0\n", "t.vsq:2:14:", "value -129 does not fit"),
    ("move x, y\n", "t.vsq:1:1:", "unknown mnemonic 'move'"),
    ("subleq x\n", "t.vsq:1:1:", "'subleq' takes 2 or 3 operands, got 1"),
    (".data 1\n", "t.vsq:1:1:", "unknown directive '.data'"),
    ("x: .zero y\ny: .word 0\n", "t.vsq:1:10:", "expected a number"),
    (".bits 1\n", "t.vsq:1:7:", "word size must be between 2 and 64"),
    ("; nothing\n", "t.vsq:1:1:", "empty program"),
])
def test_errors_are_located(text: str, located: str, message: str) -> None:
    with pytest.raises(SourceError) as caught:
        assemble(text, "t.vsq")
    shown = str(caught.value)
    assert shown.startswith(located) and message in shown and "^" in shown


@pytest.mark.parametrize("text, line, column", [
    (".zero 32765\nhalt\n", 2, 1), ("goto end\n.zero 32765\nend:\n", 1, 1),
    (".zero 32767\n.word Z\n", 2, 7)])
def test_no_room_for_the_zero_cell_is_located_where_it_is_first_used(text: str, line: int,
                                                                     column: int) -> None:
    """An image of 32,768 words with a halt said only 'X.vsq: no room for the zero cell'."""
    with pytest.raises(SourceError, match="no room for the zero cell 'Z'") as caught:
        assemble(text, "t.vsq")
    assert (caught.value.line, caught.value.column) == (line, column)
    assert len(assemble(text.replace("32765", "32764").replace("32767", "32766"),
                        "t.vsq").words) == 32768


def test_caret_marks_the_bad_name() -> None:
    with pytest.raises(SourceError) as caught:
        assemble("subleq x, nowhere\nx: .word 0\n", "t.vsq")
    assert str(caught.value).splitlines()[1:] == ["    subleq x, nowhere",
                                                  "              ^~~~~~~"]


def test_bits_option_out_of_range_is_refused() -> None:
    with pytest.raises(InputError, match="--bits must be between 2 and 64"):
        assemble("halt\n", "t.vsq", bits=70)


# -- command line -----------------------------------------------------------------
def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_vsq_files_belong_to_standard_subleq() -> None:
    assert for_path("x.vsq") is VSUBLEQ


def test_cli_runs_compares_and_lists_a_vsq_source(capsys) -> None:
    path = str(PROGRAMS / "array_sum.vsq")
    code, out, _ = run_cli(capsys, "run", "--engine", "reference", "--json", path)
    assert code == 0 and 24 in json.loads(out)["memory"]["mem"]
    code, out, _ = run_cli(capsys, "compare", path)
    assert code == 0 and out.startswith("OK: transformer and reference agree for 21 steps")
    code, out, _ = run_cli(capsys, "asm", "--listing", path)
    assert code == 0 and "     0: 23 21 3" in out and "    15: 28 28 -1" in out


def test_cli_error_is_located_and_exits_2(capsys, tmp_path) -> None:
    bad = tmp_path / "bad.vsq"
    bad.write_text("halt\nsubleq Z, missing\n")
    code, _, err = run_cli(capsys, "run", "--engine", "reference", str(bad))
    assert code == 2 and f"{bad}:2:11: error: undefined label 'missing'" in err
    assert "Traceback" not in err


# -- programs -----------------------------------------------------------------------
def test_hello_prints_hello_world() -> None:
    _, _, result = reference(PROGRAMS / "hello.vsq")
    assert result.halted and result.output == b"Hello, world!\n"


@pytest.mark.parametrize("data", [b"", b"a", b"echo me\n"])
def test_echo_copies_input(data: bytes) -> None:
    _, _, result = reference(PROGRAMS / "echo.vsq", data)
    assert result.halted and result.output == data


@pytest.mark.parametrize("number", [0, 7, 10, 1203, 10000, 32766])
def test_print_number_prints_decimal(number: int) -> None:
    path = PROGRAMS / "print_number.vsq"
    text = path.read_text().replace("n:      .word 1203", f"n:      .word {number}")
    _, _, result = reference(path, text=text)
    assert result.halted and result.output == str(number).encode()


@pytest.mark.parametrize("name, label, expected", [
    ("array_sum.vsq", "sum", [24]),
    ("reverse.vsq", "out", list(b"olleh")),
])
def test_self_modifying_programs_on_reference_and_transformer(name: str, label: str,
                                                              expected: list[int]) -> None:
    program, image, result = reference(PROGRAMS / name)
    at = program.symbols[label]
    assert result.halted and result.memory[at:at + len(expected)] == expected
    pytest.importorskip("torch")
    run = VSUBLEQ.run_transformer(image, VSUBLEQ.geometry_for(image), 10_000, EngineConfig())
    assert run.halted and run.memory == result.memory and run.steps == result.steps


SORT = PROGRAMS / "sort.vsq"
SORTED_TEXT = '.word 116, 114, 97, 110, 115, 102, 111, 114, 109, 101, 114  ; "transformer"'


def sort_source(data: bytes) -> str:
    """sort.vsq with `data` as its array (the counts follow from the array's length)."""
    text = SORT.read_text()
    assert SORTED_TEXT in text
    return text.replace(SORTED_TEXT, ".word " + ", ".join(str(byte) for byte in data))


@pytest.mark.parametrize("data", [b"transformer", b"ba", b"ab", b"zzz", b"sorted!",
                                  b"~ !AZaz09", bytes(range(120, 99, -1))])
def test_sort_prints_the_sorted_bytes_and_leaves_them_in_memory(data: bytes) -> None:
    program, image, result = reference(SORT, text=sort_source(data))
    at = program.symbols["array"]
    assert result.halted and result.output == bytes(sorted(data))
    assert result.memory[at:at + len(data)] == sorted(data)


@pytest.mark.parametrize("bits", [8, 16, 32])
def test_sort_on_the_transformer_matches_the_reference_at_each_word_size(bits: int) -> None:
    pytest.importorskip("torch")
    program = assemble(SORT.read_text(), str(SORT), bits)
    image = Image.from_words(program.words, program.bits, str(SORT))
    result = VSUBLEQ.run_reference(image, 10_000)
    run = VSUBLEQ.run_transformer(image, VSUBLEQ.geometry_for(image), 10_000, EngineConfig(),
                                  max_output=16)
    assert run.halted and run.output == bytes(sorted(b"transformer"))
    assert run.memory == result.memory and run.steps == result.steps


def test_the_documented_example_prints_hello_world() -> None:
    doc = (PROGRAMS.parents[1] / "docs" / "vsubleq_machine.md").read_text()
    block = next(b for b in re.findall(r"```\n(.*?)```", doc, flags=re.S)
                 if b.startswith("print:"))
    _, _, result = reference(Path("doc.vsq"), text=block)
    assert result.halted and result.output == b"Hello, world!\n"


@pytest.mark.parametrize("call", [lambda: assemble(None), lambda: assemble(b"halt\n"),
                                  lambda: assemble("halt\n", bits="16"),
                                  lambda: assemble_file(None)])
def test_the_python_entry_points_refuse_arguments_of_another_type(call):
    """None failed on `.replace`, bits="16" in a comparison, a None path inside pathlib."""
    with pytest.raises(InputError, match="the source must be a str|bits must be an integer|"
                                         "a source file's path must be"):
        call()
