"""`.dec` images through the command line: run, compare, asm, --input, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vm.cli import main
from vm.common.errors import InputError
from vm.isa import VSUBLEQ, for_path

PROGRAMS = Path(__file__).resolve().parents[1] / "programs" / "vsubleq"
HELLO, ECHO, SUM = (str(PROGRAMS / name) for name in ("hello.dec", "echo.dec", "array_sum.dec"))


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_dec_files_belong_to_standard_subleq() -> None:
    assert for_path("x.dec") is VSUBLEQ


def test_reference_run_prints_the_output_stream(capsys) -> None:
    code, out, _ = run_cli(capsys, "run", "--engine", "reference", HELLO)
    assert code == 0
    assert 'output: "Hello, world!\\n"' in out


def test_reference_run_reads_input(capsys) -> None:
    code, out, _ = run_cli(capsys, "run", "--engine", "reference", "--json", "--bits", "8",
                           "--input", "abc", ECHO)
    payload = json.loads(out)
    assert code == 0 and payload["output"] == "abc" and payload["halted"]


@pytest.mark.parametrize("engine", ["reference", "transformer"])
def test_text_output_reads_back_the_utf8_input(capsys, engine: str) -> None:
    """--input writes UTF-8, and the output was read as Latin-1: echoing 'héllo €' printed
    "h\\u00c3\\u00a9llo \\u00e2\\u0082\\u00ac", which JSON reads as 'hÃ©llo â\x82¬'."""
    text = "héllo €"
    code, out, _ = run_cli(capsys, "run", "--engine", engine, "--json", "--input", text, ECHO)
    assert code == 0 and json.loads(out)["output"] == text
    code, out, _ = run_cli(capsys, "run", "--engine", engine, "--input", text, ECHO)
    assert code == 0 and f"output: {json.dumps(text)}" in out.splitlines()


@pytest.mark.parametrize("output_format, shown", [
    ("decimal", lambda data: " ".join(str(byte) for byte in data)),
    ("hex", lambda data: data.hex(" ")),
])
def test_output_format_shows_the_byte_values(capsys, output_format: str, shown) -> None:
    data = "Hello, world!\n".encode()
    code, out, _ = run_cli(capsys, "run", "--engine", "reference", "--output-format",
                           output_format, HELLO)
    assert code == 0 and f"output: {shown(data)}" in out.splitlines()
    code, out, _ = run_cli(capsys, "run", "--engine", "reference", "--json",
                           "--output-format", output_format, HELLO)
    assert json.loads(out)["output"] == list(data)


@pytest.mark.parametrize("bits", ["8", "16"])
def test_transformer_run_and_compare_agree_with_the_sum(capsys, bits: str) -> None:
    code, out, _ = run_cli(capsys, "run", "--json", "--bits", bits, SUM)
    assert code == 0 and json.loads(out)["memory"]["mem"][23] == 24
    code, out, _ = run_cli(capsys, "compare", "--bits", bits, SUM)
    assert code == 0 and out.startswith("OK: transformer and reference agree for 21 steps")


def test_transformer_trace_names_every_step(capsys) -> None:
    code, out, _ = run_cli(capsys, "run", "--trace", "--bits", "8", SUM)
    lines = [line for line in out.splitlines() if " pc " in line]
    assert code == 0 and len(lines) == 21
    assert "mem[22] = 0 - mem[24] = -3  jump -> 3" in lines[0] and lines[-1].endswith("halt")


def test_the_trace_names_the_words_used_not_the_raw_operands(capsys, tmp_path) -> None:
    """Operands are taken mod the memory size m = 8: b = 100 writes word 4, which the trace
    named mem[100]."""
    image = tmp_path / "wrap.dec"
    image.write_text("5 100 3\n-1 -1 -1\n7 9\n")
    code, out, _ = run_cli(capsys, "run", "--trace", "--bits", "8", str(image))
    assert code == 0 and "mem[4] = -1 - mem[5] = 0  jump -> 3" in out.splitlines()[0]


def test_asm_lists_the_words(capsys) -> None:
    code, out, _ = run_cli(capsys, "asm", "--listing", SUM)
    assert code == 0 and "memory 32" in out and "     0: 24 22 3" in out


@pytest.mark.parametrize("text", ["", "x", "tape me"])
def test_transformer_prints_the_reference_output_line(capsys, text: str) -> None:
    lines = []
    for engine in ("reference", "transformer"):
        code, out, _ = run_cli(capsys, "run", "--engine", engine, "--input", text, ECHO)
        assert code == 0
        lines.append([line for line in out.splitlines() if line.startswith("output:")])
    assert lines[0] == lines[1] == ([f"output: {json.dumps(text)}"] if text else [])


@pytest.mark.parametrize("argv, message", [
    (["run", "--max-output", "5", HELLO], "output tape (5 bytes) is full"),
    (["run", "--max-output", "1", HELLO], "output tape (1 byte) is full"),  # was '1 bytes'
    (["run", "--max-output", "5", str(PROGRAMS.parent / "subleq" / "gcd.sq")],
     "--max-output applies to standard SUBLEQ images"),
    (["run", "--scratch", "2", SUM], "do not apply to standard SUBLEQ images"),
    (["run", "--output-format", "hex", str(PROGRAMS.parent / "subleq" / "gcd.sq")],
     "--output-format applies to standard SUBLEQ images"),
    (["run", "--bits", "5", SUM], "outside the 5-bit range"),
])
def test_refusals_are_one_message_and_exit_2(capsys, argv: list[str], message: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_bad_token_is_located(capsys, tmp_path) -> None:
    bad = tmp_path / "bad.dec"
    bad.write_text("1 2 3\n4 five\n")
    code, _, err = run_cli(capsys, "run", str(bad))
    assert code == 2 and f"{bad}:2:3: error: 'five' is not a decimal word" in err


def test_export_runs_on_an_independent_numpy_executor(capsys, tmp_path) -> None:
    from tests.export_executor import eq1_pass, load_export, subleq_memory
    from vm.machines.vsubleq.reference import Image, run_reference
    from assembler.dec import load_image

    assert run_cli(capsys, "export", "--bits", "8", SUM, "-o", str(tmp_path / "x"))[0] == 0
    weights, meta, layout, X = load_export(tmp_path / "x")
    halted = layout["fields"][layout["halted_field"]][0]
    passes = 0
    while X[halted, layout["pc_column"]] < 0.5 and passes < 100:
        X, passes = eq1_pass(weights, meta, X), passes + 1
    expected = run_reference(Image.from_words(load_image(Path(SUM).read_text()), 8), 100)
    assert passes == expected.steps and subleq_memory(X, layout) == expected.memory



def steps_on_the_reference(capsys, *argv: str) -> int:
    code, out, _ = run_cli(capsys, "run", "--engine", "reference", "--json", *argv)
    assert code == 0
    return json.loads(out)["steps"]


@pytest.mark.parametrize("text", ["", "e", "echo me"])
def test_compare_feeds_input_to_both_engines(capsys, text: str) -> None:
    steps = steps_on_the_reference(capsys, "--input", text, ECHO)
    code, out, _ = run_cli(capsys, "compare", "--input", text, ECHO)
    assert code == 0 and out.startswith(f"OK: transformer and reference agree for {steps} "
                                        f"steps (halted)")


def test_compare_reads_raw_bytes_from_an_input_file(capsys, tmp_path) -> None:
    data = tmp_path / "in.bin"
    data.write_bytes(b"a\x00\x7f\x80\xffz")
    steps = steps_on_the_reference(capsys, "--input-file", str(data), ECHO)
    code, out, _ = run_cli(capsys, "compare", "--json", "--input-file", str(data), ECHO)
    assert code == 0 and json.loads(out) == {"ok": True, "steps": steps, "halted": True,
                                             "divergence": None}
    code, out, _ = run_cli(capsys, "run", "--json", "--input-file", str(data), ECHO)
    shown = json.loads(out)["output"]  # 0x80 and 0xff are no UTF-8 text: lone surrogates
    assert code == 0 and shown == "a\x00\x7f\udc80\udcffz"
    assert shown.encode("utf-8", "surrogateescape") == data.read_bytes()


@pytest.mark.parametrize("argv, message", [
    (["compare", "--input-file", "/nonexistent/in", ECHO], "cannot read /nonexistent/in"),
    (["compare", "--input", "x", str(PROGRAMS.parent / "subleq" / "gcd.sq")],
     "--input and --input-file apply to programs that read input"),
    (["compare", "--max-output", "3", HELLO], "output tape (3 bytes) is full"),
])
def test_compare_input_refusals_exit_2(capsys, argv: list[str], message: str) -> None:
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_input_and_input_file_exclude_each_other(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "--input", "x", "--input-file", ECHO, ECHO])
    assert exit_.value.code == 2 and "not allowed with" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "compare"])
def test_checked_mode_stops_a_too_cold_run_and_passes_at_the_default(capsys,
                                                                      command: str) -> None:
    code, out, err = run_cli(capsys, command, "--checked", "--temperature", "1", "--input",
                             "hi", ECHO)
    assert code == 1 and "precision error at step 0" in err and "output:" not in out
    code, out, _ = run_cli(capsys, command, "--checked", "--input", "hi", ECHO)
    assert code == 0
    assert ('output: "hi"' in out) if command == "run" else out.startswith("OK:")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_an_endless_input_file_is_refused_not_read_forever(capsys) -> None:
    code, _, err = run_cli(capsys, "run", "--engine", "reference", "--input-file", "/dev/zero",
                           ECHO)
    assert code == 2 and "input longer than 16,777,216 bytes" in err and "Traceback" not in err


def _echo():
    from vm.isa import ProgramOptions
    return VSUBLEQ.load(Path(ECHO), ProgramOptions(bits=8))


@pytest.mark.parametrize("call, message", [
    (lambda i, g, c: VSUBLEQ.run_reference(i, 100, input_bytes="hi"), "input_bytes must be bytes"),
    (lambda i, g, c: VSUBLEQ.run_reference(i, 100, input_bytes=None), "input_bytes must be bytes"),
    (lambda i, g, c: VSUBLEQ.run_transformer(i, g, 100, c, input_bytes="hi"),
     "input_bytes must be bytes"),
    (lambda i, g, c: VSUBLEQ.compare(i, g, 100, c, input_bytes=[300]), "input_bytes must be bytes"),
    (lambda i, g, c: VSUBLEQ.run_transformer(i, g, 100, c, max_output=1.5), "max_output"),
    (lambda i, g, c: VSUBLEQ.run_transformer(i, g, 100, None), "config must be an EngineConfig"),
    (lambda i, g, c: VSUBLEQ.run_transformer(i, g, 100, c, 5), "progress must be a function"),
    (lambda i, g, c: VSUBLEQ.compare(i, g, 100, c, 5), "progress must be a function"),
    (lambda i, g, c: VSUBLEQ.result_lines(VSUBLEQ.run_reference(i, 100, input_bytes=b"a"),
                                          "binary"), "output_format must be one of")])
def test_arguments_of_the_wrong_kind_are_refused_by_name(call, message) -> None:
    """A str input failed with "string argument without an encoding", [300] with "bytes must
    be in range(0, 256)", max_output=1.5 with "no attribute 'bit_length'", config=None on
    `.sampling`; output_format "binary" printed hex; progress=5 failed after the first pass
    with "'int' object is not callable"."""
    from vm.common.errors import InputError
    from vm.runtime.config import EngineConfig
    image, geometry = _echo()
    with pytest.raises(InputError, match=message):
        call(image, geometry, EngineConfig())


@pytest.mark.parametrize("bits, message", [
    (0, "--bits must be between 2 and 64, got 0"), ("8", "bits must be an integer, got '8'"),
    (8.0, "bits must be an integer, got 8.0"), (True, "bits must be an integer, got True")])
def test_loading_an_image_refuses_what_is_no_word_size(bits, message: str) -> None:
    """A .dec image took bits=0 as the default 16 (a .vsq refused it), and '8' or 8.0 failed
    with TypeErrors."""
    from vm.common.errors import InputError
    from vm.isa import ProgramOptions
    with pytest.raises(InputError, match=message):
        VSUBLEQ.load(Path(ECHO), ProgramOptions(bits=bits))


def test_named_memory_refuses_a_memory_of_another_size() -> None:
    """Any list was shown as the image's memory, None failed with a TypeError."""
    image = VSUBLEQ.assemble_file(HELLO)
    with pytest.raises(InputError, match=f"memory holds 2 words, the program has {image.size}"):
        VSUBLEQ.named_memory(image, [1, 2])


def test_a_numpy_tape_length_runs_as_an_int() -> None:
    """max_output=np.int64(4) passed the check and failed with "'numpy.int64' object has no
    attribute 'bit_length'" in the geometry."""
    import numpy as np
    from vm.runtime.config import EngineConfig
    image, geometry = _echo()
    run = VSUBLEQ.run_transformer(image, geometry, 50, EngineConfig(), input_bytes=b"ab",
                                  max_output=np.int64(4))
    assert run.output == b"ab"
    assert VSUBLEQ.compare(image, geometry, 50, EngineConfig(), input_bytes=b"ab",
                           max_output=np.int64(4)).ok
