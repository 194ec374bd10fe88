"""The `ltvm` command line: outputs, exit codes, no tracebacks, no half-written files."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vm.cli import build_parser, main
from fleq_sources import GROW

ROOT = Path(__file__).resolve().parents[1]
FACTORIAL = str(ROOT / "programs" / "subleq" / "factorial.sq")


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_asm_prints_geometry_and_saves_a_loadable_punchcard(capsys, tmp_path):
    target = tmp_path / "x.npy"
    code, out, _ = run_cli(capsys, "asm", FACTORIAL, "-o", str(target))
    assert code == 0
    assert "geometry: n=" in out and "N=16-bit" in out
    X = np.load(target, allow_pickle=False)
    assert X.shape[1] == 1 + 10 + 26
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]


def test_written_files_get_the_mode_of_a_plain_open(capsys, tmp_path):
    old = os.umask(0o022)
    try:
        assert run_cli(capsys, "asm", FACTORIAL, "-o", str(tmp_path / "x.npy"))[0] == 0
    finally:
        os.umask(old)
    assert (tmp_path / "x.npy").stat().st_mode & 0o777 == 0o644


def test_asm_failure_leaves_no_file(capsys, tmp_path):
    bad = tmp_path / "bad.sq"
    bad.write_text(".code\nfoo\n")
    code, _, err = run_cli(capsys, "asm", str(bad), "-o", str(tmp_path / "x.npy"))
    assert code == 2 and "unknown mnemonic 'foo'" in err
    assert not (tmp_path / "x.npy").exists()


def test_run_reference_prints_named_memory_and_json(capsys):
    code, out, _ = run_cli(capsys, "run", FACTORIAL, "--engine", "reference")
    assert code == 0 and "fact = 720" in out and "halted: yes" in out
    code, out, _ = run_cli(capsys, "run", FACTORIAL, "--engine", "reference", "--json")
    payload = json.loads(out)
    assert payload["memory"]["fact"] == 720 and payload["halted"] is True


def test_run_trace_lists_each_step(capsys):
    code, out, _ = run_cli(capsys, "run", FACTORIAL, "--engine", "reference", "--trace")
    steps = [line for line in out.splitlines() if " pc " in line]
    assert code == 0 and len(steps) == int(out.split("steps: ")[1].split()[0])
    assert "t = 0 - n = -6" in steps[0]


def test_run_exits_1_when_the_step_limit_is_reached(capsys):
    code, out, _ = run_cli(capsys, "run", FACTORIAL, "--engine", "reference",
                           "--max-steps", "10")
    assert code == 1 and "halted: no" in out and "steps: 10" in out


def test_run_csv_pair(capsys, tmp_path):
    (tmp_path / "c.csv").write_text("a,b,c\n5,4,7\n2,3,7\n")
    (tmp_path / "m.csv").write_text("mem\n0\n-1\n7\n3\n")
    code, out, _ = run_cli(capsys, "run", "--csv", str(tmp_path / "c.csv"),
                           str(tmp_path / "m.csv"), "--engine", "reference")
    assert code == 0 and "mem = [0, -1, 4, 3]" in out


def test_geometry_overrides_apply(capsys):
    code, out, _ = run_cli(capsys, "asm", FACTORIAL, "--bits", "24", "--scratch", "3")
    assert code == 0 and "scratch 3" in out and "N=24-bit" in out


@pytest.mark.parametrize("argv,message", [
    (["run", "missing.sq"], "cannot read missing.sq"),
    (["run"], "no program given"),
    (["run", "x.txt"], "unknown program type"),
    (["asm", FACTORIAL, "--bits", "3"], "does not fit in 3-bit words"),
])
def test_console_script_reports_bad_input_with_exit_2_and_no_traceback(argv, message):
    done = subprocess.run([sys.executable, "-m", "vm.cli", *argv], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_demo_runs_factorial_on_the_transformer_beside_the_reference(capsys):
    code, out, _ = run_cli(capsys, "demo")
    assert code == 0
    assert [line.split() for line in out.splitlines() if line.startswith("fact ")] == \
        [["fact", "720", "720"]]
    assert "lockstep comparison: OK, every one of 184 steps agrees" in out


def test_run_uses_the_transformer_by_default(capsys):
    code, out, _ = run_cli(capsys, "run", FACTORIAL)
    assert code == 0 and "engine: transformer" in out and "fact = 720" in out


def test_run_transformer_trace_and_json(capsys):
    code, out, _ = run_cli(capsys, "run", str(ROOT / "programs/subleq/gcd.sq"), "--json",
                           "--dtype", "float64", "--attention", "dense")
    payload = json.loads(out)
    assert code == 0 and payload["memory"]["g"] == 12 and payload["dtype"] == "float64"
    code, out, _ = run_cli(capsys, "run", str(ROOT / "programs/subleq/gcd.sq"), "--trace")
    assert code == 0 and out.count(" pc ") == 48


def test_run_reports_a_precision_error_with_exit_1(capsys):
    code, _, err = run_cli(capsys, "run", FACTORIAL, "--temperature", "1.2")
    assert code == 1 and "precision error at step" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["run", "compare"])
def test_a_temperature_below_the_safe_one_says_fused_evaluation_does_not_apply(capsys,
                                                                                command):
    """Checking turned on by the temperature ran every pass in full without a word."""
    _, _, err = run_cli(capsys, command, FACTORIAL, "--temperature", "1.2",
                        "--evaluation", "fused")
    assert ("ltvm: note: --temperature 1.2, below the provably safe one, turns on checking "
            "that runs every pass in full (--evaluation fused does not apply)") in err
    _, _, err = run_cli(capsys, command, FACTORIAL, "--temperature", "1.2")
    assert "note:" not in err


def test_compare_prints_one_ok_line(capsys):
    code, out, _ = run_cli(capsys, "compare", str(ROOT / "programs/subleq/reverse.sq"))
    assert code == 0 and out.strip() == \
        "OK: transformer and reference agree for 25 steps (halted)"


@pytest.mark.parametrize("program", ["programs/subleq/reverse.sq",
                                     "programs/fleq/calculator.fleq"])
def test_compare_stopped_by_the_step_limit_does_not_say_ok(capsys, program):
    """It printed "OK: ... (step limit reached)" and exited 1."""
    code, out, _ = run_cli(capsys, "compare", str(ROOT / program), "--max-steps", "3")
    last = out.strip().splitlines()[-1]
    assert code == 1 and last.startswith("NOT HALTED: ") and "agree for 3 steps" in last
    assert "OK" not in out


def test_compare_csv_program(capsys):
    csv = ROOT / "programs/csv/countdown"
    code, out, _ = run_cli(capsys, "compare", "--csv", str(csv / "commands.csv"),
                           str(csv / "memory.csv"), "--json")
    payload = json.loads(out)
    assert code == 0 and payload["ok"] and payload["halted"]


def test_inspect_shows_layers_beside_the_paper(capsys):
    code, out, _ = run_cli(capsys, "inspect", FACTORIAL)
    assert code == 0 and "total: 4 layers, 2 heads per layer at most" in out
    assert "paper (Table 1, Lemma 4): 9 layers, 2 heads" in out
    code, out, _ = run_cli(capsys, "inspect", "--memory", "40", "--instructions", "200",
                           "--bits", "32", "--json")
    payload = json.loads(out)
    assert payload["totals"]["layers"] == 5 and payload["geometry"]["columns"] == 241


def test_inspect_bounds_are_those_of_the_machine_its_dtype_builds(capsys):
    """A float32 machine has its own block parameters (larger product eps, no Newton steps
    in the sigmoid sums): its bounds are those `ltvm blocks` documents for float32. inspect
    built the float64 machine and printed a float32 bound for its parameters (inv: inf)."""
    calculator = str(ROOT / "programs" / "fleq" / "calculator.fleq")
    documented = {}
    for dtype in ("float32", "float64"):
        code, out, _ = run_cli(capsys, "inspect", calculator, "--dtype", dtype, "--json")
        payload = json.loads(out)
        assert code == 0 and payload["dtype"] == dtype
        code, out, _ = run_cli(capsys, "blocks", "--json")
        documented = {entry["name"]: entry["error_bound"][dtype] for entry in json.loads(out)
                      if entry["kind"] == "block"}
        for block in payload["blocks"]:
            assert block["error_bound"] == documented[block["function"]]["absolute"]
            assert block["relative_error_bound"] == documented[block["function"]]["relative"]
    code, out, _ = run_cli(capsys, "inspect", calculator, "--dtype", "float32")
    inv = next(line for line in out.splitlines() if line.lstrip().startswith("inv "))
    assert "error <= 0.014|f| (float32);" in inv and "float64" not in inv


def test_inspect_needs_a_program_or_a_geometry(capsys):
    code, _, err = run_cli(capsys, "inspect")
    assert code == 2 and "give PROG" in err


def test_bench_prints_a_table_with_the_reference_beside(capsys):
    code, out, _ = run_cli(capsys, "bench", "--columns", "16", "--batch", "1,4",
                           "--seconds", "0.05")
    rows = [line for line in out.splitlines() if line.startswith("| 16 |")]
    assert code == 0 and len(rows) == 2
    assert all(float(row.split("|")[7].replace(",", "")) > 0 for row in rows)


def test_asm_encodes_a_fleq_program_and_lists_it(capsys, tmp_path):
    calculator = str(ROOT / "programs" / "fleq" / "calculator.fleq")
    target = tmp_path / "x.npy"
    code, out, _ = run_cli(capsys, "asm", calculator, "--listing", "-o", str(target))
    assert code == 0
    rows, columns = (int(v) for v in out.split("X has ")[1].split(" columns")[0].split(" rows x "))
    assert np.load(target, allow_pickle=False).shape == (rows, columns)
    assert "t = percentage(t)" in out and "halt" in out
    code, _, err = run_cli(capsys, "asm", calculator, "--export-csv", str(tmp_path / "csv"))
    assert code == 2 and "SUBLEQ programs only" in err


@pytest.mark.parametrize("raised", [
    lambda torch: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"),
    lambda torch: RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. "
                               "DefaultCPUAllocator: can't allocate memory: you tried ..."),
    lambda torch: MemoryError(),
])
def test_running_out_of_memory_is_a_clear_error_with_exit_2(raised, capsys, monkeypatch):
    """What check_memory's estimate leaves out still ends in one line, not a traceback."""
    import torch

    from vm.cli import bench

    def out_of_memory(args):
        raise raised(torch)
    monkeypatch.setattr(bench, "run_fleq", out_of_memory)
    assert main(["bench", "fleq", "calculator"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltvm: error: out of memory") and "--batch" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_other_runtime_errors_are_not_taken_for_memory(monkeypatch):
    from vm.cli import bench

    def broken(args):
        raise RuntimeError("a bug")
    monkeypatch.setattr(bench, "run_fleq", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["bench", "fleq", "calculator"])


def test_writing_through_a_symbolic_link_keeps_the_link(capsys, tmp_path):
    """The staged file replaces the file the link names, not the link itself."""
    real = tmp_path / "real.npy"
    real.write_bytes(b"old")
    link = tmp_path / "link.npy"
    link.symlink_to(real)
    assert run_cli(capsys, "asm", FACTORIAL, "-o", str(link))[0] == 0
    assert link.is_symlink() and np.load(real).shape[0] > 0


def test_a_pipe_or_device_is_written_in_place_not_replaced(tmp_path):
    """Run as root, `-o /dev/null` used to turn /dev/null into a regular file."""
    from vm.common.outputs import atomic_path

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    with atomic_path(pipe) as path:
        assert path == pipe
    assert not pipe.is_file() and pipe.exists()


def test_input_text_that_is_not_utf8_reaches_the_program_as_its_bytes():
    """A shell passes undecodable bytes as surrogate escapes; `.encode()` raised on them."""
    import argparse

    from vm.cli.common import input_options
    from vm.isa import VSUBLEQ

    args = argparse.Namespace(input=os.fsdecode(b"a\xff\xfe"), input_file=None,
                              max_output=None)
    assert input_options(args, VSUBLEQ)["input_bytes"] == b"a\xff\xfe"


def test_asm_export_csv_creates_its_directory_and_round_trips(capsys, tmp_path):
    target = tmp_path / "csv"
    code, out, _ = run_cli(capsys, "asm", FACTORIAL, "--export-csv", str(target))
    assert code == 0 and f"wrote {target / 'commands.csv'}" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["csv"]
    assert sorted(p.name for p in target.iterdir()) == ["commands.csv", "memory.csv",
                                                       "program.json"]
    code, out, _ = run_cli(capsys, "run", "--csv", str(target / "commands.csv"),
                           str(target / "memory.csv"), "--engine", "reference")
    assert code == 0 and "mem = [0, -1, 6, 720" in out


def test_asm_export_csv_is_all_or_nothing(capsys, tmp_path):
    """memory.csv as a directory used to fail after commands.csv was written (and -o's X)."""
    (tmp_path / "pw1" / "memory.csv").mkdir(parents=True)
    code, _, err = run_cli(capsys, "asm", FACTORIAL, "--export-csv", str(tmp_path / "pw1"),
                           "-o", str(tmp_path / "x.npy"))
    assert code == 2
    assert f"cannot write {tmp_path / 'pw1' / 'memory.csv'}: it is a directory" in err
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "pw1", "pw1/memory.csv"]


def test_asm_export_csv_needs_an_existing_parent_like_o(capsys, tmp_path):
    target = tmp_path / "missing" / "csv"
    code, _, err = run_cli(capsys, "asm", FACTORIAL, "--export-csv", str(target))
    assert code == 2 and f"directory {tmp_path / 'missing'} does not exist" in err
    assert list(tmp_path.iterdir()) == []


def test_asm_export_csv_onto_a_file_says_what_failed(capsys, tmp_path):
    (tmp_path / "afile").write_text("mine")
    code, _, err = run_cli(capsys, "asm", FACTORIAL, "--export-csv", str(tmp_path / "afile"))
    assert code == 2
    assert err == (f"ltvm: error: cannot write {tmp_path / 'afile'}: it exists and is not a "
                   "directory\n")
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.mark.parametrize("option", ["-o", "--export-csv"])
def test_asm_refuses_an_empty_output_path(option, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "asm", FACTORIAL, option, "")
    assert code == 2 and err == f"ltvm: error: {option} is an empty path\n"
    assert list(tmp_path.iterdir()) == []


def test_asm_refuses_a_dash_output_instead_of_writing_a_file_named_dash(capsys, tmp_path,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "asm", FACTORIAL, "-o", "-")
    assert code == 2 and "not written to standard output" in err and out == ""
    assert list(tmp_path.iterdir()) == []
    assert run_cli(capsys, "asm", FACTORIAL, "-o", "./-")[0] == 0
    assert np.load(tmp_path / "-").ndim == 2


@pytest.mark.parametrize("name", ["x.txt", "x.csv", "x.npy.tmp"])
def test_asm_refuses_an_output_suffix_it_does_not_write(capsys, tmp_path, name):
    """`asm P -o out.txt` wrote numpy's binary .npy data under a text file's name without a
    word; .npy (any case) and a name without a suffix (a device, a pipe) are written."""
    code, out, err = run_cli(capsys, "asm", FACTORIAL, "-o", str(tmp_path / name))
    assert code == 2 and out == "" and err == (
        f"ltvm: error: cannot write {tmp_path / name}: -o saves X as .npy data, under a name "
        f"ending in .npy or with no suffix, not {Path(name).suffix}; name it X.npy\n")
    assert list(tmp_path.iterdir()) == []
    for written in ("x.NPY", "x"):
        assert run_cli(capsys, "asm", FACTORIAL, "-o", str(tmp_path / written))[0] == 0
        assert np.load(tmp_path / written).ndim == 2


def test_asm_refuses_to_save_x_over_the_settings_a_csv_import_reads(capsys, tmp_path):
    """program.json beside commands.csv is read with the pair; -o there replaced it with X,
    and the pair no longer imported as exported."""
    assert run_cli(capsys, "asm", FACTORIAL, "--export-csv", str(tmp_path))[0] == 0
    settings = tmp_path / "program.json"
    before = settings.read_bytes()
    code, _, err = run_cli(capsys, "asm", "--csv", str(tmp_path / "commands.csv"),
                           str(tmp_path / "memory.csv"), "-o", str(settings))
    assert code == 2 and "is the input" in err and settings.read_bytes() == before


@pytest.mark.parametrize("pair", [("", "memory.csv"), ("commands.csv", "")])
def test_an_empty_csv_path_is_refused_as_one(capsys, tmp_path, pair):
    """--csv '' MEM read '' as the current directory: 'cannot read .: Is a directory'."""
    assert run_cli(capsys, "asm", FACTORIAL, "--export-csv", str(tmp_path))[0] == 0
    paths = [str(tmp_path / name) if name else "" for name in pair]
    with pytest.raises(SystemExit) as stopped:
        main(["run", "--csv", *paths])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.endswith("argument --csv: an empty path names no file\n")


INFINITE_LOOP = """.code
loop:   subleq z, z, loop
.data
z:      0
"""


def test_run_reference_obeys_max_seconds(capsys, tmp_path):
    path = tmp_path / "inf.sq"
    path.write_text(INFINITE_LOOP)
    code, out, err = run_cli(capsys, "run", str(path), "--engine", "reference",
                             "--max-steps", "50000000", "--max-seconds", "0.2")
    assert code == 1 and out == ""
    assert err.startswith("ltvm: error: stopped by --max-seconds 0.2 after ")
    assert "Traceback" not in err


def test_run_reference_reports_a_value_leaving_the_machines_domain(capsys, tmp_path):
    path = tmp_path / "grow.fleq"
    path.write_text(GROW.format(op="mul"))
    code, out, err = run_cli(capsys, "run", str(path), "--engine", "reference")
    assert code == 1 and "Warning" not in err
    assert "domain: step 0: a = mul(a, a) leaves the machine's domain" in out
    code, out, _ = run_cli(capsys, "run", str(path), "--engine", "reference", "--json")
    data = json.loads(out)
    assert code == 1 and data["domain"].startswith("step 0: a = mul(a, a) leaves")
    assert not data["halted"] and data["memory"]["a"] == 1e30


@pytest.mark.parametrize("names", [",", " , ,", ""])
def test_an_empty_functions_list_is_refused_not_taken_as_unset(names, capsys):
    """`--functions ,` passed as no option at all, so a .sq program did not refuse it."""
    with pytest.raises(SystemExit) as stop:
        main(["run", FACTORIAL, "--functions", names])
    assert stop.value.code == 2
    assert "--functions: expected one or more names" in capsys.readouterr().err


@pytest.mark.parametrize("program, message", [
    (ROOT / "programs" / "vsubleq" / "hello.vsq", "the reference engine's output has no fixed"),
    (ROOT / "programs" / "subleq" / "factorial.sq", "--max-output applies to standard SUBLEQ"),
])
def test_max_output_with_the_reference_engine_is_refused(program, message, capsys):
    """The reference engine ignored --max-output silently."""
    assert main(["run", str(program), "--engine", "reference", "--max-output", "4"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_an_input_file_that_is_a_pipe_with_no_writer_says_what_it_waits_for(
        monkeypatch, tmp_path, capsys):
    """--input-file PIPE blocked in open() in silence, forever when no writer came."""
    import argparse
    import threading
    import time

    import vm.common.files
    from vm.cli.common import input_options
    from vm.isa import VSUBLEQ

    monkeypatch.setattr(vm.common.files, "PIPE_NOTICE_SECONDS", 0.1)
    pipe = tmp_path / "input"
    os.mkfifo(pipe)

    def write_late() -> None:
        time.sleep(0.5)
        pipe.write_bytes(b"hi")
    writer = threading.Thread(target=write_late)
    writer.start()
    args = argparse.Namespace(input=None, input_file=str(pipe), max_output=None)
    assert input_options(args, VSUBLEQ)["input_bytes"] == b"hi"
    writer.join()
    assert f"waiting for a program to write to {pipe}" in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_asm_writes_x_into_a_pipe_saying_while_it_waits_for_a_reader(capsys, monkeypatch,
                                                                      tmp_path):
    """-o PIPE blocked open() in silence until a reader came (forever when none did), and
    numpy's save then failed: 'obtaining file position failed'. The reader comes only once
    the command has said it waits (a reader that came after a fixed 0.5 s found the command
    not yet waiting on a loaded machine, and no line was printed)."""
    import builtins
    import io
    import threading

    from vm.common import files

    pipe = tmp_path / "x.npy"
    os.mkfifo(pipe)
    received = []
    waiting = threading.Event()

    def print_and_signal(*args, **kwargs) -> None:
        builtins.print(*args, **kwargs)
        waiting.set()
    monkeypatch.setattr(files, "print", print_and_signal, raising=False)

    def read_late() -> None:
        waiting.wait(timeout=60)
        received.append(pipe.read_bytes())
    reader = threading.Thread(target=read_late)
    reader.start()
    assert main(["asm", FACTORIAL, "-o", str(pipe)]) == 0
    reader.join()
    assert np.lib.format.read_array(io.BytesIO(received[0])).shape == (136, 37)
    assert f"waiting for a program to read {pipe}" in capsys.readouterr().err



def _asm_to(stdout, *options: str) -> subprocess.CompletedProcess:
    """`ltvm asm FACTORIAL OPTIONS` with standard output going to `stdout`."""
    return subprocess.run([sys.executable, "-m", "vm.cli", "asm", FACTORIAL, *options],
                          stdout=stdout, stderr=subprocess.PIPE, cwd=ROOT, timeout=60)


def _saved_x(capsys, tmp_path) -> bytes:
    """X as `-o FILE` saves it, to compare with what standard output received."""
    assert run_cli(capsys, "asm", FACTORIAL, "-o", str(tmp_path / "saved.npy"))[0] == 0
    return (tmp_path / "saved.npy").read_bytes()


@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="needs /dev/stdout")
def test_asm_to_standard_output_sends_x_alone_there_and_the_summary_to_stderr(capsys,
                                                                              tmp_path):
    """`-o /dev/stdout | reader` got the summary text after the .npy data."""
    done = _asm_to(subprocess.PIPE, "-o", "/dev/stdout", "--listing")
    assert done.returncode == 0
    assert done.stdout == _saved_x(capsys, tmp_path)
    err = done.stderr.decode()
    assert err.startswith("program: ") and "subleq one, c, done" in err
    assert err.endswith("wrote /dev/stdout\n")


@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="needs /dev/stdout")
@pytest.mark.parametrize("output", ["/dev/stdout", "same file"])
def test_asm_to_the_file_standard_output_appends_to_writes_into_it(capsys, tmp_path, output):
    """`-o /dev/stdout >> f` (or `-o f >> f`) replaced f by a new file through a rename: what
    f held was lost, and the summary went to the file the shell had opened, now deleted."""
    target = tmp_path / "f"
    target.write_bytes(b"kept\n")
    with open(target, "ab") as appended:
        done = _asm_to(appended, "-o", str(target) if output == "same file" else output)
    assert done.returncode == 0 and done.stderr.decode().startswith("program: ")
    assert target.read_bytes() == b"kept\n" + _saved_x(capsys, tmp_path)


def test_asm_to_a_discarded_standard_output_stays_silent():
    """`-o /dev/null > /dev/null` (discard X, silence the summary) printed the summary on
    stderr once X going to standard output sent the summary there."""
    with open(os.devnull, "wb") as null:
        done = _asm_to(null, "-o", os.devnull)
    assert (done.returncode, done.stderr) == (0, b"")


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_asm_refuses_to_write_x_to_a_terminal(tmp_path):
    """X is binary: `-o /dev/stdout` on a terminal drew 40 KB of it there."""
    terminal, other_end = os.openpty()
    try:
        done = _asm_to(other_end, "-o", "/dev/stdout")
    finally:
        os.close(terminal)
        os.close(other_end)
    assert done.returncode == 2
    assert done.stderr.decode() == ("ltvm: error: -o /dev/stdout is the terminal, which cannot "
                                    "show X (binary .npy data): redirect standard output to a "
                                    "file or a pipe\n")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_asm_into_a_pipe_whose_reader_left_early_fails(capsys, tmp_path):
    """X cut short in a named pipe is a failed -o (exit 2), not the quiet end of a standard
    output piped into `head`, which exits 0."""
    import threading

    pipe = tmp_path / "x.npy"
    os.mkfifo(pipe)

    def read_ten_bytes() -> None:
        with open(pipe, "rb") as reader:
            reader.read(10)
    reader = threading.Thread(target=read_ten_bytes)
    reader.start()
    code, _, err = run_cli(capsys, "asm", FACTORIAL, "--scratch", "3000", "-o", str(pipe))
    reader.join()
    assert code == 2 and err.endswith(f"ltvm: error: cannot write {pipe}: Broken pipe\n")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_asm_names_the_output_it_could_not_write(capsys):
    assert main(["asm", FACTORIAL, "-o", "/dev/full"]) == 2
    assert capsys.readouterr().err == ("ltvm: error: cannot write /dev/full: No space left on "
                                       "device\n")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_standard_output_is_named():
    """`ltvm run p.sq > /dev/full` said "No space left on device" and nothing of where."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "vm.cli", "asm", FACTORIAL], stdout=full,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr == "ltvm: error: No space left on device: standard output\n"


def test_ctrl_c_while_the_commands_are_loaded_is_an_interruption(monkeypatch, capsys):
    """Building the parser imports every command's module (a third of a second), and a
    Ctrl-C then ended in a KeyboardInterrupt traceback."""
    import vm.cli

    def interrupted() -> list[str]:
        raise KeyboardInterrupt
    monkeypatch.setattr(vm.cli, "command_modules", interrupted)
    try:
        code = main(["run", FACTORIAL])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C while the parser was built ended in a traceback")
    assert (code, capsys.readouterr().err) == (130, "ltvm: interrupted\n")


WRITE_AND_WAIT = """
import sys
from vm.cli import asm, main

def write_and_wait(path):
    print("writing", flush=True)
    sys.stdin.readline()  # a pipe nothing writes to: waits for the signal

asm.open_for_writing = write_and_wait
sys.exit(main(sys.argv[1:]))
"""


def _asm_under(script: str, output) -> subprocess.Popen:
    """`ltvm asm FACTORIAL -o OUTPUT` run by `script` (which patches the command first),
    with pipes on its three standard streams."""
    return subprocess.Popen([sys.executable, "-c", script, "asm", FACTORIAL, "-o", str(output)],
                            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("stop, code, message", [
    (signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)"),
    (signal.SIGHUP, 129, "terminated (SIGHUP)")])
def test_a_signal_while_writing_removes_the_temporary_file(tmp_path, stop, code, message):
    """SIGTERM (`timeout`, a killed job) and SIGHUP (a closed terminal) ended the command
    outright and left the hidden temporary file beside the output; they end the command as
    Ctrl-C does, cleaning up."""
    output = tmp_path / "x.npy"
    command = _asm_under(WRITE_AND_WAIT, output)
    try:
        assert command.stdout.readline() == "writing\n"
        assert len(list(tmp_path.iterdir())) == 1  # the temporary file, being written
        command.send_signal(stop)
        _, err = command.communicate(timeout=60)
    finally:
        command.kill()
    assert (command.returncode, err) == (code, f"ltvm: {message}\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_an_error_keeps_its_exit_code_when_standard_error_is_full():
    """With stderr on a full disk the error message failed to print, a second error, and
    bad input exited 1 as if a run had failed."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "vm.cli", "run", "missing.sq"],
                              stderr=full, cwd=ROOT)
    assert done.returncode == 2


