"""The REPL: every command through `Repl.execute`, the lockstep state, the terminal loop,
and one session through a real pseudo-terminal."""

from __future__ import annotations

import errno
import io
import os
import re
import sys
from pathlib import Path

import pexpect
import pytest
import torch

import assembler.diagnostics
import vm.repl.session
import vm.repl.terminal
from vm.cli import main
from vm.runtime.executor import EngineConfig, TransformerExecutor
from vm.tools.progress import Progress
from vm.repl.session import COMMANDS, Repl
from vm.repl.terminal import interact

ROOT = Path(__file__).resolve().parents[1]
FACTORIAL = str(ROOT / "programs" / "subleq" / "factorial.sq")
COUNTDOWN = """\
.const START = 3
.data
x:      START
xs:     .array 4, 5, 6
one:    1
.code
loop:   subleq one, x, done
        goto loop
done:   halt
"""


@pytest.fixture
def repl(tmp_path) -> Repl:
    session = Repl(picture_dir=tmp_path / "pictures")
    assert session.execute(f"load {FACTORIAL}").startswith("loaded")
    return session


@pytest.fixture
def countdown(tmp_path) -> Repl:
    path = tmp_path / "countdown.sq"
    path.write_text(COUNTDOWN)
    session = Repl(picture_dir=tmp_path / "pictures")
    session.execute(f"load {path}")
    return session


def value(repl: Repl, name: str) -> str:
    return repl.execute(f"print {name}").split(" = ")[1]


def test_load_reports_the_program_and_errors_with_a_caret(tmp_path):
    """A source error shows its line and a caret, as `ltvm run` shows it (the REPL showed
    the first line alone)."""
    session = Repl()
    assert session.execute("step") == "error: no program loaded (load FILE)"
    out = session.execute(f"load {FACTORIAL}")
    assert "25 instructions, 10 memory cells, 16-bit words" in out
    assert out.endswith("step 0  pc 0  subleq n, t")
    bad = tmp_path / "bad.sq"
    bad.write_text(".data\nx: 1\n.code\nsubleq x, y\n")
    error = session.execute(f"load {bad}")
    assert error == f"{bad}:4:11: error: undefined name 'y'\n    subleq x, y\n{' ' * 14}^"
    assert session.execute(f"load {tmp_path / 'missing.sq'}").startswith("error: cannot read")
    assert session.execute("load") == "error: usage: load FILE"
    assert session.execute("load notes.txt") == \
        "error: notes.txt: the REPL runs SUBLEQ (.sq) and FLEQ (.fleq) sources, not '.txt'"
    assert session.execute("load echo.vsq").endswith(
        "'.vsq' files have a REPL of their own: ltvm repl echo.vsq")
    bad_fleq = tmp_path / "bad.fleq"
    bad_fleq.write_text(".data\nx: 1.0\n.code\nx = add(x, y)\n")
    fleq_error = session.execute(f"load {bad_fleq}")
    assert fleq_error.startswith(f"{bad_fleq}:4:")
    assert fleq_error.split("\n")[1:] == ["    x = add(x, y)", f"{' ' * 15}^"]
    assert session.execute("pc").startswith("step 0  pc 0"), "a failed load keeps the program"


def test_load_refuses_a_source_over_the_cap_and_keeps_the_program(repl, tmp_path,
                                                                   monkeypatch):
    """`load /dev/zero` read until the machine ran out of memory; the read stops at the cap."""
    monkeypatch.setattr(assembler.diagnostics, "MAX_SOURCE_BYTES", 1 << 20)
    big = tmp_path / "big.sq"
    with open(big, "wb") as handle:
        handle.truncate((1 << 20) + 1)
    too_big = "source larger than 1 MiB (the most a source file may hold)"
    assert repl.execute(f"load {big}") == f"error: {big}: {too_big}"
    if os.path.exists("/dev/zero"):
        assert repl.execute("load /dev/zero") == f"error: /dev/zero: {too_big}"
    assert repl.execute("pc").startswith("step 0  pc 0  subleq n, t")


def test_step_executes_one_or_k_instructions_and_shows_what_changed(repl):
    assert repl.execute("step") == "step 1  pc 1  subleq t, m\n  t = -6 (was 0)"
    out = repl.execute("step 3")
    assert out.startswith("step 4  pc 4  subleq m, t") and "m = 6 (was 0)" in out
    assert repl.execute("step 0") == "error: expected a positive count, got 0"
    assert repl.execute("step many") == "error: 'many' is not a number"


@pytest.mark.parametrize("line, message", [
    ("break " + "9" * 5000, "instruction about 10^5000 outside the program (0..25)"),
    ("break -" + "9" * 5000, "instruction about -10^5000 outside the program (0..25)"),
    ("break 0x" + "f" * 4000, "instruction about 10^4816 outside the program (0..25)"),
    ("print " + "0" * 10 + "9" * 5000, "address about 10^5000 outside memory (cells 0..9)"),
    ("watch 0x" + "f" * 4000, "address about 10^4816 outside memory (cells 0..9)"),
    ("set n 0b" + "1" * 20000,
     "value about 10^6021 does not fit in 16-bit words (range -32768..32767)"),
    ("delete " + "9" * 5000, "no breakpoint or watch about 10^5000"),
    ("step -" + "9" * 5000, "expected a positive count, got about -10^5000"),
])
def test_numbers_past_4300_digits_are_numbers_out_of_range(repl, line, message):
    """int() converts at most 4,300 digits: 'break 999...' said "is not a number", and a
    hex number past them (0xfff...) failed in the message as "ValueError: Exceeds the limit
    (4300 digits) for integer string conversion"."""
    assert repl.execute(line) == f"error: {message}"


