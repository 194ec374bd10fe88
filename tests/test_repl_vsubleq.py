"""`ltvm repl IMAGE`: standard SUBLEQ images stepped on both engines, input fed while they
run, the output tape grown when it runs full."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from assembler.dec import load_image
from vm.machines.vsubleq.reference import Image, Reference, run_reference
from vm.machines.vsubleq.run import TransformerRun
from vm.repl import vsubleq
from vm.repl.vsubleq import VsubleqRepl

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "programs" / "vsubleq"


def image(name: str, bits: int = 8) -> Image:
    return Image.from_words(load_image((PROGRAMS / name).read_text()), bits)


def test_input_fed_before_the_read_is_echoed_and_the_engines_agree():
    repl = VsubleqRepl(image("echo.dec"), "echo.dec")
    assert "fed 3 bytes (3 not read yet)" in repl.execute("input hi\\n")
    out = repl.execute("step 2")
    assert out.splitlines()[0].split()[:5] == ["0", "pc", "0", "mem[18]", "="]
    assert "input 104" in out and "DIVERGENCE" not in out
    out = repl.execute("continue")
    assert "(halted)" in out and "DIVERGENCE" not in out
    assert repl.execute("output") == "output (3 bytes): 'hi\\n'"
    expected = run_reference(image("echo.dec"), 1000, b"hi\n")
    assert repl.reference.steps == expected.steps
    assert repl.execute("print 18:21") == "    18: " + " ".join(
        str(word) for word in expected.memory[18:21])


def test_input_fed_between_reads_is_read_where_end_of_input_was():
    repl = VsubleqRepl(image("echo.dec"), "echo.dec")
    repl.execute("input a")
    out = repl.execute("step 5")  # read 'a', write it, back at 0
    assert "output: 'a'" in out and "step 5  pc 0:" in out
    repl.execute("input b")
    out = repl.execute("continue")
    assert "output: 'b'" in out and "(halted)" in out and "DIVERGENCE" not in out
    assert repl.run.state().output == b"ab"


def test_a_full_output_tape_grows_instead_of_stopping(monkeypatch):
    monkeypatch.setattr(vsubleq, "OUTPUT_SLACK", 2)
    repl = VsubleqRepl(image("hello.dec"), "hello.dec")
    assert repl.run.geometry.outputs == 2
    out = repl.execute("continue")
    assert "DIVERGENCE" not in out and "(halted)" in out
    assert repl.run.state().output == b"Hello, world!\n"
    assert repl.run.geometry.outputs >= 14


def test_the_summary_shows_a_path_with_a_control_character_escaped():
    """`ltvm repl` printed the image's path as it was: ESC [31m in a file name turned the
    terminal red."""
    repl = VsubleqRepl(image("echo.dec"), "/tmp/e\x1b[31m.dec")
    assert repl.summary().startswith("loaded '/tmp/e\\x1b[31m.dec': ")


def test_a_tape_that_cannot_grow_past_the_column_limit_stops_before_the_step(monkeypatch):
    """It said 'the tapes must have 0 or more bytes and all columns at most ...', and the
    transformer kept the pass that found the tape full, halted, for whatever came next."""
    import vm.machines.vsubleq.layout

    monkeypatch.setattr(vm.machines.vsubleq.layout, "MAX_COLUMNS", 200)
    monkeypatch.setattr(vsubleq, "MAX_COLUMNS", 200)
    writer = Image.from_words([9, -1, 3, 10, 10, 0, 0, 0, 0, 65, 0], 8)  # 'A' forever
    repl = VsubleqRepl(writer, "writer.dec")
    out = repl.execute("step 300").splitlines()
    assert out[-4] == ("error: the output tape is full (128 bytes) and cannot grow: the "
                       "transformer holds at most 200 columns; both engines stay before this "
                       "step")
    assert out[-1] == "step 256  pc 0: 9 -1 3"
    state = repl.run.state()
    assert (state.pc, state.halted, state.output) == (0, False, b"A" * 128)


@pytest.mark.parametrize("line, message", [
    ("step 0", "must be positive"), ("step x", "expected a number of steps"),
    ("print 99", "outside 0..31"), ("input", "nothing to feed"), ("jump", "unknown command"),
    ("print 5:2", "empty range 5:2"), ("print 5:5", "empty range"),
    ("input \\xZZ", "needs 2 hex digits"), ("input \\", "a lone '\\'"),
    ("input \\N{foo}", "unknown character name"), ("input \\777", "more than one byte"),
    ("input \\q", "unknown escape"), ("input \\uD800", "not a Unicode character"),
])
def test_bad_commands_get_one_error_line(line, message):
    out = VsubleqRepl(image("hello.dec"), "hello.dec").execute(line)
    assert out.startswith("error: ") and message in out and "\n" not in out


@pytest.mark.parametrize("line, fed", [("input  a b \n", b" a b "), ("input\t\tx\r\n", b"\tx"),
                                      ("input   ", b"  ")])
def test_input_feeds_its_spaces(line: str, fed: bytes):
    """The line was stripped: 'input  a b ' fed 'a b', and 'input   ' nothing at all."""
    repl = VsubleqRepl(image("echo.dec"), "echo.dec")
    assert f"fed {len(fed)} byte{'' if len(fed) == 1 else 's'}" in repl.execute(line)
    assert repl.fed == fed and repl.reference.input == fed
    repl.execute("continue")
    assert repl.run.state().output == fed


def test_a_tab_separates_a_command_from_its_argument():
    """'step<TAB>2' was the unknown command 'step<TAB>2'."""
    repl = VsubleqRepl(image("echo.dec"), "echo.dec")
    assert repl.execute("step\t2").endswith("step 2  pc 6: 18 19 12")


def test_a_bad_escape_leaves_the_session_going():
    repl = VsubleqRepl(image("echo.dec"), "echo.dec")
    assert repl.execute("input \\xZZ").startswith("error: ") and repl.fed == b""
    assert "fed 1 byte (1 not read yet)" in repl.execute("input a")  # was '1 bytes'
    repl.execute("continue")
    assert repl.execute("output") == "output (1 byte): 'a'"


@pytest.mark.parametrize("text, fed", [("é", "é".encode()), ("\\u20ac", "€".encode()),
                                       ("\\N{EURO SIGN}", "€".encode()), ("\\377", b"\xff"),
                                       ("a\\tb\\x00", b"a\tb\x00")])
def test_input_is_utf8_and_output_shows_it_back_in_the_same_escapes(text, fed):
    """Characters go in as UTF-8 (like `ltvm run --input`); `output` shows UTF-8 text, so
    'é' reads back as 'é' (it showed 'Ã©'), and what it shows feeds the same bytes again."""
    repl = VsubleqRepl(image("echo.dec", bits=16), "echo.dec")  # 8 bits: 0xff reads as -1
    repl.execute(f"input {text}")
    assert repl.fed == fed
    repl.execute("continue")
    shown = repl.execute("output").split(": ", 1)[1]
    assert repl.run.state().output == fed and vsubleq.unescape(shown[1:-1]) == fed
    if fed == "é".encode():
        assert shown == "'é'"


def test_ltvm_repl_takes_a_vsq_source_on_stdin():
    done = subprocess.run(
        [sys.executable, "-m", "vm.cli", "repl", str(PROGRAMS / "hello.vsq"), "--history",
         "/dev/null"], input="step 2\npc\ncontinue\noutput\nquit\n", capture_output=True,
        text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "loaded" in done.stdout and "output (14 bytes): 'Hello, world!\\n'" in done.stdout


def test_checked_repl_stops_a_pass_that_leaves_its_levels_and_agrees_when_warm():
    from vm.runtime.config import EngineConfig
    warm = VsubleqRepl(image("echo.dec"), "echo.dec", EngineConfig(checked=True))
    warm.execute("input hi")
    assert "(halted)" in warm.execute("continue") and warm.execute("output").endswith("'hi'")
    cold = VsubleqRepl(image("echo.dec"), "echo.dec",
                       EngineConfig(checked=True, temperature=1.0))
    cold.execute("input hi")
    assert "precision error at step 0" in cold.execute("step")


def test_input_too_long_for_the_tape_leaves_both_engines_as_they_were():
    """The transformer is rebuilt for the longer tape before the input is recorded: a tape
    past the column limit is refused without the reference having taken the bytes."""
    repl = VsubleqRepl(image("echo.dec"), "echo.dec")
    out = repl.execute("input " + "a" * 70_000)
    assert out.startswith("error:") and len(out.splitlines()) == 1
    assert repl.fed == b"" and repl.reference.input == b""
    repl.execute("input z")
    out = repl.execute("continue")
    assert "DIVERGENCE" not in out and "(halted)" in out
    assert repl.run.state().output == b"z"


def test_ctrl_c_after_the_transformers_pass_puts_both_engines_back_a_whole_step(monkeypatch):
    """The pass changes X in place: a Ctrl-C between it and the reference's step must not
    leave the transformer a step ahead (the next step would report a divergence)."""
    repl = VsubleqRepl(image("echo.dec"), "echo.dec")
    repl.execute("input hi")
    advance, calls = TransformerRun.advance, []

    def interrupted_on_the_fourth(run, count) -> int:
        made = advance(run, count)
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return made
    monkeypatch.setattr(TransformerRun, "advance", interrupted_on_the_fourth)
    out = repl.execute("step 10")
    assert "interrupted after 3 steps" in out and repl.reference.steps == 3
    assert repl.run.state().memory == repl.reference.memory
    monkeypatch.setattr(TransformerRun, "advance", advance)
    out = repl.execute("continue")
    assert "DIVERGENCE" not in out and "(halted)" in out
    assert repl.run.state().output == b"hi"


def test_ctrl_c_in_the_references_step_leaves_it_where_it_was(monkeypatch):
    repl = VsubleqRepl(image("hello.dec"), "hello.dec")
    step, calls = Reference.step, []

    def interrupted_on_the_third(reference):
        calls.append(1)
        if len(calls) == 3:
            reference.memory[0] += 1  # part-way through the step
            raise KeyboardInterrupt
        return step(reference)
    monkeypatch.setattr(Reference, "step", interrupted_on_the_third)
    assert "interrupted after 2 steps" in repl.execute("continue")
    monkeypatch.setattr(Reference, "step", step)
    out = repl.execute("continue")
    assert "DIVERGENCE" not in out and repl.run.state().output == b"Hello, world!\n"


def test_continue_says_when_max_steps_stopped_it():
    loop = Image.from_words([3, 3, 0, 0], 8)  # subleq 3, 3, 0: back to 0 forever
    repl = VsubleqRepl(loop, "loop.dec", max_steps=5)
    out = repl.execute("continue")
    assert "--max-steps (5) steps without a halt" in out and repl.reference.steps == 5
    assert "without a halt" in repl.execute("continue") and repl.reference.steps == 10
    assert "without a halt" not in VsubleqRepl(image("hello.dec"), "hello.dec").execute("continue")


def test_a_carriage_return_inside_a_typed_line_is_escaped_not_a_cut():
    """'print 3\\r5' said "error: expected an address, got '3": the CR ended the line."""
    repl = VsubleqRepl(image("echo.dec"), "echo.dec")
    assert repl.execute("print 3\r5") == "error: expected an address, got '3\\r5'"


def test_an_error_line_echoing_a_huge_word_is_cut():
    repl = VsubleqRepl(image("hello.dec"), "hello.dec")
    out = repl.execute("y" * 2_000_000)
    assert out.startswith("error: unknown command 'yyy") and len(out) < 400
    out = repl.execute("print " + "9" * 100_000)
    assert out == "error: address about 10^100000 is outside 0..31"


@pytest.mark.parametrize("line, message", [
    ("step -" + "9" * 5000, "the number of steps must be positive, got about -10^5000"),
    ("print " + "9" * 5000, "address about 10^5000 is outside 0..31"),
    ("print 0:" + "9" * 5000, "address about 10^5000 is outside 0..32"),
])
def test_numbers_past_4300_digits_are_numbers_out_of_range(line, message):
    """int() converts at most 4,300 digits: 'print 999...' said "expected an address"."""
    assert VsubleqRepl(image("hello.dec"), "hello.dec").execute(line) == f"error: {message}"


def test_a_step_count_past_4300_digits_stops_at_max_steps():
    loop = Image.from_words([3, 3, 0, 0], 8)
    out = VsubleqRepl(loop, "loop.dec", max_steps=5).execute("step " + "9" * 5000)
    assert out.endswith("stopped after --max-steps (5) steps; step asked for about 10^5000")


def test_quit_takes_no_argument_as_in_the_sq_repl():
    repl = VsubleqRepl(image("hello.dec"), "hello.dec")
    assert repl.execute("quit now") == "error: 'quit' takes no argument" and not repl.finished
    assert repl.execute("quit") == "" and repl.finished


def test_commands_without_arguments_refuse_one_instead_of_ignoring_it():
    """'pc 5' (meant as 'print 5') printed the pc; 'continue 10' ran to the halt."""
    repl = VsubleqRepl(image("hello.dec"), "hello.dec")
    for command in ("pc 5", "where x", "output all", "help step", "continue 10"):
        name = command.split()[0]
        assert repl.execute(command) == f"error: '{name}' takes no argument", command
    assert repl.reference.steps == 0
    assert repl.execute("pc").startswith("step 0  pc 0")


@pytest.mark.parametrize("evaluation", ["full", "active", "fused"])
def test_the_session_steps_the_evaluation_asked_for_through_fed_input(evaluation):
    """The image REPL stepped the full pass whatever --evaluation said (42 steps/s with 5,000
    bytes fed to echo.vsq, against 709 fused). Feeding input rebuilds the transformer and
    loads the state reached into the X the evaluation is bound to: the engines must still
    agree at every step."""
    if evaluation == "fused":
        pytest.importorskip("numba")
    repl = VsubleqRepl(image("echo.dec"), "echo.dec", vsubleq.EngineConfig(evaluation=evaluation))
    assert repl.run.evaluation == evaluation
    repl.execute("input ab")
    out = repl.execute("step 9")
    repl.execute("input cd")
    out += repl.execute("continue")
    assert repl.run.evaluation == evaluation
    assert "DIVERGENCE" not in out and "(halted)" in out
    assert repl.run.state().output == b"abcd"


@pytest.mark.parametrize("arguments,message", [
    ((None, "x"), "runs an Image"), ((image("echo.dec"), "x", None), "EngineConfig"),
    ((image("echo.dec"), "x", vsubleq.EngineConfig(), None), "max_steps"),
    ((image("echo.dec"), "x", vsubleq.EngineConfig(), -1), "max_steps"),
    ((image("echo.dec"), "x", vsubleq.EngineConfig(sampling=0.5)), "sampling")])
def test_a_session_refuses_what_it_cannot_run(arguments, message):
    """max_steps=None raised a TypeError out of `continue` (the session ended), -1 made
    `continue` do nothing; an image or config of None failed on an attribute, and a sampling
    config was ignored."""
    with pytest.raises(vsubleq.InputError, match=message):
        VsubleqRepl(*arguments)


def test_a_huge_step_count_stops_at_max_steps(monkeypatch):
    """`step 10**20` on an image that never halts ran on past --max-steps until killed."""
    loop = Image.from_words([3, 3, 0, 0], 8)  # subleq 3, 3, 0: back to 0 forever
    repl = VsubleqRepl(loop, "loop.dec", max_steps=30)
    step = Reference.step

    def bounded(reference):
        assert reference.steps < 1000, "ran past --max-steps"
        return step(reference)
    monkeypatch.setattr(Reference, "step", bounded)
    out = repl.execute(f"step {10**20}")
    assert out.endswith("stopped after --max-steps (30) steps; step asked for "
                        "100,000,000,000,000,000,000") and repl.reference.steps == 30
    assert "... 10 more steps" in out
    assert "step asked" not in repl.execute("step 4") and repl.reference.steps == 34


@pytest.mark.parametrize("line,message", [
    ("step \u0663", "error: expected a number of steps, got '\u0663'"),
    ("print \u0661", "error: expected an address, got '\u0661'"),
    ("print 0:\uff12", "error: expected an address, got '\uff12'"),
    ("step 1_0", "error: expected a number of steps, got '1_0'"),
    ("print 1_0", "error: expected an address, got '1_0'")])
def test_numbers_in_other_scripts_digits_are_refused(line, message):
    """int() read Arabic-Indic and full-width digits, 'step ٣' ran 3 steps, and
    underscores: 'step 1_0' ran 10."""
    repl = VsubleqRepl(image("hello.dec"), "hello.dec")
    assert repl.execute(line) == message and repl.reference.steps == 0


@pytest.mark.parametrize("line", [None, 5, b"step"])
def test_a_line_that_is_no_string_is_an_error_line(line):
    """execute(None) raised an AttributeError out of the session, as the .sq REPL's did."""
    repl = VsubleqRepl(image("hello.dec"), "hello.dec")
    assert repl.execute(line) == f"error: a command line is a string, got {type(line).__name__}"
    assert repl.reference.steps == 0