def _with_closed(stream: int, *argv: str) -> subprocess.CompletedProcess:
    """`ltvm ARGV` with standard stream `stream` (0, 1 or 2) closed, as `N>&-` closes it."""
    captured = {name: subprocess.PIPE for name, number in (("stdout", 1), ("stderr", 2))
                if number != stream}
    return subprocess.run(["sh", "-c", f'exec "$@" {stream}>&-', "sh", sys.executable, "-m",
                           "vm.cli", *argv], text=True, cwd=ROOT, **captured)


def test_a_closed_standard_output_is_named():
    """`ltvm asm p.sq >&-` ended in an AttributeError traceback ('NoneType' has no 'write')."""
    done = _with_closed(1, "asm", FACTORIAL)
    assert (done.returncode, done.stderr) == (2, "ltvm: error: Bad file descriptor: "
                                                 "standard output\n")


def test_a_closed_standard_error_discards_the_progress_line(tmp_path):
    """`ltvm run p.sq 2>&-` died on its first progress report, which asked the closed stream
    whether it was a terminal: no result and exit 1."""
    path = tmp_path / "inf.sq"
    path.write_text(INFINITE_LOOP)
    done = _with_closed(2, "run", str(path), "--engine", "reference", "--max-steps", "100000")
    assert done.returncode == 1  # did not halt
    assert done.stdout.splitlines()[-2:] == ["steps: 100000", "z = 0"]