def test_a_step_count_past_4300_digits_stops_at_max_steps(tmp_path):
    session = Repl(picture_dir=tmp_path / "pictures", max_steps=3)
    session.execute(f"load {FACTORIAL}")
    out = session.execute("step 0x" + "f" * 4000)
    assert "stopped after 3 steps (--max-steps; step asked for about 10^4816)" in out


def test_a_limit_of_one_step_says_one_step(tmp_path):
    """'stopped after 1 steps (--max-steps)'."""
    session = Repl(picture_dir=tmp_path / "pictures", max_steps=1)
    session.execute(f"load {FACTORIAL}")
    assert "stopped after 1 step (--max-steps)" in session.execute("run")
    assert "stopped after 1 step (--max-steps; step asked for 5)" in session.execute("step 5")


def test_run_restarts_and_stops_at_eof(repl):
    repl.execute("step 5")
    repl.execute("set n 5")
    out = repl.execute("run")
    assert out.splitlines()[0] == "the program has halted (pc at EOF)"
    assert "step 184  pc 25 (EOF)" in out and value(repl, "fact") == "720"
    assert repl.execute("step") .startswith("the program has halted")
    assert repl.execute("run now") == "error: 'run' takes no argument"


def test_breakpoints_stop_run_and_continue_and_can_be_deleted(repl):
    assert repl.execute("break mul") == "breakpoint 1 at 13 (mul)"
    assert repl.execute("break 24") == "breakpoint 2 at 24 (done)"
    assert repl.execute("break mul") == "error: breakpoint 1 is already at 13 (mul)"
    assert repl.execute("break nowhere") == "error: no label 'nowhere'"
    assert repl.execute("break 99") == "error: instruction 99 outside the program (0..25)"
    assert repl.execute("run").startswith("breakpoint 1 at 13 (mul)\nstep 13  pc 13 (mul)")
    assert repl.execute("continue").startswith("breakpoint 1 at 13 (mul)\nstep 18")
    assert repl.execute("delete 1") == "deleted breakpoint 1"
    assert repl.execute("delete 1") == "error: no breakpoint or watch 1"
    assert repl.execute("delete 0") == "error: no breakpoint or watch 0"
    assert repl.execute("continue").startswith("breakpoint 2 at 24 (done)\nstep 183")
    assert repl.execute("break") == "  2  breakpoint at 24 (done)"
    assert repl.execute("delete") == "deleted 1 breakpoints and watches"
    assert repl.execute("break") == "no breakpoints or watches"
    assert repl.execute("continue").startswith("the program has halted")


def test_watch_stops_when_the_value_changes(repl):
    assert repl.execute("watch fact") == "watch 1: fact = 1"
    out = repl.execute("continue")
    assert out.startswith("watch 1: fact = 0 (was 1)\nstep 43  pc 19")
    assert repl.execute("step 100").startswith("watch 1: fact = 6 (was 0)\nstep 45")
    assert repl.execute("watch") == "  1  watch fact"
    assert repl.execute("watch fact") == "error: watch 1 is already on fact"
    assert repl.execute("watch nothing") == "error: no memory named 'nothing'"
    assert repl.execute("delete 1") == "deleted watch 1"


def test_print_formats_cells_arrays_elements_and_addresses(countdown):
    assert countdown.execute("print x") == "x = 3"
    assert countdown.execute("print xs") == "xs = [4, 5, 6]"
    assert countdown.execute("print xs[1]") == "xs+1 = 5"
    assert countdown.execute("print xs+2") == "xs+2 = 6"
    assert countdown.execute("print 2") == "x = 3"
    assert countdown.execute("print 0x1") == "@minus_one = -1"
    assert countdown.execute("print") == "x = 3\nxs = [4, 5, 6]\none = 1"
    assert countdown.execute("print xs[3]") == "error: offset 3 is outside 'xs' (size 3)"
    assert countdown.execute("print 7") == "error: address 7 outside memory (cells 0..6)"


def test_set_edits_both_engines_within_the_word_size(countdown):
    assert countdown.execute("set x 127") == "x = 127 (was 3)"
    assert countdown.execute("engine reference").endswith("(both engines agree at step 0)")
    assert value(countdown, "x") == "127"
    assert countdown.execute("set xs+1 -128") == "xs+1 = -128 (was 5)"
    assert countdown.execute("set x 128") == \
        "error: value 128 does not fit in 8-bit words (range -128..127)"
    assert countdown.execute("set xs 1").startswith("error: 'xs' is an array of 3 cells")
    assert countdown.execute("set 0 5").startswith("error: cell 0 is reserved")
    assert countdown.execute("set x") == "error: usage: set NAME VALUE"
    assert countdown.execute("diff") == "the engines agree at step 0 (memory and pc)"
    countdown.execute("engine transformer")
    state = countdown.machine.state("transformer")
    assert state.memory[2:6] == [127, 4, -128, 6]


def test_numbers_and_offsets_are_ascii_digits_as_the_assembler_reads_them(countdown):
    """int() took other scripts' digits: `set x ٣` stored 3 and `step ٣` ran 3 steps."""
    for line in ("set x \u0663", "step \u0663", "break \u0661", "print \u0662",
                 "delete \u0661"):
        assert countdown.execute(line) == f"error: '{line.split()[-1]}' is not a number"
    assert countdown.execute("print xs[\u0661]") == "error: no memory named 'xs[\u0661]'"
    assert countdown.execute("print x") == "x = 3" and countdown.machine.steps == 0


@pytest.mark.parametrize("line", ["step 1_0", "set x 1_0", "break 0x_1", "print 0o2",
                                  "delete 1_0"])