@pytest.mark.parametrize("word", ["q", "exit"])
def test_q_and_exit_leave_as_in_the_sq_repl(word):
    """`exit` and `q` leave the .sq REPL; here they were unknown commands."""
    repl = VsubleqRepl(image("hello.dec"), "hello.dec")
    assert repl.execute(f"{word} now") == f"error: '{word}' takes no argument"
    assert repl.execute(word) == "" and repl.finished


def test_max_seconds_stops_an_image_that_never_halts():
    """`continue` and `step K` on an image that never halts had only --max-steps and Ctrl-C;
    --max-seconds now bounds each command's wall time, as in `ltvm run`."""
    loop = Image.from_words([3, 3, 0, 0], 8)  # subleq 3, 3, 0: back to 0 forever
    repl = VsubleqRepl(loop, "loop.dec", max_steps=10**12, max_seconds=0.5)
    for command in ("continue", f"step {10**11}"):
        out = repl.execute(command)
        assert re.search(r"^stopped by --max-seconds 0.5 after [\d,]+ steps, before the image "
                         r"halted$", out, re.MULTILINE), out
        assert "DIVERGENCE" not in out
    with pytest.raises(vsubleq.InputError, match="max_seconds"):
        VsubleqRepl(loop, "loop.dec", max_seconds=0)