def test_a_closed_standard_input_reads_as_empty():
    """`ltvm repl p.sq <&-` ended in an AttributeError traceback; it reads no command."""
    done = _with_closed(0, "repl", FACTORIAL, "--history", os.devnull)
    assert done.returncode == 0 and done.stdout.startswith("loaded ")


SWALLOW_THEN_WAIT = """
import sys
from vm.cli import asm, main

class Dropped:
    def __del__(self):  # what is raised here, Python prints and drops
        print("in __del__", flush=True)
        sys.stdin.readline()

def write_and_wait(path):
    Dropped()
    print("writing", flush=True)
    sys.stdin.readline()

asm.open_for_writing = write_and_wait
sys.exit(main(sys.argv[1:]))
"""


def test_a_sigterm_after_one_python_dropped_still_ends_the_command(tmp_path):
    """A SIGTERM raised in a `__del__` is dropped by Python, and the next ones were ignored:
    the command could no longer be stopped by SIGTERM."""
    output = tmp_path / "x.npy"
    command = _asm_under(SWALLOW_THEN_WAIT, output)
    try:
        assert command.stdout.readline() == "in __del__\n"
        command.send_signal(signal.SIGTERM)
        assert command.stdout.readline() == "writing\n"
        command.send_signal(signal.SIGTERM)
        _, err = command.communicate(timeout=30)
    finally:
        command.kill()
    assert command.returncode == 143 and err.endswith("ltvm: terminated (SIGTERM)\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option", [["--device", "garbage"], ["--dtype", "float64"],
                                    ["--temperature", "1"], ["--checked"],
                                    ["--attention", "dense"], ["--evaluation", "full"]])