def test_underscores_and_octal_are_refused_as_the_assembler_refuses_them(countdown, line):
    """int(text, 0) took them: `step 1_0` ran 10 steps and `set x 1_0` stored 10, numbers
    that a source file cannot hold."""
    assert countdown.execute(line) == f"error: '{line.split()[-1]}' is not a number"
    assert countdown.execute("print x") == "x = 3" and countdown.machine.steps == 0


def test_leading_zeros_are_read_as_the_assembler_reads_them(countdown):
    """int(text, 0) refused '010', which a source file holds as 10."""
    assert countdown.execute("set x 010") == "x = 10 (was 3)"
    assert countdown.execute("set x -0x0A") == "x = -10 (was 10)"


def test_pc_and_list_mark_the_program_counter_and_breakpoints(repl):
    repl.execute("step 4")
    assert repl.execute("pc") == "step 4  pc 4  subleq m, t"
    repl.execute("break test")
    lines = repl.execute("list").splitlines()
    assert lines[0].split() == ["0", "subleq", "n,", "t"]
    assert lines[3].split() == ["b", "3", "test:", "subleq", "c,", "c"]
    assert lines[4].startswith(" =>    4") and len(lines) == 10
    repl.execute("run")
    repl.execute("delete")
    repl.execute("continue")
    assert repl.execute("list").splitlines()[-1].split()[:3] == ["=>", "25", "EOF:"]


def test_typed_instruction_runs_as_one_transformer_pass_and_keeps_the_pc(countdown, monkeypatch):
    machine = countdown.machine
    instructions_before = machine.X[0, machine.layout["instr"]].clone()
    passes = []
    original = TransformerExecutor.step
    monkeypatch.setattr(TransformerExecutor, "step", lambda executor, X, step=0:
                        passes.append(X.clone()) or original(executor, X, step))
    out = countdown.execute("subleq one, xs+2, done")
    assert out == "executed subleq one, xs+2, done (pc stays at 0 (loop))\n  xs+2 = 5 (was 6)"
    assert len(passes) == 1, "the typed instruction goes through exactly one pass"
    column = machine.geometry.instruction_column(0)
    fetched = passes[0][0, machine.layout["instr_b"], column]
    assert fetched.tolist() == [-1, 1, 1, -1], "the pass fetched xs+2 (column 6) at pc"
    assert torch.equal(machine.X[0, machine.layout["instr"]], instructions_before)
    assert machine.state("transformer").memory == machine.state("reference").memory
    assert countdown.execute("GOTO done").endswith("no memory changed")
    assert countdown.execute("pc").startswith("step 0  pc 0 (loop)")
    assert countdown.execute("subleq one, y") == "error: undefined name 'y' (column 13)"
    assert countdown.execute("subleq x, xs+3").startswith("error: offset 3 is outside 'xs'")
    assert countdown.execute("subleq START, x").startswith(
        "error: a data operand must name a data cell")


def test_engine_switch_resynchronizes_after_a_divergence(tmp_path):
    session = Repl(EngineConfig(temperature=0.5, checked=False))
    session.execute(f"load {FACTORIAL}")
    assert session.execute("engine") == "engine: transformer"
    out = session.execute("run")
    assert out.startswith("the engines disagree from this step on (see diff)\nstep 1")
    assert session.execute("diff").splitlines() == [
        "the engines disagree at step 1:",
        "                transformer    reference",
        "t                        -4           -6"]
    assert session.execute("engine reference") == \
        "engine: reference (resynchronized from the transformer's state at step 1)"
    assert value(session, "t") == "-4"
    assert session.execute("diff") == "the engines agree at step 1 (memory and pc)"
    assert session.execute("engine reference") == "engine: reference (already active)"
    assert session.execute("engine gpu").startswith("error: engine must be one of")


def test_reference_engine_drives_when_active(repl):
    repl.execute("engine reference")
    repl.execute("break done")
    assert repl.execute("run").startswith("breakpoint 1 at 24 (done)\nstep 183")
    assert repl.execute("diff") == "the engines agree at step 183 (memory and pc)"


def test_precision_errors_are_reported_and_the_session_goes_on():
    session = Repl(EngineConfig(temperature=0.5))
    session.execute(f"load {FACTORIAL}")
    assert session.execute("step").startswith("error: precision error at step 0, layer 0")
    assert session.execute("pc") == "step 0  pc 0  subleq n, t"


def test_reset_returns_both_engines_to_step_0(repl):
    repl.execute("break done")
    repl.execute("step 30")
    assert repl.execute("reset") == "reset to the initial state\nstep 0  pc 0  subleq n, t"
    assert repl.machine.reference.steps == 0 and repl.execute("break").startswith("  1")


def test_info_names_geometry_layers_heads_temperature_dtype_device(repl):
    out = repl.execute("info")
    assert "geometry: n=37 columns" in out
    assert "transformer: 4 layers, heads per layer [1, 2, 0, 1]" in out
    assert "temperature: 20.51" in out and "dtype: float32  device: cpu" in out
    assert "  layer 1: read operands; error correction [read mem[a]; read mem[b]]" in out
    assert Repl().execute("info").startswith("no program loaded")


def test_info_shows_a_program_path_with_a_control_character_escaped(tmp_path):
    """`info` printed the path as it was: ESC [31m in a file name turned the terminal red
    (the `loaded` line already escaped it)."""
    path = tmp_path / "count\x1b[31mdown.sq"
    path.write_text(COUNTDOWN)
    session = Repl(picture_dir=tmp_path / "pictures")
    session.execute(f"load {path}")
    assert session.execute("info").splitlines()[0] == (
        f"program: '{tmp_path}/count\\x1b[31mdown.sq' (3 instructions, 7 memory cells)")