@pytest.mark.parametrize("out", ["pictures", ""])
def test_ltvm_repl_of_an_image_refuses_out_which_it_would_ignore(out, capsys, tmp_path):
    """`ltvm repl hello.vsq --out DIR` started and drew nothing: the image REPL has no
    `show`, so the option was taken and silently ignored."""
    from vm.cli import main

    code = main(["repl", str(PROGRAMS / "hello.vsq"), "--out", str(tmp_path / out) if out
                 else "", "--history", "/dev/null"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("ltvm: error: --out") and "\n" == captured.err[-1]
    assert captured.err.count("\n") == 1 and not (tmp_path / "pictures").exists()


def test_a_sampling_config_is_refused_in_the_words_of_the_other_repl():
    """It said "sampling is not available for standard SUBLEQ images", where the .sq/.fleq
    REPL and compare say that they run the exact transformer and where sampling belongs."""
    with pytest.raises(vsubleq.InputError) as caught:
        VsubleqRepl(image("echo.dec"), "x", vsubleq.EngineConfig(sampling=0.5))
    assert str(caught.value) == ("the REPL runs the exact transformer, not stochastic reads "
                                 "(sampling=0.5): sampled runs are `ltvm sample`'s")


def test_feeding_input_builds_no_columns_by_columns_mask():
    """The machine for a long input tape holds no columns x columns attention mask: feeding
    60,000 bytes spent 7 s and 3.6 GB building one that nothing read."""
    import tracemalloc

    repl = VsubleqRepl(image("echo.dec"), "echo.dec")
    tracemalloc.start()
    try:
        repl.execute("input " + "a" * 20_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    columns = repl.run.geometry.columns
    assert columns > 20_000
    assert peak < columns ** 2 / 4
    assert "input 97" in repl.execute("step")


def test_the_image_repl_says_at_once_that_numba_has_not_compiled(capsys, monkeypatch):
    """The note that the fused pass went unused came when the session ended, hours after the
    slow steps it explains; it now comes when first warned, once, before the next command
    is read."""
    import io

    import vm.runtime.fused as fused_module
    from vm.cli import main
    pytest.importorskip("numba")
    monkeypatch.setattr(fused_module, "_has_machine_code", lambda kernel, arguments: False)
    before_the_next_command = []

    class Commands(io.StringIO):
        def readline(self, *args) -> str:
            line = super().readline(*args)
            if line == "quit\n":
                before_the_next_command.append(capsys.readouterr().err)
            return line

    monkeypatch.setattr(sys, "stdin", Commands("continue\ncontinue\nquit\n"))
    assert main(["repl", str(PROGRAMS / "hello.vsq"), "--history", "/dev/null"]) == 0
    said = before_the_next_command[0] + capsys.readouterr().err
    assert before_the_next_command[0].count("numba has not compiled the fused pass") == 1
    assert said.count("numba has not compiled the fused pass") == 1


def test_one_step_past_the_listed_ones_is_one_more_step():
    """'... 1 more steps' under the listed steps."""
    loop = Image.from_words([3, 3, 0, 0], 8)  # subleq 3, 3, 0: back to 0 forever
    out = VsubleqRepl(loop, "loop.dec", max_steps=1000).execute("step 21")
    assert "\n... 1 more step\n" in out