def test_run_on_the_reference_refuses_the_transformers_options(option, capsys):
    """They were silently ignored: `--engine reference --device garbage` exited 0."""
    code, out, err = run_cli(capsys, "run", FACTORIAL, "--engine", "reference", *option)
    assert code == 2 and out == ""
    assert err == (f"ltvm: error: {option[0]}: a transformer option, but --engine reference "
                   "runs no transformer\n")


def test_run_on_the_reference_names_several_transformer_options_in_the_plural(capsys):
    code, _, err = run_cli(capsys, "run", FACTORIAL, "--engine", "reference", "--checked",
                           "--dtype", "float64")
    assert code == 2 and "--dtype, --checked: transformer options, but" in err


@pytest.mark.parametrize("option, reason", [(["--checked"], "--checked"),
                                            (["--attention", "dense"], "dense attention")])
@pytest.mark.parametrize("evaluation", ["active", "fused"])
def test_an_evaluation_that_cannot_apply_is_named(option, reason, evaluation, capsys):
    """`--evaluation fused --checked` ran every pass in full without a word."""
    if evaluation == "fused":
        pytest.importorskip("numba")
    code, out, err = run_cli(capsys, "run", FACTORIAL, "--evaluation", evaluation, *option)
    assert code == 0 and "halted: yes" in out
    assert err == (f"ltvm: note: {reason} runs every pass in full (--evaluation {evaluation} "
                   "does not apply)\n")


