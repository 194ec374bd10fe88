"""Hostile inputs across every command: each is refused with one clear message and exit
code 2 (source errors located as file:line:col with a caret), never a traceback, and
nothing is written. Cases run in-process through `vm.cli.main`, so any uncaught exception
fails the test."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from vm.cli import main

ROOT = Path(__file__).resolve().parents[1]
FACTORIAL = str(ROOT / "programs" / "subleq" / "factorial.sq")
CALCULATOR = str(ROOT / "programs" / "fleq" / "calculator.fleq")
LOCATED = re.compile(r":\d+:\d+: error: .+\n .*\n *\^")

SQ_GOOD = ".data\nx: 5\ny: 0\n.code\nsubleq x, y\nhalt\n"
SQ_ERRORS = {
    "unknown_mnemonic": ".code\nfoo\n",
    "undefined_name": ".code\nsubleq nope, nope\n",
    "duplicate": ".data\nx: 1\nx: 2\n.code\nhalt\n",
    "label_twice": ".code\na: halt\na: halt\n",
    "bits_too_small": ".bits 1\n.code\nhalt\n",
    "bits_too_large": ".bits 65\n.code\nhalt\n",
    "bits_twice": ".bits 8\n.bits 8\n.code\nhalt\n",
    "zero_size_zero": ".data\nx: .zero 0\n.code\nhalt\n",
    "zero_size_negative": ".data\nx: .zero -4\n.code\nhalt\n",
    "zero_size_huge": ".data\nx: .zero 1000000000\n.code\nhalt\n",
    "zero_size_astronomic": ".data\nx: .zero 1000000000000000000000000000000\n.code\nhalt\n",
    "value_too_wide": ".bits 8\n.data\nx: 300\n.code\nhalt\n",
    "value_64_bit_overflow": ".bits 64\n.data\nx: 9223372036854775808\n.code\nhalt\n",
    "deep_sum": ".data\nx: " + "+".join(["1"] * 5000) + "\n.code\nhalt\n",
    "deep_negation": ".data\nx: " + "-" * 500 + "1\n.code\nhalt\n",
    "label_as_data": ".code\nl: subleq l, l\n",
    "number_as_data": ".code\nsubleq 3, 4\n",
    "number_as_jump": ".data\nx: 0\n.code\nsubleq x, x, 7\n",
    "jump_outside": ".data\nx: 0\n.code\nsubleq x, x, EOF+5\n",
    "empty_program": ".data\nx: 0\n",
    "nothing_at_all": "",
    "unexpected_character": ".code\nsubleq x $ y\n",
    "unknown_directive": ".stack 4\n.code\nhalt\n",
    "missing_comma": ".data\nx: 0\n.code\nsubleq x x\n",
    "too_many_operands": ".data\nx: 0\n.code\nsubleq x, x, EOF, x\n",
    "goto_without_target": ".code\ngoto\n",
    "halt_with_operand": ".code\nhalt 3\n",
    "eof_defined": ".data\nEOF: 0\n.code\nhalt\n",
    "negated_label": ".data\nx: -l\n.code\nl: halt\n",
    "two_addresses_added": ".data\nx: 0\ny: 0\n.code\nsubleq x + y, x\n",
    "array_offset_outside": ".data\nx: .array 1, 2\n.code\nsubleq x + 2, x\n",
    "const_twice": ".const k = 1\n.const k = 2\n.code\nhalt\n",
    "too_many_instructions": ".code\n" + "halt\n" * 65_600,
    "writes_the_zero_cell": ".data\nx: 1\n.code\nsubleq x, 0\n",
}

FLEQ_ERRORS = {
    "unknown_function": ".data\na: 1.0\n.code\n a = nosuch(a, a)\n halt\n",
    "undefined_variable": ".data\na: 1.0\n.code\n a = add(a, b)\n halt\n",
    "duplicate_variable": ".data\na: 1.0\na: 2.0\n.code\n halt\n",
    "zeros_too_large": ".data\nx: .zeros 17x1\n.code\n halt\n",
    "zeros_astronomic": ".data\nx: .zeros 100000000000000000000x1\n.code\n halt\n",
    "zeros_empty": ".data\nx: .zeros 0x1\n.code\n halt\n",
    "matrix_wrong_shape": ".data\nx: .matrix 2x2 [[1, 2]]\n.code\n halt\n",
    "unknown_directive": ".stack 3\n.data\na: 1.0\n.code\n halt\n",
    "unexpected_character": ".data\na: 1.0\n.code\n a = add(a, a) $\n halt\n",
    "block_size_zero": ".d 0\n.data\na: 1.0\n.code\n halt\n",
    "block_size_large": ".d 17\n.data\na: 1.0\n.code\n halt\n",
    "arity": ".data\na: 1.0\n.code\n a = add(a)\n halt\n",
    "unknown_parameter": ".function inv nosuch=3\n.data\na: 1.0\n.code\n a = inv(a)\n halt\n",
    "empty": "",
}

CALC_ERRORS = {
    "empty": "",
    "blank": "   ",
    "unexpected_character": "1 + $",
    "open_parenthesis": "(1 + 2",
    "close_parenthesis": "1 + 2)",
    "trailing_operator": "1 +",
    "long_sum": "+".join(["1"] * 2000),
    "deep_sqrt": "sqrt(" * 500 + "1" + ")" * 500,
    "unknown_name": "x + 1",
    "overflowing_literal": "1e400 + 1",
    "newline": "1 +\n2",
    "outside_domain": "1 / 0",
}


def run(argv: list[str], capsys) -> tuple[int, str]:
    """Exit code and stderr of one command; an exception escaping main fails the test."""
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own refusals
        code = exit_.code
    return code, capsys.readouterr().err


def refused(argv: list[str], capsys, message: str | None = None) -> str:
    code, err = run(argv, capsys)
    assert code == 2, f"exit {code}, stderr: {err[-500:]}"
    assert "Traceback" not in err
    assert err.strip(), "no message"
    if message is not None:
        assert message in err, err[-500:]
    return err


@pytest.mark.parametrize("name", sorted(SQ_ERRORS))
def test_sq_source_errors_are_located(name, capsys, tmp_path):
    source = tmp_path / f"{name}.sq"
    source.write_text(SQ_ERRORS[name])
    err = refused(["asm", str(source), "-o", str(tmp_path / "x.npy")], capsys)
    assert LOCATED.search(err), err[-500:]
    assert sorted(p.name for p in tmp_path.iterdir()) == [source.name]


@pytest.mark.parametrize("name", sorted(FLEQ_ERRORS))
def test_fleq_source_errors_are_refused(name, capsys, tmp_path):
    source = tmp_path / f"{name}.fleq"
    source.write_text(FLEQ_ERRORS[name])
    err = refused(["asm", str(source)], capsys)
    assert LOCATED.search(err), err[-500:]


@pytest.mark.parametrize("name", sorted(CALC_ERRORS))
def test_calc_refuses_bad_expressions(name, capsys):
    """Each refusal points at a column of the expression, an empty one at column 1."""
    err = refused(["calc", "--", CALC_ERRORS[name]], capsys)
    assert LOCATED.search(err) and err.startswith("<expression>:1:"), err[-500:]


FLAG_CASES = {
    "device_bogus": (["run", FACTORIAL, "--device", "bogus"], "unknown device"),
    "device_meta": (["run", FACTORIAL, "--device", "meta"], "cannot run the machine"),
    "device_mps": (["run", FACTORIAL, "--device", "mps"], "cannot run the machine"),
    "device_empty": (["run", FACTORIAL, "--device", ""], "unknown device"),
    "device_second_cpu": (["run", FACTORIAL, "--device", "cpu:5"], "there is one CPU device"),
    "bench_attention_out_empty": (["bench", "attention", "--out", ""], "empty path"),
    "bench_rope_out_empty": (["bench", "rope", "--out", ""], "empty path"),
    "trace_beyond_memory": (["run", FACTORIAL, "--trace", "--max-steps", str(10 ** 13)],
                            "--trace keeps every step"),
    "dtype_float16": (["run", FACTORIAL, "--dtype", "float16"], "invalid choice"),
    "max_steps_zero": (["run", FACTORIAL, "--max-steps", "0"], None),
    "max_steps_negative": (["run", FACTORIAL, "--max-steps", "-5"], None),
    "max_steps_text": (["run", FACTORIAL, "--max-steps", "many"], None),
    "max_seconds_negative": (["run", FACTORIAL, "--max-seconds", "-1"], None),
    "max_seconds_infinite": (["compare", FACTORIAL, "--max-seconds", "inf"], None),
    "bits_one": (["run", FACTORIAL, "--bits", "1"], None),
    "bits_huge": (["asm", FACTORIAL, "--bits", "65"], None),
    "scratch_zero": (["asm", FACTORIAL, "--scratch", "0"], None),
    "engine_unknown": (["run", FACTORIAL, "--engine", "quantum"], "invalid choice"),
    "param_infinite": (["calc", "1/4", "--param", "inv.terms=inf"], "finite"),
    "param_nan": (["calc", "1/4", "--param", "inv.terms=nan"], "finite"),
    "param_unknown_block": (["calc", "1", "--param", "nosuch.x=1"], "unknown function"),
    "param_unknown_key": (["calc", "1/4", "--param", "inv.nosuch=1"], "no parameter"),
    "param_malformed": (["calc", "1", "--param", "inv"], "FUNC.KEY=NUMBER"),
    "param_infinite_bound": (["calc", "1/3", "--param", "inv.high=1e308"], "error bound"),
    "param_overflowing_sharpness": (["calc", "1/3", "--param", "inv.sharpness=1e308"],
                                    "error bound"),
    "param_not_a_number": (["calc", "1", "--param", "inv.terms=many"], "FUNC.KEY=NUMBER"),
    "bits_on_fleq": (["asm", CALCULATOR, "--bits", "8"], "SUBLEQ"),
    "bench_seconds_negative": (["bench", "--seconds", "-1"], "positive"),
    "bench_seconds_infinite": (["bench", "--seconds", "inf"], None),
    "bench_seconds_nan": (["bench", "--seconds", "nan"], None),
    "bench_columns_zero": (["bench", "--columns", "0"], None),
    "bench_device_meta": (["bench", "--device", "meta", "--seconds", "0.01"], "cannot run"),
    "attention_huge_n": (["attention", "--n", "1000000000", "--m", "2", "--mode", "exact"],
                         "exceeds the limit"),
    "attention_zero_n": (["attention", "--n", "0", "--m", "2", "--mode", "exact"], None),
    "attention_m_above_n": (["attention", "--n", "8", "--m", "16", "--mode", "exact"],
                            "exceeds the sequence length"),
    "attention_unknown_mode": (["attention", "--n", "8", "--m", "4", "--mode", "magic"], None),
    "attention_huge_heads": (["attention", "--n", "8", "--m", "4", "--mode", "exact",
                              "--heads", "100000"], "exceeds the limit"),
    "sample_noise_zero": (["sample", FACTORIAL, "--cell", "fact", "--noise", "0"], None),
    "sample_noise_infinite": (["sample", FACTORIAL, "--cell", "fact", "--noise", "inf"], None),
    "sample_unknown_cell": (["sample", FACTORIAL, "--cell", "nope"], "no memory cell"),
    "sample_too_many": (["sample", FACTORIAL, "--cell", "fact", "--samples", "10000000"],
                        "exceeds the limit"),
    "sample_fleq": (["sample", CALCULATOR, "--cell", "t"], "SUBLEQ"),
    "sample_bad_reward": (["sample", FACTORIAL, "--cell", "fact", "--strategy", "best-of-n",
                           "--reward", "reward.txt"], "--reward"),
    "trace_negative_step": (["trace", FACTORIAL, "--step", "-1", "--png", "out-x"], None),
    "trace_nothing_to_draw": (["trace", FACTORIAL], "nothing to draw"),
    "trace_gif_suffix": (["trace", FACTORIAL, "--gif", "x.png"], ".gif"),
    "linalg_iters_zero": (["linalg", "inverse", "--matrix", "MATRIX", "--iters", "0"], None),
    "linalg_iters_huge": (["linalg", "inverse", "--matrix", "MATRIX", "--iters", "1000000"],
                          "between 1 and"),
    "train_lr_infinite": (["train", "--data", "DATA", "--lr", "inf"], "finite"),
    "train_epochs_huge": (["train", "--data", "DATA", "--epochs", "1000000000"],
                          "exceeds the limit"),
    "train_hidden_huge": (["train", "--data", "DATA", "--hidden", "100000"], "at most 16"),
    "train_seed_beyond_64_bits": (["train", "--data", "DATA", "--seed", str(2 ** 64)],
                                  "at most"),
    "sample_max_seconds_zero": (["sample", FACTORIAL, "--cell", "fact", "--max-seconds", "0"],
                                None),
    "temperature_infinite": (["run", FACTORIAL, "--temperature", "inf"], "finite"),
    "temperature_huge": (["compare", FACTORIAL, "--temperature", "1e300"], "at most"),
    "temperature_nan_export": (["export", FACTORIAL, "-o", "out", "--temperature", "nan"],
                               "temperature"),
    "temperature_negative_inspect": (["inspect", FACTORIAL, "--temperature", "-5"], "positive"),
    "temperature_infinite_linalg": (["linalg", "inverse", "--matrix", "MATRIX",
                                     "--temperature", "inf"], "finite"),
    "sample_seed_beyond_64_bits": (["sample", FACTORIAL, "--cell", "fact", "--seed",
                                    str(2 ** 64)], "at most"),
    "sample_seed_negative": (["sample", FACTORIAL, "--cell", "fact", "--seed", "-1"], None),
    "inspect_block_size_without_fleq": (["inspect", "--memory", "10", "--instructions", "5",
                                         "--block-size", "4"], "FLEQ"),
    "no_program": (["run"], None),
    "csv_and_program": (["run", FACTORIAL, "--csv", "a.csv", "b.csv"], "not both"),
}


@pytest.mark.parametrize("name", sorted(FLAG_CASES))
def test_bad_flags_are_refused_before_work(name, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "MATRIX", np.array([[2.0, 0.5], [0.5, 1.0]]))
    np.savez(tmp_path / "DATA", x=np.ones((3, 2)), y=np.ones((3, 1)))
    argv, message = FLAG_CASES[name]
    files = {"MATRIX": str(tmp_path / "MATRIX.npy"), "DATA": str(tmp_path / "DATA.npz")}
    refused([files.get(a, a) for a in argv], capsys, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["DATA.npz", "MATRIX.npy"]


def _matrix_files(directory: Path) -> dict[str, tuple[Path, str]]:
    files = {}
    np.savez(directory / "archive.npz", a=np.eye(2))
    files["npz"] = (directory / "archive.npz", ".npz archive")
    (directory / "empty.npy").write_bytes(b"")
    files["empty"] = (directory / "empty.npy", "empty")
    (directory / "garbage.npy").write_bytes(b"not an array at all")
    files["garbage"] = (directory / "garbage.npy", "not a numeric .npy array")
    for name, array, message in [
        ("cube", np.zeros((2, 2, 2)), "square matrix"),
        ("wide", np.zeros((2, 3)), "square matrix"),
        ("huge", np.eye(17), "larger than the largest block size"),
        ("zero", np.zeros((0, 0)), "the matrix is empty"),
        ("nan", np.array([[1.0, np.nan], [0.0, 1.0]]), "not finite"),
        ("text", np.array([["a", "b"], ["c", "d"]]), "real numeric array"),
        ("complex", np.eye(2) * 1j, "real numeric array"),
    ]:
        np.save(directory / f"{name}.npy", array)
        files[name] = (directory / f"{name}.npy", message)
    files["missing"] = (directory / "missing.npy", "cannot read")
    files["directory"] = (directory, "cannot read")
    return files


MATRIX_CASES = ["npz", "empty", "garbage", "cube", "wide", "huge", "zero", "nan", "text",
                "complex", "missing", "directory"]


@pytest.mark.parametrize("name", MATRIX_CASES)
def test_bad_matrix_files_are_refused(name, capsys, tmp_path):
    path, message = _matrix_files(tmp_path)[name]
    refused(["linalg", "inverse", "--matrix", str(path)], capsys, message)


def test_bad_training_data_is_refused(capsys, tmp_path):
    (tmp_path / "data.npz").write_text("not a zip")
    refused(["train", "--data", str(tmp_path / "data.npz")], capsys, "not an .npz file")
    np.savez(tmp_path / "partial.npz", x=np.ones((3, 2)))
    refused(["train", "--data", str(tmp_path / "partial.npz")], capsys, "no array 'y'")
    assert zipfile.is_zipfile(tmp_path / "partial.npz")


PROGRAM_FILE_CASES = {
    "missing": (lambda d: d / "missing.sq", "cannot read"),
    "directory": (lambda d: d, None),
    "unknown_suffix": (lambda d: _write(d / "prog.txt", SQ_GOOD), None),
    "binary": (lambda d: _write_bytes(d / "prog.sq", b"\xff\xfe\x00\x01" * 8), None),
    "binary_fleq": (lambda d: _write_bytes(d / "prog.fleq", b"\x80\x81\x82"), None),
}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("command", ["asm", "run", "compare", "inspect"])
@pytest.mark.parametrize("name", sorted(PROGRAM_FILE_CASES))
def test_unreadable_programs_are_refused(name, command, capsys, tmp_path):
    make, message = PROGRAM_FILE_CASES[name]
    refused([command, str(make(tmp_path))], capsys, message)


def _output_targets(directory: Path) -> dict[str, tuple[str, str]]:
    (directory / "file").write_text("x")
    (directory / "folder").mkdir()
    return {
        "a_directory": (str(directory / "folder"), "is a directory"),
        "under_a_file": (str(directory / "file" / "x.npy"), "is not a directory"),
        "missing_directory": (str(directory / "nope" / "x.npy"), "does not exist"),
        "unwritable": ("/proc/ltvm-test.npy", "cannot write"),
    }


@pytest.mark.parametrize("name", ["a_directory", "under_a_file", "missing_directory",
                                  "unwritable"])
def test_asm_output_paths_that_cannot_be_written(name, capsys, tmp_path):
    target, message = _output_targets(tmp_path)[name]
    refused(["asm", FACTORIAL, "-o", target], capsys, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder"]
    assert not list((tmp_path / "folder").iterdir())


@pytest.mark.parametrize("name", ["under_a_file", "unwritable"])
def test_export_and_trace_targets_that_cannot_be_written(name, capsys, tmp_path):
    target, _ = _output_targets(tmp_path)[name]
    refused(["export", FACTORIAL, "-o", target], capsys)
    refused(["trace", FACTORIAL, "--gif", str(Path(target).with_suffix(".gif"))], capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder"]


def test_export_refuses_a_directory_with_other_files(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    refused(["export", FACTORIAL, "-o", str(tmp_path)], capsys, "holds other files")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


CSV_CASES = {
    "wrong_header": ("x,y,z\n1,2,3\n", "mem\n0\n-1\n", "found 'x,y,z'"),
    "empty_commands": ("", "mem\n0\n-1\n", "the file is empty"),
    "not_integer": ("a,b,c\n1,1,x\n", "mem\n0\n-1\n", "is not an integer"),
    "wrong_width": ("a,b,c\n1,1\n", "mem\n0\n-1\n", "expected 3 value(s)"),
    "not_memory_column": ("a,b,c\n0,1,3\n", "mem\n0\n-1\n", "not a memory column"),
    "memory_header": ("a,b,c\n1,1,3\n", "value\n0\n-1\n", "expected the header 'mem'"),
    "field_beyond_csv_limit": ("a,b,c\n" + "1" * 200_000 + ",1,1\n", "mem\n0\n-1\n",
                               "not a CSV file the importer can read"),
    "long_field": ("a,b,c\n" + "1" * 1000 + ",1,1\n", "mem\n0\n-1\n",
                   "a field of 1,000 characters"),
}


@pytest.mark.parametrize("name", sorted(CSV_CASES))
def test_bad_csv_pairs_are_located(name, capsys, tmp_path):
    commands, memory, message = CSV_CASES[name]
    (tmp_path / "commands.csv").write_text(commands)
    (tmp_path / "memory.csv").write_text(memory)
    refused(["run", "--csv", str(tmp_path / "commands.csv"), str(tmp_path / "memory.csv"),
             "--scratch", "1"], capsys, message)


def test_a_csv_with_a_byte_order_mark_is_read(capsys, tmp_path):
    assert main(["asm", FACTORIAL, "--export-csv", str(tmp_path)]) == 0
    for name in ("commands.csv", "memory.csv"):
        path = tmp_path / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    capsys.readouterr()
    assert main(["run", "--csv", str(tmp_path / "commands.csv"), str(tmp_path / "memory.csv"),
                 "--engine", "reference"]) == 0
    assert "mem = [0, -1, 6, 720" in capsys.readouterr().out


def test_the_hostile_table_is_large(capsys):
    cases = (len(SQ_ERRORS) + len(FLEQ_ERRORS) + len(CALC_ERRORS) + len(FLAG_CASES)
             + len(MATRIX_CASES) + 4 * len(PROGRAM_FILE_CASES) + 4 + 2 + len(CSV_CASES))
    assert cases >= 100


# -- asm / run / compare / inspect / export / trace: the three instruction sets ------------

LONG_LITERAL = "9" * 5000
"""More digits than Python converts to an int at once (4,300)."""
LONG_LITERAL_SOURCES = {
    "sq_value": ("prog.sq", f".data\nx: {LONG_LITERAL}\n.code\nhalt\n"),
    "sq_hex_bits": ("prog.sq", f".bits 0x{'f' * 5000}\n.code\nhalt\n"),
    "vsq_word": ("prog.vsq", f"x: .word {LONG_LITERAL}\nhalt\n"),
    "vsq_zero_count": ("prog.vsq", f"x: .zero {LONG_LITERAL}\nhalt\n"),
    "dec_word": ("prog.dec", f"0 0 -1\n{LONG_LITERAL} 0 0\n"),
    "fleq_block_size": ("prog.fleq", f".d {LONG_LITERAL}\n.data\na: 1.0\n.code\n halt\n"),
    "fleq_zeros_shape": ("prog.fleq", f".data\nx: .zeros {LONG_LITERAL}x1\n.code\n halt\n"),
}


@pytest.mark.parametrize("name", sorted(LONG_LITERAL_SOURCES))
def test_integer_literals_too_long_to_convert_are_located(name, capsys, tmp_path):
    file, text = LONG_LITERAL_SOURCES[name]
    (tmp_path / file).write_text(text)
    err = refused(["asm", str(tmp_path / file)], capsys, "number longer than")
    assert LOCATED.search(err), err[-500:]


def test_long_literals_of_leading_zeros_still_assemble(capsys, tmp_path):
    """Only significant digits count against the limit, and the zeros change no value."""
    from assembler.vsq import assemble
    text = f"x: .word 0b{'0' * 5000}1\nhalt\n"
    (tmp_path / "prog.vsq").write_text(text)
    assert main(["asm", str(tmp_path / "prog.vsq")]) == 0
    program = assemble(text, "prog.vsq", 16)
    assert program.words[program.symbols["x"]] == 1


@pytest.mark.parametrize("alias", ["same", "dotted", "symlink", "hardlink"])
def test_asm_refuses_to_save_x_over_its_own_source(alias, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "prog.sq"
    source.write_text(SQ_GOOD)
    if alias == "symlink":
        (tmp_path / "x.npy").symlink_to(source)
    elif alias == "hardlink":
        (tmp_path / "x.npy").hardlink_to(source)
    target = {"same": str(source), "dotted": "./prog.sq"}.get(alias, "x.npy")
    refused(["asm", "prog.sq", "-o", target], capsys, "is the input")
    assert source.read_text() == SQ_GOOD


def test_asm_refuses_to_save_x_over_a_csv_it_reads(capsys, tmp_path):
    assert main(["asm", FACTORIAL, "--export-csv", str(tmp_path)]) == 0
    memory = tmp_path / "memory.csv"
    before = memory.read_bytes()
    refused(["asm", "--csv", str(tmp_path / "commands.csv"), str(memory), "-o", str(memory)],
            capsys, "is the input")
    assert memory.read_bytes() == before


def test_trace_refuses_a_gif_too_long_to_hold(capsys, tmp_path):
    from vm.cli.trace import MAX_GIF_STEPS
    gif = tmp_path / "x.gif"
    refused(["trace", FACTORIAL, "--gif", str(gif), "--steps", str(MAX_GIF_STEPS + 1)], capsys,
            "--steps must be at most")
    refused(["trace", FACTORIAL, "--gif", str(gif), "--steps", str(10 ** 9)], capsys)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("settings", ["[" * 100_000 + "]" * 100_000,
                                      '{"format": "ltvm-csv/1", "scratch": ' + LONG_LITERAL
                                      + ', "bits": 8}'])
def test_csv_settings_that_json_cannot_decode_are_refused(settings, capsys, tmp_path):
    assert main(["asm", FACTORIAL, "--export-csv", str(tmp_path)]) == 0
    capsys.readouterr()
    (tmp_path / "program.json").write_text(settings)
    for command in ("asm", "run"):
        refused([command, "--csv", str(tmp_path / "commands.csv"),
                 str(tmp_path / "memory.csv")], capsys, "program.json")


@pytest.mark.parametrize("value", ["1e999", LONG_LITERAL])
def test_fleq_function_parameters_must_be_finite(value, capsys, tmp_path):
    source = tmp_path / "prog.fleq"
    source.write_text(f".function inv terms={value}\n.data\na: 2.0\n.code\n a = inv(a)\n halt\n")
    err = refused(["run", str(source)], capsys, "finite")
    assert LOCATED.search(err), err[-500:]


def test_a_fleq_vector_longer_than_any_block_is_located(capsys, tmp_path):
    from assembler.fleq import MAX_BLOCK
    source = tmp_path / "prog.fleq"
    source.write_text(f".data\nx: .vector [{', '.join(['1'] * (MAX_BLOCK + 1))}]\n.code\n halt\n")
    err = refused(["asm", str(source)], capsys, f"got {MAX_BLOCK + 1}x1")
    assert LOCATED.search(err), err[-500:]


def test_a_dec_word_too_wide_for_bits_is_located(capsys, tmp_path):
    image = tmp_path / "prog.dec"
    image.write_text("0 0 -1\n3 40000 6\n")
    err = refused(["run", str(image)], capsys, "word 4 is 40000, outside the 16-bit range")
    assert f"{image}:2:3: error:" in err and LOCATED.search(err), err[-500:]
    refused(["run", str(image), "--bits", "1"], capsys, "--bits must be between 2 and 64")


@pytest.mark.parametrize("command", ["run", "compare", "inspect"])
def test_fleq_block_parameters_that_overflow_the_weights_are_refused(command, capsys):
    err = refused([command, CALCULATOR, "--param", "inv.sharpness=1e308"], capsys,
                  "are not finite")
    assert "RuntimeWarning" not in err


@pytest.mark.parametrize("option", [["--block-size", "3"], ["--param", "inv.terms=8"],
                                    ["--functions", "inv"]])
def test_fleq_options_on_a_csv_pair_are_refused(option, capsys, tmp_path):
    assert main(["asm", FACTORIAL, "--export-csv", str(tmp_path)]) == 0
    capsys.readouterr()
    refused(["run", "--csv", str(tmp_path / "commands.csv"), str(tmp_path / "memory.csv"),
             *option], capsys, "apply to .fleq programs")


def test_inspect_json_stays_json_when_a_block_has_no_bound(capsys):
    import json
    assert main(["inspect", CALCULATOR, "--param", "inv.terms=1", "--json"]) == 0
    out = capsys.readouterr().out
    inverse = [b for b in json.loads(out, parse_constant=pytest.fail)["blocks"]
               if b["function"] == "inv"]
    assert inverse[0]["relative_error_bound"] is None


@pytest.mark.parametrize("name, text", [
    ("wide.sq", ".data\nx: .zero 2000\n.code\nsubleq x, x\nhalt\n"),
    ("wide.vsq", "subleq x, x\nhalt\nx: .zero 2000\n")])
def test_trace_refuses_pictures_that_cannot_fit_in_memory(name, text, capsys, tmp_path,
                                                          monkeypatch):
    """64 MiB hold X at n = 2,000 but not its n x n attention maps (4 million entries a
    head)."""
    import vm.transformer.memory
    monkeypatch.setattr(vm.transformer.memory, "free_memory", lambda device: 64 << 20)
    (tmp_path / name).write_text(text)
    refused(["trace", str(tmp_path / name), "--png", str(tmp_path / "pictures")], capsys,
            "attention maps), more than")
    assert [p.name for p in tmp_path.iterdir()] == [name]


@pytest.mark.parametrize("attention", ["masked", "dense"])
def test_export_refuses_weights_larger_than_the_free_space(attention, capsys, tmp_path,
                                                           monkeypatch):
    import collections

    import vm.runtime.export
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(vm.runtime.export.shutil, "disk_usage",
                        lambda path: usage(1 << 40, 1 << 40, 4096))
    refused(["export", FACTORIAL, "-o", str(tmp_path / "out"), "--attention", attention],
            capsys, "more than the 0.0 GiB free there")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["commands.csv", "program.json"])
def test_asm_refuses_x_where_export_csv_writes(name, capsys, tmp_path):
    refused(["asm", FACTORIAL, "-o", str(tmp_path / name), "--export-csv", str(tmp_path)],
            capsys, "is one of the files --export-csv writes")
    assert not list(tmp_path.iterdir())