def test_help_lists_every_command_and_explains_one(repl):
    listing = repl.execute("help")
    assert all(f"  {command.usage}" in listing for command in COMMANDS.values())
    assert repl.execute("help engine").splitlines()[0] == "engine [transformer|reference]"
    assert "takes over the memory" in repl.execute("help engine")
    assert repl.execute("help subleq").startswith("subleq A, B[, C] | goto L | halt")
    assert repl.execute("help frobnicate") == "error: no command 'frobnicate' (type help)"


def test_quit_and_aliases(repl):
    assert repl.execute("s").startswith("step 1")
    assert repl.execute("p n") == "n = 6"
    assert not repl.finished
    assert repl.execute("quit now") == "error: 'quit' takes no argument"
    assert repl.execute("exit") == "" and repl.finished


def test_show_writes_pictures_and_prints_their_paths(countdown, tmp_path):
    pictures = tmp_path / "pictures"
    assert countdown.execute("show X") == f"wrote {pictures / 'step0000_X.png'}"
    assert countdown.execute("show attn 1") == f"wrote {pictures / 'step0000_layer1.png'}"
    assert countdown.execute("show X 3") == f"wrote {pictures / 'step0000_X_layer3.png'}"
    assert sorted(path.name for path in pictures.iterdir()) == [
        "step0000_X.png", "step0000_X_layer3.png", "step0000_layer1.png"]
    assert all(path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for path in pictures.iterdir())
    assert countdown.execute("show attn 4") == "error: layer 4 does not exist (layers 0..3)"
    assert countdown.execute("show Y") == "error: usage: show X|attn [LAYER]"


def test_nothing_typed_crashes_the_session(repl, monkeypatch):
    """execute() turns any exception into a line, so a crash shows as the exception's
    class name after "error: ", never as a raise."""
    crashed = re.compile(r"error: [A-Z]\w*: ")
    for line in ["", "   ", "?", "break", "step -1", "print", "set", "subleq", "halt x",
                 "goto", "subleq ,,", "load /", "delete x", "show", "engine  ", "\x00",
                 "print n+", "print n[", "subleq n, n\n.data\nz: 1", "list 3", "diff 1"]:
        answer = repl.execute(line)
        assert not crashed.match(answer), (line, answer)
    monkeypatch.setattr(repl.machine, "reset", lambda: 1 / 0)
    crash = repl.execute("reset")
    assert crash == "error: ZeroDivisionError: division by zero" and crashed.match(crash)
    assert repl.execute("pc").startswith("step ")


def test_ctrl_c_during_run_stops_at_a_whole_step(repl, monkeypatch):
    original, calls = repl.machine.step, []

    def interrupted_after_ten() -> None:
        calls.append(1)
        if len(calls) > 10:
            raise KeyboardInterrupt
        original()

    monkeypatch.setattr(repl.machine, "step", interrupted_after_ten)
    assert repl.execute("run").startswith("interrupted after 10 steps\nstep 10")
    assert repl.execute("diff") == "the engines agree at step 10 (memory and pc)"