def test_the_default_evaluation_adds_no_note(capsys):
    code, _, err = run_cli(capsys, "run", FACTORIAL, "--checked")
    assert code == 0 and err == ""


@pytest.mark.parametrize("command", [["run"], ["run", "--engine", "reference"], ["compare"]])
def test_max_seconds_counts_the_loading(command, capsys, monkeypatch, tmp_path):
    """run and compare started the clock after loading: `compare wide.sq --max-seconds 2` on
    60,000 columns took 14 s. Here the loading takes (by the command's clock) an hour."""
    import time
    from vm.cli import common

    load = common.load_program

    def slow_load(args):
        loaded = load(args)
        monkeypatch.setattr(time, "monotonic", lambda: real() + 3600)
        return loaded
    real = time.monotonic
    monkeypatch.setattr(f"vm.cli.{command[0]}.load_program", slow_load)
    path = tmp_path / "inf.sq"
    path.write_text(INFINITE_LOOP)
    code, _, err = run_cli(capsys, *command, str(path), "--max-steps", "5000",
                           "--max-seconds", "60")
    assert code == 1
    assert "stopped by --max-seconds 60 after " in err


def test_run_trace_obeys_max_seconds(capsys, tmp_path):
    """--trace ignored --max-seconds: the run went on to --max-steps in silence."""
    path = tmp_path / "inf.sq"
    path.write_text(INFINITE_LOOP)
    code, out, err = run_cli(capsys, "run", str(path), "--trace", "--max-steps", "3000",
                             "--max-seconds", "0.2")
    assert code == 1 and out == ""
    assert err.startswith("ltvm: error: stopped by --max-seconds 0.2 after ")


