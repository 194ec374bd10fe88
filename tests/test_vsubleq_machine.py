"""The standard SUBLEQ transformer against its reference, after every step."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assembler.dec import load_image
from tests.strategies import vsubleq_images
from tests.test_vsubleq_programs import calc_output
from vm.common.errors import InputError, PrecisionError
from vm.machines.vsubleq.layout import VGeometry
from vm.machines.vsubleq.reference import Image, run_reference
from vm.machines.vsubleq import run as vsubleq_run
from vm.machines.vsubleq.run import TransformerRun, compare, run_transformer

PROGRAMS = Path(__file__).resolve().parents[1] / "programs" / "vsubleq"

HAND_WRITTEN = {
    "wrap then halt with a write": [6, 7, -1, 4, 4, -1, 1, -128],
    "fall off the end, wrapped fetch": [7, 7, 6, 0, 0, 0, 7, 4],
    # 0 jumps to 5 = m - 3, whose positive result falls through to 8 = m: halt
    "fall off from m - 3": [7, 7, 5, 0, 0, 3, 6, 0],
    # 0 and 3 subtract 6 from word 2, the c of 0: the third pass jumps to the patched -3
    "patch own jump target": [6, 2, 9, 6, 2, 0, 6, 0],
    # 3 moves the b of 0 down one word; 0's second pass so rewrites the halt's target
    "retarget a write by rewriting code": [13, 12, 9, 13, 1, 6, 14, 14, 0, 14, 14, -1, 3, 1,
                                           0, 0],
}


def image_file(name: str, bits: int) -> Image:
    return Image.from_words(load_image((PROGRAMS / name).read_text()), bits)


@pytest.mark.parametrize("bits", [8, 16, 32])
def test_array_sum_matches_after_every_step(bits: int) -> None:
    result = compare(image_file("array_sum.dec", bits), 200)
    assert result.ok and result.halted, result.divergence
    assert run_transformer(image_file("array_sum.dec", bits), 200).memory[23] == 24


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
def test_hand_written_images_match(name: str, bits: int) -> None:
    image = Image.from_words(HAND_WRITTEN[name], bits)
    expected = run_reference(image, 50)
    result = compare(image, 50)
    assert result.ok, result.divergence
    assert result.halted == expected.halted


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([8, 16]).flatmap(lambda bits: vsubleq_images(bits)))
def test_random_images_match(image: Image) -> None:
    result = compare(image, 30)
    assert result.ok, result.divergence


def test_a_halted_machine_stays_put() -> None:
    run = TransformerRun(Image.from_words(HAND_WRITTEN["wrap then halt with a write"], 8))
    for _ in range(2):
        run.step()
    halted = run.state()
    for _ in range(3):
        run.step()
    assert halted.halted and run.state() == halted


def test_a_machine_halted_after_output_keeps_its_tapes() -> None:
    run = TransformerRun(Image.from_words(IO_HAND_WRITTEN["output then fall off"], 8),
                         input_bytes=b"q", max_output=4)
    for _ in range(2):
        run.step()
    halted = run.state()
    for _ in range(3):
        run.step()
    assert halted.halted and halted.output == b"\x00" and run.state() == halted


IO_HAND_WRITTEN = {
    # three reads into 9 (the last ones past a short input read -1), then print 9 twice
    "reads past the end of input": [-1, 9, 3, -1, 9, 6, 9, -1, -1, 0, 0, 0, 0, 0, 0, 0],
    # a = b = -1 is an input into the last word, which the output then prints
    "input into the last word": [-1, -1, 3, 7, -1, -2, 0, 15, 0, 0, 0, 0, 0, 0, 0, 0],
    # an output at m - 3 falls off the end after writing
    "output then fall off": [7, 7, 5, 0, 0, 7, -1, 0],
}
INPUTS = [b"", b"a", b"hi!", b"\x00\x7f\x80\xff", b"Hello, tape"]


def assert_io_lockstep(image: Image, input_bytes: bytes, steps: int) -> None:
    """Memory, pc, halted, bytes read and output equal after every step; same output."""
    result = compare(image, steps, input_bytes=input_bytes, max_output=32)
    assert result.ok, result.divergence
    expected = run_reference(image, steps, input_bytes)
    assert result.halted == expected.halted
    got = run_transformer(image, steps, input_bytes=input_bytes, max_output=32)
    assert (got.output, got.memory, got.pc) == (expected.output, expected.memory, expected.pc)


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("input_bytes", INPUTS)
def test_echo_copies_its_input_on_both_engines(input_bytes: bytes, bits: int) -> None:
    image = image_file("echo.dec", bits)
    assert_io_lockstep(image, input_bytes, 200)
    stops = input_bytes.index(0xFF) if bits == 8 and 0xFF in input_bytes else None
    assert run_transformer(image, 200, input_bytes=input_bytes).output == input_bytes[:stops]


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("input_bytes", [b"", b"ignored"])
def test_hello_prints_on_both_engines(input_bytes: bytes, bits: int) -> None:
    image = image_file("hello.dec", bits)
    assert_io_lockstep(image, input_bytes, 200)
    assert run_transformer(image, 200, input_bytes=input_bytes).output == b"Hello, world!\n"


@pytest.mark.parametrize("name", sorted(IO_HAND_WRITTEN))
@pytest.mark.parametrize("input_bytes", [b"", b"z", b"xyz"])
def test_hand_written_io_matches(name: str, input_bytes: bytes) -> None:
    assert_io_lockstep(Image.from_words(IO_HAND_WRITTEN[name], 8), input_bytes, 20)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([8, 16]).flatmap(lambda bits: vsubleq_images(bits, io=True)),
       st.binary(max_size=4))
def test_random_io_images_match(image: Image, input_bytes: bytes) -> None:
    result = compare(image, 30, input_bytes=input_bytes, max_output=32)
    assert result.ok, result.divergence


def test_a_full_output_tape_stops_with_one_message() -> None:
    image = image_file("hello.dec", 8)
    assert run_transformer(image, 200, max_output=14).output == b"Hello, world!\n"
    with pytest.raises(InputError, match=r"output tape \(13 bytes\) is full"):
        run_transformer(image, 200, max_output=13)
    with pytest.raises(InputError, match="is full"):
        compare(image, 200, max_output=0)


def test_the_default_output_tape_holds_what_the_run_writes_and_no_more() -> None:
    hello = image_file("hello.dec", 8)
    assert TransformerRun(hello).geometry.outputs == len(b"Hello, world!\n")
    assert TransformerRun(hello, max_output=3).geometry.outputs == 3
    assert run_transformer(hello, 200).output == b"Hello, world!\n"
    # a step limit that stops the run early needs only the bytes written before it
    assert run_transformer(hello, 8).output == b"He"
    echo = image_file("echo.dec", 8)
    assert TransformerRun(echo, input_bytes=b"abc").geometry.outputs == 3
    assert compare(echo, 100, input_bytes=b"abc").ok
    silent = Image.from_words(HAND_WRITTEN["patch own jump target"], 8)
    assert TransformerRun(silent).geometry.outputs == 0


def test_geometry_refuses_bad_sizes() -> None:
    with pytest.raises(InputError, match="power of two"):
        VGeometry(12, 8)
    with pytest.raises(InputError, match="cannot address"):
        VGeometry(256, 8)
    with pytest.raises(InputError, match="tapes"):
        VGeometry(16, 8, -1, 4)


@pytest.mark.parametrize("fields, message", [
    ((16.0, 8), "memory must be a whole number, got 16.0"),
    ((16, 8.5), "bits must be a whole number, got 8.5"),
    ((16, 8, "3"), "inputs must be a whole number, got '3'"),
    ((16, 8, 0, True), "outputs must be a whole number, got True"),
])
def test_geometry_refuses_sizes_that_are_no_whole_numbers(fields, message: str) -> None:
    """VGeometry(16, 8.5) was a geometry; '3' and 16.0 failed in comparisons."""
    with pytest.raises(InputError, match=message):
        VGeometry(*fields)


ECHO_WORDS = [-1, 18, 3, 19, 19, 6, 18, 19, 12, 20, 20, -1, 18, -1, 15, 20, 20, 0]


@pytest.mark.parametrize("engine", [
    lambda image, **options: run_transformer(image, 100, **options),
    lambda image, **options: compare(image, 100, **options),
    lambda image, **options: TransformerRun(image, **options),
])
@pytest.mark.parametrize("options, message", [
    ({"input_bytes": "hi"}, "input_bytes must be bytes"),
    ({"input_bytes": [300]}, "input_bytes must be bytes"),
    ({"max_output": 1.5}, "max_output must be a whole number"),
    ({"max_output": True}, "max_output must be a whole number"),
    ({"device": "tpu"}, "unknown device 'tpu'"),
    ({"device": "cpu:5"}, "one CPU device"),
    ({"attention": "sparse"}, "attention must be one of dense, masked"),
    ({"checked": "yes"}, "checked must be None, True or False"),
])
def test_runs_refuse_bad_arguments_by_name(engine, options: dict, message: str) -> None:
    """The module's runs took them unchecked: a str input failed with "string argument
    without an encoding", 1.5 bytes on a missing bit_length, True as a 1-byte tape, 'tpu'
    in torch after the sizing run, 'sparse' with a ValueError, 'yes' as checked."""
    with pytest.raises(InputError, match=message):
        engine(Image.from_words(ECHO_WORDS, 8), **options)


@pytest.mark.parametrize("engine", [run_transformer, compare])
@pytest.mark.parametrize("max_steps", [-1, 1.5, None])
def test_runs_refuse_a_step_limit_that_is_no_count(engine, max_steps) -> None:
    """run_transformer(image, 1.5, max_output=0) ran two steps; compare(image, -1) compared
    nothing and reported agreement."""
    with pytest.raises(InputError, match="max_steps must be a whole number"):
        engine(Image.from_words(ECHO_WORDS, 8), max_steps, max_output=0)


@pytest.mark.parametrize("run", [lambda image: run_transformer(image, 10, max_output=0),
                                 lambda image: compare(image, 10, max_output=0),
                                 lambda image: run_reference(image, 10)])
def test_runs_refuse_what_is_no_image(run) -> None:
    """None failed on a missing `.size` or `.memory`."""
    with pytest.raises(InputError, match="takes an Image"):
        run(None)


def test_the_default_tape_of_an_image_that_writes_on_and_on_fits_the_column_limit(
        tmp_path, capsys) -> None:
    """16,385 words (a 2^15-word memory) that write forever: the default tape, what 100,000
    steps write (50,000 bytes), made the geometry too wide, and loading the image failed in
    every command (`ltvm run --engine reference --max-steps 10` included)."""
    from vm.cli import main
    from vm.machines.vsubleq.layout import MAX_COLUMNS
    from vm.machines.vsubleq.punchcard import geometry_for

    words = [9, -1, 3, 10, 10, 0, 0, 0, 0, 65, 0]  # output mem[9] ('A'), then jump to 0
    image = Image.from_words(words + [0] * (16385 - len(words)), 16)
    geometry = geometry_for(image)
    assert geometry.columns == MAX_COLUMNS and geometry.outputs == MAX_COLUMNS - 2 - 32768
    path = tmp_path / "writer.dec"
    path.write_text(" ".join(map(str, image.memory[:16385])))
    assert main(["run", "--engine", "reference", str(path), "--bits", "16",
                 "--max-steps", "10"]) == 1, "loaded, ran 10 steps and did not halt"
    assert 'output: "AAAAA"\nhalted: no\nsteps: 10' in capsys.readouterr().out


# -- checked mode ----------------------------------------------------------------------
def test_checked_mode_turns_itself_on_below_the_safe_temperature() -> None:
    image = image_file("echo.dec", 8)
    assert TransformerRun(image).checker is None
    assert TransformerRun(image, checked=True).checker is not None
    assert TransformerRun(image, temperature=3.0).checker is not None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_checked_mode_reports_or_is_exact_never_wrong(dtype: str) -> None:
    """Cold temperatures blur every read: unchecked, the run goes wrong; checked, it stops
    with a PrecisionError, or (warm enough) agrees with the reference at every step."""
    image, data = image_file("echo.dec", 8), b"a\x00\xff"
    stopped = 0
    for temperature in (0.5, 1.0, 1.25, 1.5, 2.0, 3.0, None):
        try:
            result = compare(image, 200, dtype, temperature=temperature, input_bytes=data,
                             max_output=4, checked=True)
        except PrecisionError as error:
            stopped += 1
            assert error.step == 0 and error.field == "wa"
            continue
        assert result.ok and result.halted, (temperature, result.divergence)
    assert stopped >= 2
    wrong = compare(image, 200, dtype, temperature=1.0, input_bytes=data, max_output=4,
                    checked=False)
    assert not wrong.ok


def test_checked_mode_sees_state_that_a_pass_does_not_repair() -> None:
    """A position code is never rewritten: one nudged off its punchcard value is reported
    after the pass (at its column), though every read of that pass stays clean."""
    run = TransformerRun(image_file("array_sum.dec", 8), checked=True)
    run.step()
    run.X[run.machine.layout.row("pos"), 0, 7] *= 0.99
    with pytest.raises(PrecisionError, match="step 1, layer 4, column 7, field 'pos'"):
        run.step()


def test_checked_run_of_an_image_without_output_has_no_output_columns_to_check():
    image = Image.from_words([7, 7, 3, 7, 7, -1, 0, 0], 8)
    run = TransformerRun(image, checked=True)
    assert run.geometry.outputs == 0
    assert run_transformer(image, 10, checked=True).memory == run_reference(image, 10).memory


PROGRAM_OUTPUTS = {
    "hello.vsq": lambda data: b"Hello, world!\n",
    "echo.vsq": lambda data: data,
    "print_number.vsq": lambda data: str(1203).encode(),
    "array_sum.vsq": lambda data: b"",
    "reverse.vsq": lambda data: b"",
    "sort.vsq": lambda data: bytes(sorted(b"transformer")),
    "calc.vsq": lambda data: calc_output(data, 16),  # not a line A op B: "error" at any N
}
"""What each program in programs/vsubleq writes, from its specification (input: `data`)."""


def test_every_program_has_its_expected_output() -> None:
    assert sorted(PROGRAM_OUTPUTS) == sorted(path.name for path in PROGRAMS.glob("*.vsq"))


@pytest.mark.parametrize("bits", [8, 16, 32])
@pytest.mark.parametrize("name", sorted(PROGRAM_OUTPUTS))
def test_programs_agree_after_every_step_at_each_word_size(name: str, bits: int) -> None:
    from assembler.vsq import assemble
    path = PROGRAMS / name
    try:
        program = assemble(path.read_text(), str(path), bits)
    except InputError:
        assert bits == 8 and name in ("print_number.vsq", "calc.vsq"), \
            "only 1203 and calc's 1024 words need more than 8 bits"
        return
    image = Image.from_words(program.words, program.bits, str(path))
    data = b"ab\n"
    result = compare(image, 5000, input_bytes=data)
    assert result.ok and result.halted
    assert run_reference(image, 5000, data).output == PROGRAM_OUTPUTS[name](data)


class _Stop(Exception):
    pass


@pytest.mark.parametrize("entry", [run_transformer, compare])
def test_the_output_tape_sizing_run_reports_its_progress(entry, monkeypatch) -> None:
    """The reference run that sizes the default tape went without progress, so --max-seconds
    could not stop 'run loop.dec --max-steps 30000000' (60 s in silence)."""
    loop = Image.from_words([9, 9, 3, 9, 9, 0, 0, 0, 0, 1], bits=8)

    def progress(count: int) -> None:
        raise _Stop

    def built_first(*args, **kwargs):
        raise AssertionError("the transformer was built before the sizing run reported")
    monkeypatch.setattr(vsubleq_run, "TransformerRun", built_first)
    with pytest.raises(_Stop):
        entry(loop, 10 ** 6, progress=progress)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_state_decoded_from_a_view_of_x_is_that_of_a_float64_copy(dtype):
    """`state()` decodes X in place (a float64 copy of a 60,000-column card was half of each
    REPL step): part-way through echoing input, memory, pc, pointer and output are those of
    the copy."""
    import numpy as np

    from vm.transformer.layers import from_internal

    run = TransformerRun(image_file("echo.dec", 8), input_bytes=b"hi!", max_output=8,
                         dtype=dtype)
    outputs = []
    for steps in (0, 7, 5, 20):
        run.advance(steps)
        copy = from_internal(run.X)[0].double().cpu().numpy().copy()
        assert run.state() == run.machine.decode_state(np.asarray(copy))
        outputs.append(run.state().output)
    assert outputs[0] == b"" and b"" < outputs[1] < outputs[2] < outputs[3] == b"hi!"