def test_long_runs_report_progress_on_stderr(repl, monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(vm.repl.session, "Progress",
                        lambda label, total, _, **limits: Progress(label, total, stream,
                                                                   delay=0, **limits))
    repl.execute("run")
    assert re.search(r"steps: \d+ \[[\d:]+, [\d.]+/s\]\n$", stream.getvalue())


def test_show_refuses_a_pass_whose_pictures_cannot_fit_in_free_memory(countdown, monkeypatch):
    """`show attn` at n = 20,007 thrashed for minutes in silence (43 GiB of attention maps);
    `ltvm trace --png` refused it already."""
    import vm.transformer.memory

    monkeypatch.setattr(vm.transformer.memory, "free_memory", lambda device: 2 ** 10)
    for command in ("show attn", "show X 1"):
        out = countdown.execute(command)
        assert out.startswith(f"error: {command} at n = ") and out.endswith(
            "GiB free: draw a smaller program, or show X without a layer"), out
    assert countdown.execute("show X").startswith("wrote ")


def test_an_empty_picture_folder_is_refused(capsys):
    """--out '' wrote `show` pictures into the current directory."""
    assert main(["repl", "--out", "", FACTORIAL]) == 2
    assert capsys.readouterr().err == "ltvm: error: --out is an empty path\n"


def test_an_empty_program_path_is_refused(capsys):
    """`ltvm repl ''` started a session with nothing loaded, as if no PROG were given
    (`ltvm run ''` refuses it)."""
    with pytest.raises(SystemExit) as stopped:
        main(["repl", "", "--history", "/dev/null"])
    out, err = capsys.readouterr()
    assert stopped.value.code == 2 and out == ""
    assert err.splitlines()[-1].endswith("argument PROG: an empty path names no file")


def test_show_attn_reports_progress_on_stderr(countdown, monkeypatch):
    """Drawing a FLEQ pass's 17 layers took over a minute with no word."""
    stream = io.StringIO()
    monkeypatch.setattr(vm.repl.session, "Progress",
                        lambda label, total, _, **limits: Progress(label, total, stream,
                                                                   delay=0, **limits))
    assert countdown.execute("show attn").count("wrote") == 4
    assert re.search(r"layers drawn: +\d+%.*\| \d/4 ", stream.getvalue())


def test_completion_of_commands_names_labels_and_paths(repl):
    assert repl.completions("pri") == ["print"]
    assert repl.completions("su") == ["subleq"]
    assert repl.completions("print fa") == ["fact"]
    assert repl.completions("break d") == ["done"]
    assert repl.completions("subleq one, fa") == ["fact"]
    assert repl.completions("engine r") == ["reference"]
    assert repl.completions("show a") == ["attn"]
    assert repl.completions("set n 1") == []
    assert repl.completions(f"load {ROOT / 'programs' / 'subl'}") == [
        f"{ROOT / 'programs' / 'subleq'}/"]


def test_interact_reads_until_eof_without_a_terminal():
    session = Repl()
    stdout = io.StringIO()
    stdin = io.StringIO(f"load {FACTORIAL}\nbreak done\nrun\nprint fact\n")
    assert interact(session, None, stdin, stdout) == 0
    assert stdout.getvalue().splitlines()[-1] == "fact = 720"
    assert "(ltvm)" not in stdout.getvalue()


def test_edits_between_passes_leave_a_punchcard_the_checked_transformer_runs_on(tmp_path):
    path = tmp_path / "countdown.sq"
    path.write_text(COUNTDOWN)
    session = Repl(EngineConfig(checked=True))
    session.execute(f"load {path}")
    session.execute("set x 5")
    session.execute("subleq one, x")
    machine = session.machine
    decoded = TransformerExecutor(machine.geometry).decode(machine.X)[0]
    assert decoded == ([0, -1, 4, 4, 5, 6, 1], 0)
    out = session.execute("continue")
    assert out.startswith("the program has halted") and "x = 0 (was 4)" in out
    assert session.execute("diff") == "the engines agree at step 8 (memory and pc)"


def test_a_session_through_a_pseudo_terminal(tmp_path):
    history = tmp_path / "history"
    env = {**os.environ, "TERM": "dumb"}
    env.pop("DISPLAY", None)
    child = pexpect.spawn(sys.executable, ["-m", "vm.cli", "repl", "programs/subleq/factorial.sq",
                                           "--history", str(history),
                                           "--out", str(tmp_path / "pictures")],
                          cwd=str(ROOT), env=env, encoding="utf-8", timeout=90)
    try:
        child.expect_exact("(ltvm) ")
        child.sendline("break done")
        child.expect_exact("breakpoint 1 at 24 (done)")
        child.sendline("run")
        child.expect_exact("step 183  pc 24 (done)  halt")
        child.send("pri\t")
        child.expect_exact("print ")
        child.send("fa\t")
        child.expect_exact("fact ")
        child.sendline("")
        child.expect_exact("fact = 720")
        child.sendline("bogus")
        child.expect_exact("error: unknown command 'bogus' (type help)")
        child.expect_exact("(ltvm) ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    assert history.read_text().splitlines()[:2] == ["break done", "run"]


@pytest.mark.parametrize("directory", [True, False])
def test_a_history_path_that_names_no_file_is_refused(tmp_path, capsys, directory):
    """`--history h/` kept the history in a file h, and `--history ''` was named '.': 'history
    . is not a regular file'."""
    history = f"{tmp_path}/history/" if directory else ""
    with pytest.raises(SystemExit) as stopped:
        main(["repl", FACTORIAL, "--history", history])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.endswith(
        f"argument --history: {history} ends in '/', which names a directory; give a file\n"
        if directory else "argument --history: an empty path names no file\n")
    assert list(tmp_path.iterdir()) == []


def test_a_history_write_that_fails_part_way_leaves_the_history_as_it_was(
        tmp_path, monkeypatch, capsys):
    """readline wrote the history in place: a crash or a full disk part-way left the
    user's history cut short."""
    from vm.repl import terminal

    class FullDisk:
        @staticmethod
        def write_history_file(path) -> None:
            Path(path).write_text("cut sh")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    history = tmp_path / "history"
    history.write_text("break done\nrun\n")
    monkeypatch.setattr(terminal, "readline", FullDisk)
    terminal._save_history(history)
    assert history.read_text() == "break done\nrun\n"
    assert list(tmp_path.iterdir()) == [history]
    assert capsys.readouterr().err == (f"ltvm: cannot write history {history}: No space "
                                       f"left on device\n")


@pytest.mark.skipif(vm.repl.terminal.readline is None, reason="needs readline")
def test_a_new_history_is_private_and_an_old_one_keeps_its_mode(tmp_path):
    """Only its owner reads a new history, as readline makes it (the temporary file it is
    written to would have been readable by all)."""
    from vm.repl import terminal

    new, old = tmp_path / "new", tmp_path / "old"
    old.write_text("run\n")
    old.chmod(0o640)
    for history in (new, old):
        terminal._save_history(history)
    assert (new.stat().st_mode & 0o777, old.stat().st_mode & 0o777) == (0o600, 0o640)


@pytest.mark.parametrize("kind", ["pipe", "directory"])
def test_a_history_that_is_not_a_regular_file_is_not_kept(tmp_path, kind):
    """A named pipe as --history held the REPL before its first prompt (readline opened it
    and waited for a writer)."""
    history = tmp_path / "history"
    os.mkfifo(history) if kind == "pipe" else history.mkdir()
    child = pexpect.spawn(sys.executable, ["-m", "vm.cli", "repl", "--history", str(history)],
                          cwd=str(ROOT), env={**os.environ, "TERM": "dumb"}, encoding="utf-8",
                          timeout=60)
    try:
        child.expect_exact(f"ltvm: history {history} is not a regular file; the history is "
                           f"not kept")
        child.expect_exact("(ltvm) ")
        child.sendline("quit")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


def test_a_picture_folder_that_is_a_file_is_one_plain_error(tmp_path, capsys):
    """It used to print the raw exception: 'error: FileExistsError: [Errno 17] ...', then
    'error: File exists: DIR', which did not say that DIR is no directory; `ltvm repl --out
    FILE` started and failed only at the first `show`."""
    (tmp_path / "afile").write_text("")
    session = Repl(picture_dir=tmp_path / "afile")
    assert session.execute(f"load {FACTORIAL}").startswith("loaded")
    assert session.execute("show X") == (f"error: cannot write pictures into "
                                         f"{tmp_path / 'afile'}: it is not a directory (--out)")
    assert (tmp_path / "afile").read_text() == ""
    assert main(["repl", "--out", str(tmp_path / "afile"), FACTORIAL]) == 2
    assert capsys.readouterr() == ("", f"ltvm: error: --out {tmp_path / 'afile'} is not a "
                                       "directory\n")


@pytest.mark.parametrize("directory", ["/proc/self", "/proc/ltvm-pictures"])
def test_a_picture_folder_nothing_can_be_made_in_is_named_as_given(directory):
    """In /proc/self the message named the hidden folder `show` stages its pictures in
    ('error: No such file or directory: /proc/self/.show-7db0gpdh'), which the user never
    named and which does not exist. /proc refuses even root."""
    session = Repl(picture_dir=directory)
    session.execute(f"load {FACTORIAL}")
    out = session.execute("show X")
    assert out.startswith(f"error: cannot write pictures into {directory}: ")
    assert out.endswith(" (--out)") and ".show-" not in out
    assert session.execute("step").startswith("step 1")


def test_show_attn_writes_all_its_pictures_or_none(countdown, tmp_path):
    """A layer's picture that cannot be written (its name is taken by a folder) used to
    leave the layers before it written and unreported; now the set goes in whole."""
    pictures = tmp_path / "pictures"
    (pictures / "step0000_layer2.png").mkdir(parents=True)
    out = countdown.execute("show attn")
    assert out.startswith("error: ") and "step0000_layer2.png" in out and "\n" not in out
    assert [path.name for path in pictures.iterdir()] == ["step0000_layer2.png"]
    assert countdown.execute("step").startswith("step 1")


def test_ctrl_c_while_drawing_leaves_no_half_written_picture(countdown, tmp_path, monkeypatch):
    from PIL import Image

    def interrupted_part_way(picture, path, *args, **kwargs):
        Path(path).write_bytes(b"\x89PNG")
        raise KeyboardInterrupt
    monkeypatch.setattr(Image.Image, "save", interrupted_part_way)  # `show X` writes by PIL
    with pytest.raises(KeyboardInterrupt):
        countdown.execute("show X")
    assert list((tmp_path / "pictures").iterdir()) == []


def test_an_error_line_echoing_a_huge_word_is_cut(repl):
    """An unknown 2 MB word came back whole in its error line."""
    out = repl.execute("x" * 2_000_000)
    assert out.startswith("error: unknown command 'xxx") and out.endswith(" characters)")
    assert int(out.rsplit("(", 1)[1].split()[0].replace(",", "")) > 2_000_000
    assert len(out) < 400


@pytest.mark.parametrize("options,message", [
    ({"max_steps": None}, "max_steps"), ({"max_steps": -1}, "max_steps"),
    ({"max_steps": 1.5}, "max_steps"), ({"picture_dir": None}, "picture_dir"),
    ({"config": None}, "config must be an EngineConfig"),
    ({"progress_stream": 5}, "progress_stream")])
def test_a_session_refuses_options_it_cannot_run_with(options, message):
    """max_steps=None made every `continue` an 'error: TypeError', -1 and 1.5 were taken
    ("stopped after -1 steps"), picture_dir=None failed inside pathlib; config=None made
    `info` an 'error: AttributeError', progress_stream=5 every `step`."""
    with pytest.raises(vm.repl.session.InputError, match=message):
        Repl(**options)


def test_a_line_that_is_no_string_is_an_error_line(repl):
    """execute(None) raised an AttributeError out of the error boundary."""
    assert repl.execute(None) == "error: a command line is a string, got NoneType"


def test_a_huge_step_count_stops_at_max_steps(tmp_path, monkeypatch):
    """`step 10**30` on a program that never halts ran on past --max-steps until killed."""
    forever = tmp_path / "forever.sq"
    forever.write_text(".data\nx: 0\n.code\nloop: goto loop\n")
    session = Repl(picture_dir=tmp_path / "pictures", max_steps=40)
    session.execute(f"load {forever}")
    step = type(session.machine).step

    def bounded(machine):
        assert machine.steps < 1000, "ran past --max-steps"
        return step(machine)
    monkeypatch.setattr(type(session.machine), "step", bounded)
    out = session.execute(f"step {10**30}")
    assert out.splitlines()[0] == (f"stopped after 40 steps (--max-steps; step asked for "
                                   f"{10**30})")
    assert "step 40 " in out
    assert session.execute("step 7").splitlines()[0].startswith("step 47 ")


def test_the_reserved_cells_read_back_by_the_names_print_shows(countdown):
    """`print 1` showed '@minus_one = -1', and `print @minus_one` said no memory had that
    name."""
    assert countdown.execute("print 1") == "@minus_one = -1"
    assert countdown.execute("print @minus_one") == "@minus_one = -1"
    assert countdown.execute("print @zero") == "@zero = 0"
    assert countdown.execute("watch @minus_one") == "watch 1: @minus_one = -1"
    assert countdown.execute("set @minus_one 5").startswith("error: cell 1 is reserved")


def test_load_and_its_completion_take_a_path_under_home(tmp_path, monkeypatch):
    """`load ~/prog.sq` said it could not read '~/prog.sq': the REPL is no shell to expand
    it, yet the path is the one a user types at one."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "progs").mkdir()
    (tmp_path / "progs" / "countdown.sq").write_text(COUNTDOWN)
    session = Repl(picture_dir=tmp_path / "pictures")
    assert session.completions("load ~/pr") == ["~/progs/"]
    assert session.completions("load ~/progs/c") == ["~/progs/countdown.sq"]
    out = session.execute("load ~/progs/countdown.sq")
    assert out.startswith(f"loaded {tmp_path / 'progs' / 'countdown.sq'}: 3 instructions")


def test_a_typed_instruction_with_a_huge_comment_is_not_echoed_whole(countdown):
    """`subleq x, x ; <5 MB>` came back as a 5 MB 'executed ...' line."""
    out = countdown.execute("subleq one, x ; " + "y" * 5_000_000)
    first = out.splitlines()[0]
    assert first.startswith("executed subleq one, x ; yyy") and len(first) < 400
    assert "5,000,016 characters" in first and first.endswith("(pc stays at 0 (loop))")
    assert out.splitlines()[1] == "  x = 2 (was 3)"


def test_max_seconds_stops_a_run_that_never_halts(tmp_path):
    """`run` on a program that never halts had only --max-steps (a million FLEQ steps is
    hours) and Ctrl-C; --max-seconds now bounds each command's wall time, as in `ltvm run`."""
    forever = tmp_path / "forever.sq"
    forever.write_text(".data\nx: 0\n.code\nloop: goto loop\n")
    session = Repl(picture_dir=tmp_path / "pictures", max_steps=10**12, max_seconds=0.5)
    session.execute(f"load {forever}")
    for command in ("run", f"step {10**11}"):
        lines = session.execute(command).splitlines()
        assert re.fullmatch(r"stopped by --max-seconds 0.5 after [\d,]+ steps?, before the "
                            r"program halted", lines[0]), lines
        assert lines[1].startswith("step ") and "pc 0 (loop)" in lines[1]


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf"), "1", True])
def test_a_session_refuses_a_time_limit_that_is_no_positive_number(seconds):
    with pytest.raises(vm.repl.session.InputError, match="max_seconds"):
        Repl(max_seconds=seconds)


def test_the_step_that_meets_max_seconds_still_reports_its_watch(countdown, monkeypatch):
    """A watch that fired on the step at which --max-seconds ran out was not reported."""
    import vm.tools.progress

    countdown.max_seconds = 1.0
    clock = iter([0.0])  # Progress is made at 0 s; the first step's call comes at 5 s
    monkeypatch.setattr(vm.tools.progress.time, "monotonic", lambda: next(clock, 5.0))
    countdown.execute("watch x")
    out = countdown.execute("continue").splitlines()
    assert out[0] == "watch 1: x = 2 (was 3)", out
    assert out[1] == ("stopped by --max-seconds 1 after 1 step, before the program halted")


def test_set_takes_an_element_written_with_a_blank_before_its_index(countdown):
    """`set xs [1] 7` said 'usage: set NAME VALUE', where `print xs [1]` and `set xs[1] 7`
    name the same cell (and the FLEQ REPL takes `set v [1] 7`)."""
    assert countdown.execute("set xs [1] 7") == "xs+1 = 7 (was 5)"
    for engine in ("reference", "transformer"):
        countdown.execute(f"engine {engine}")
        assert value(countdown, "xs") == "[4, 7, 6]"


def test_a_byte_that_is_not_utf8_in_a_strict_locale_is_an_error_line(tmp_path):
    """In a strict UTF-8 locale, `print \\xff` piped in ended the session with a
    UnicodeDecodeError traceback (and echoing it, with a UnicodeEncodeError)."""
    import subprocess
    done = subprocess.run(
        [sys.executable, "-m", "vm.cli", "repl", FACTORIAL, "--history", "/dev/null"],
        input=b"print \xff\nprint fact\n", capture_output=True, timeout=300,
        cwd=ROOT, env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"})
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    # the byte comes back as the escape of the character it decoded to, as control
    # characters do (vm.repl.names.error_line), not as the raw byte
    assert done.stdout.splitlines()[-2:] == [rb"error: no memory named '\udcff'", b"fact = 1"]


@pytest.mark.parametrize("evaluation", ["fused", "active"])
def test_an_evaluation_the_repl_does_not_use_gets_a_note(evaluation, capsys, monkeypatch):
    """`ltvm repl p.sq --evaluation fused` took the option without a word: the REPL steps one
    full pass at a time."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("step\nquit\n"))
    assert main(["repl", FACTORIAL, "--evaluation", evaluation, "--history", "/dev/null"]) == 0
    err = capsys.readouterr().err
    assert err == (f"ltvm: note: the REPL of a .sq or .fleq program runs every pass in full "
                   f"(--evaluation {evaluation} does not apply)\n")


def test_the_options_of_ltvm_sample_are_refused_by_name_as_compare_refuses_them(capsys):
    """`ltvm repl prog --noise 1 --seed 3` said only 'unrecognized arguments', where
    `ltvm compare` named the options and said where they belong."""
    assert main(["repl", FACTORIAL, "--noise", "1", "--seed", "3"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("ltvm: error: --noise, --seed: options of `ltvm sample`; repl runs "
                            "the exact transformer (--temperature is the softmax's)\n")


def test_a_sampling_config_is_refused_when_the_repl_starts_in_compare_s_words():
    """Repl(EngineConfig(sampling=0.5)) loaded a program and failed at its first step with
    "step() (run_traced, compare_fleq, the REPL) makes exact passes only"."""
    with pytest.raises(vm.repl.session.InputError) as caught:
        Repl(EngineConfig(sampling=0.5))
    assert str(caught.value) == ("the REPL runs the exact transformer, not stochastic reads "
                                 "(sampling=0.5): sampled runs are `ltvm sample`'s")


@pytest.mark.parametrize("line, shown", [
    ("foo\x1b[31m", r"error: unknown command 'foo\x1b[31m' (type help)"),
    ("print n\x00", r"error: no memory named 'n\x00'"),
])
def test_a_control_character_in_a_typed_line_is_escaped_in_the_error(line, shown):
    """The error echoed the ESC of a pasted line as it was, and recoloured the terminal."""
    repl = Repl()
    repl.load(FACTORIAL)
    assert repl.execute(line) == shown


@pytest.mark.parametrize("separator", ["\r", "\x0b", "\x1c", "\u2028"])
def test_a_line_separator_inside_a_typed_line_is_escaped_not_a_cut(repl, separator):
    """A CR inside a line (a pasted 'print n\\rfact') cut the error at it: "error: no memory
    named 'n", its quote left open and the rest of what was typed not shown."""
    shown = ascii(separator)[1:-1]
    assert repl.execute(f"print n{separator}fact") == (f"error: no memory named "
                                                       f"'n{shown}fact'")


def test_a_history_that_cannot_be_written_is_named_escaped(tmp_path, monkeypatch, capsys):
    """`--history $'h\\e[31m'` on a full disk printed the ESC of the name as it was."""
    from vm.repl import terminal

    class FullDisk:
        @staticmethod
        def write_history_file(path) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    history = tmp_path / "h\x1b[31m"
    monkeypatch.setattr(terminal, "readline", FullDisk)
    terminal._save_history(history)
    assert capsys.readouterr().err == (f"ltvm: cannot write history '{tmp_path}/h\\x1b[31m': "
                                       f"No space left on device\n")


@pytest.mark.parametrize("program", ["fleq/chunked_attention.fleq", "subleq/factorial.sq"])
def test_loading_shows_the_lines_assembled(program, capsys, monkeypatch, tmp_path):
    """`load` shows a long assembly's progress as `ltvm run` does: a call of chunked_attention
    over 128 chunks assembled for 10 s in silence (shown here from the first line on)."""
    class Immediate(Progress):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **{**kwargs, "delay": 0.0})

    monkeypatch.setattr(vm.repl.session, "Progress", Immediate)
    repl = Repl(picture_dir=tmp_path)
    assert repl.load(str(ROOT / "programs" / program)).startswith("loaded ")
    counts = [int(count) for count in
              re.findall(r"lines assembled: (\d+)", capsys.readouterr().err)]
    assert counts and counts[-1] >= len((ROOT / "programs" / program).read_text().splitlines())


def test_a_ctrl_c_python_dropped_in_a_del_interrupts_that_command_only(capsys, monkeypatch):
    """A Ctrl-C raised inside a `__del__` is dropped by Python; noted by the command line, it
    waited for the end of the session and made the whole session exit 130."""
    import signal

    class Dropped:
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGINT)  # KeyboardInterrupt here, in the __del__

    def step_then_drop(repl: Repl, line: str) -> str:
        output = execute(repl, line)
        if line.strip() == "step":
            Dropped()
        return output
    execute = Repl.execute
    monkeypatch.setattr(Repl, "execute", step_then_drop)
    monkeypatch.setattr(sys, "stdin", io.StringIO("step\nprint fact\nquit\n"))
    assert main(["repl", FACTORIAL, "--history", "/dev/null"]) == 0
    out = capsys.readouterr().out
    assert "\ninterrupted\n" in out and out.rstrip().endswith("fact = 1")


def test_a_history_that_cannot_be_written_is_named_before_the_first_prompt(tmp_path, capsys):
    """A history in a missing directory, under a file or where nothing can be created was
    reported only as the session ended, after everything it had typed."""
    (tmp_path / "file").write_text("")
    places = {tmp_path / "missing" / "h": f"directory {tmp_path}/missing does not exist",
              tmp_path / "file" / "h": f"{tmp_path}/file is not a directory"}
    if os.path.isdir("/proc/self"):
        places[Path("/proc/h")] = "in /proc: "
    for history, problem in places.items():
        assert vm.repl.terminal._usable(history) is None
        error = capsys.readouterr().err
        assert error.startswith(f"ltvm: history {history} cannot be written")
        assert problem in error and error.endswith("; the history is not kept\n")
    assert vm.repl.terminal._usable(tmp_path / "h") == tmp_path / "h"
    assert capsys.readouterr().err == "" and list(tmp_path.iterdir()) == [tmp_path / "file"]


@pytest.mark.parametrize("line", ["c = add(a, b)", "q = add(a, b)", "x = add(a, b)",
                                  "n = t"])
def test_a_fleq_instruction_typed_at_a_subleq_program_says_so(repl, line):
    """It ran into the aliases: 'continue' takes no argument, 'quit' takes no argument,
    unknown command 'x'."""
    before = repl.execute("pc")
    assert repl.execute(line) == (f"error: '{line}' is a FLEQ instruction; the loaded program "
                                  "is SUBLEQ (subleq A, B[, C] | goto L | halt)")
    assert repl.execute("pc") == before


@pytest.mark.parametrize("name, content, problem", [
    ("prog.sq", ".code\nhalt\n", "names a program (.sq), not a history"),
    ("history", b"\x7fELF\x00\x01", "holds binary data (a NUL byte), not a history")])
def test_a_history_that_holds_something_else_is_not_kept(tmp_path, capsys, name, content,
                                                         problem):
    """`ltvm repl --history prog.sq` (PROG meant) wrote the history over the program as the
    session ended; a binary file came back as lines of history."""
    history = tmp_path / name
    history.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert vm.repl.terminal._usable(history) is None
    assert capsys.readouterr().err == (f"ltvm: history {history} {problem}; the history is "
                                       "not kept\n")
    assert vm.repl.terminal._usable(tmp_path / "new_history") == tmp_path / "new_history"