def test_a_block_parameter_given_twice_is_refused(capsys):
    """`--param mul.scale=1e-4 --param mul.scale=1e-5` ran with the last in silence."""
    code, out, err = run_cli(capsys, "run", str(ROOT / "programs" / "fleq" /
                                                 "newton_reciprocal.fleq"),
                             "--param", "mul.scale=1e-4", "--param", "mul.scale=1e-5")
    assert (code, out) == (2, "")
    assert err == "ltvm: error: --param mul.scale is given twice (0.0001 and 1e-05)\n"


@pytest.mark.parametrize("argv", [["asm", FACTORIAL, "--bits"], ["asm", FACTORIAL, "--scratch"],
                                  ["trace", FACTORIAL, "--step"],
                                  ["attention", "--m", "4", "--mode", "full", "--n"],
                                  ["rope", "--n"], ["bench", "vsubleq", "--bits"]])
@pytest.mark.parametrize("value", ["\u0668", "\uff18", "1_6", "8.0", "0x8", ""])
def test_integer_options_take_ascii_digits_only(argv, value, capsys):
    """int() reads other scripts' digits: `--bits ٨` (Arabic-Indic eight) assembled with
    8-bit words, `--bits ８` (fullwidth) too, and `1_6` was 16."""
    with pytest.raises(SystemExit) as stopped:
        main([*argv, value])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        f"'{value}' is not an integer (digits 0-9)")


def test_an_integer_option_of_thousands_of_digits_is_refused_in_one_short_line(capsys):
    """int() raised ValueError past 4,300 digits, reported as 'not an integer' with all
    5,000 digits echoed."""
    with pytest.raises(SystemExit) as stopped:
        main(["asm", FACTORIAL, "--bits", "9" * 5_000])
    assert stopped.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.endswith("has more than 4300 digits") and len(last) < 120


@pytest.mark.parametrize("value, bits", [(" 12 ", 12), ("+12", 12), ("012", 12)])
def test_an_integer_option_in_ascii_digits_is_read(value, bits, capsys):
    assert main(["asm", FACTORIAL, "--bits", value]) == 0
    assert f"N={bits}-bit words" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["\u0665", "\uff15", "\u0660.\u0665", "1_0"])
@pytest.mark.parametrize("argv", [["run", FACTORIAL, "--max-seconds"],
                                  ["bench", "vsubleq", "--seconds"]])
def test_number_options_take_ascii_digits_only(argv, value, capsys):
    """float() reads other scripts' digits: `--max-seconds ٥` (Arabic-Indic five) ran with
    a 5 s limit."""
    with pytest.raises(SystemExit) as stopped:
        main([*argv, value])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"'{value}' is not a number")


@pytest.mark.parametrize("value", ["\u0660.\u0665", "1_0"])
def test_a_block_parameter_takes_ascii_digits_only(value, capsys):
    """`--param mul.scale=٠.٥` ran with scale 0.5."""
    code, out, err = run_cli(capsys, "asm", str(ROOT / "programs" / "fleq" /
                                                 "newton_reciprocal.fleq"),
                             "--param", f"mul.scale={value}")
    assert (code, out) == (2, "")
    assert err == f"ltvm: error: --param mul.scale={value}: expected FUNC.KEY=NUMBER\n"


@pytest.mark.parametrize("value", ["1e-310", "1e-400"])
def test_a_block_parameter_below_the_smallest_normal_number_is_refused(value, capsys):
    """A .function header refuses it; `--param mul.scale=1e-310` built weights past float64
    ('not finite'), and 1e-400, read as 0, said 'mul.scale must be in (0, 1]'."""
    code, out, err = run_cli(capsys, "asm", str(ROOT / "programs" / "fleq" /
                                                 "newton_reciprocal.fleq"),
                             "--param", f"mul.scale={value}")
    assert (code, out) == (2, "")
    assert err.startswith(f"ltvm: error: --param mul.scale={value}: the number is too small "
                          "for float64")


@pytest.mark.parametrize("argv, option", [
    (["asm", FACTORIAL, "--bits", "8", "--bits", "16"], "--bits"),
    (["asm", FACTORIAL, "--bits", "8", "--bit", "16"], "--bits"),  # an abbreviation
    (["asm", FACTORIAL, "-o", "a.npy", "--output", "b.npy"], "-o/--output"),
    (["bench", "vsubleq", "--words", "256", "--words", "512"], "--words"),
])
def test_an_option_given_twice_is_refused(argv, option, capsys, tmp_path, monkeypatch):
    """argparse kept the last value in silence: `asm --bits 8 --bits 16` assembled 16-bit
    words, and `-o a.npy --output b.npy` wrote b.npy alone."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"ltvm {argv[0]}") and f"argument {option}: given twice (" in last
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, shown", [
    (["run", FACTORIAL, "--max-seconds", "5", "--max-seconds", "6"], "(5 and 6)"),
    (["bench", "--columns", "64,128", "--columns", "256"], "(64,128 and 256)"),
    (["run", "--csv", "c.csv", "m.csv", "--csv", "d.csv", "n.csv"],
     "(c.csv m.csv and d.csv n.csv)"),
])
def test_an_option_given_twice_shows_both_values_as_typed(argv, shown, capsys):
    """The values were shown as Python had converted them: (5.0 and 6.0), ([64, 128] and
    [256]), (['c.csv', 'm.csv'] and ...)."""
    with pytest.raises(SystemExit):
        main(argv)
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"given twice {shown}; give it once")


@pytest.mark.parametrize("command", ["run", "compare", "asm", "inspect", "export", "trace",
                                     "sample", "demo"])
def test_an_empty_prog_is_refused_as_an_empty_path(command, capsys):
    """`run ""` said 'no program given' (and inspect asked for --memory), while `repl ""`
    said the path is empty: one message for all."""
    with pytest.raises(SystemExit) as stopped:
        main([command, ""])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "argument PROG: an empty path names no file")


def test_a_repeatable_option_is_not_taken_as_given_twice(capsys):
    assert main(["calc", "x+y", "--set", "x=1", "--set", "y=2"]) == 0
    assert "3" in capsys.readouterr().out


def test_a_bad_number_option_is_quoted_short_and_without_control_characters(capsys):
    """The whole value was echoed, an ESC in it included (it recoloured the terminal)."""
    for value, shown in (("5\x1b[31m", "'5\\x1b[31m'"), ("x" * 5_000, f"'{'x' * 40}...'")):
        with pytest.raises(SystemExit):
            main(["run", FACTORIAL, "--max-seconds", value])
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"ltvm run: error: argument --max-seconds: {shown} is not a number")


@pytest.mark.parametrize("command", ["run", "compare", "repl", "trace"])
def test_every_exact_command_refuses_the_options_of_ltvm_sample_in_the_same_words(command,
                                                                                 capsys):
    """compare named `ltvm sample`'s options it refused; run, repl and trace said only
    'unrecognized arguments: --noise 1 --cell n'."""
    assert main([command, FACTORIAL, "--noise", "1", "--cell", "n"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"ltvm: error: --noise, --cell: options of `ltvm sample`; "
                            f"{command} runs the exact transformer (--temperature is the "
                            f"softmax's)\n")


@pytest.mark.parametrize("stop, code, message", [
    (signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_a_stop_python_dropped_in_a_del_still_ends_the_command(monkeypatch, capsys, stop, code,
                                                               message):
    """A Ctrl-C or SIGTERM whose exception was raised inside a `__del__` was printed as a
    traceback and dropped by Python, and the command went on to exit 0 as if not stopped."""
    from vm.cli import asm

    class Dropped:
        def __del__(self) -> None:
            signal.raise_signal(stop)  # the handler raises here, in the __del__

    def load_then_drop(args):
        Dropped()
        return load_program(args)
    load_program = asm.load_program
    monkeypatch.setattr(asm, "load_program", load_then_drop)
    assert run_cli(capsys, "asm", FACTORIAL)[::2] == (code, f"ltvm: {message}\n")


STOPPED_THEN_CTRL_C_AT_EXIT = """
import atexit, signal, sys
from vm.cli import asm, main

def stopped(args):
    raise KeyboardInterrupt

def ctrl_c_again():
    signal.raise_signal(signal.SIGINT)  # a second Ctrl-C, as the interpreter shuts down
    print("the shutdown went on", flush=True)

asm.run = stopped
atexit.register(ctrl_c_again)
sys.exit(main())
"""


def test_a_second_ctrl_c_after_the_command_was_stopped_ends_it_silently():
    """A second Ctrl-C while a stopped command was exiting raised a KeyboardInterrupt
    traceback out of main or out of torch's atexit callbacks, after 'ltvm: interrupted'."""
    done = subprocess.run([sys.executable, "-c", STOPPED_THEN_CTRL_C_AT_EXIT, "asm", FACTORIAL],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (-signal.SIGINT, "",
                                                           "ltvm: interrupted\n")


def test_every_option_and_argument_of_every_command_has_a_help_text():
    """bench's --dtype and --attention and sample's --strategy had none: --help listed
    them with nothing to say what they do or what they default to."""
    def undescribed(parser: argparse.ArgumentParser, path: str) -> list[str]:
        found = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, command in action.choices.items():
                    found += undescribed(command, f"{path} {name}")
            elif not action.help:
                found.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
        return found
    assert undescribed(build_parser(), "ltvm") == []


@pytest.mark.parametrize("argv, usage", [(["run", FACTORIAL, "--bogus"], "usage: ltvm run "),
                                         (["bench", "rope", "--bogus"], "usage: ltvm bench rope ")])
def test_a_command_refuses_words_it_does_not_take_with_its_own_usage(argv, usage, capsys):
    """`ltvm run prog --bogus` showed ltvm's usage ('COMMAND ...') and 'ltvm: error', not
    the command's."""
    with pytest.raises(SystemExit) as exit:
        main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.startswith(usage)
    assert err.endswith(f"{' '.join(usage.split()[1:])}: error: unrecognized arguments: "
                        "--bogus\n")
