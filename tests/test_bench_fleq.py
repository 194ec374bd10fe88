"""`ltvm bench fleq`: the FLEQ pass timing and its built-in workloads."""

from __future__ import annotations

import json

import numpy as np
import torch

from vm.machines.fleq.punchcard import fleq_geometry_for
import vm.tools.bench
from vm.runtime.config import EngineConfig
from vm.tools.bench import fleq_workload
from vm.cli import main
from vm.machines.fleq.reference import run_fleq_reference
from vm.machines import machine_for

torch.set_num_threads(1)


def test_bench_fleq_prints_one_row_per_program_and_batch(capsys):
    code = main(["bench", "fleq", "calculator", "--batch", "1,2", "--seconds", "0.05"])
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith("| calculator |")]
    assert code == 0 and len(rows) == 2
    assert [int(row.split("|")[7]) for row in rows] == [1, 2]
    assert all(float(row.split("|")[13].replace(",", "")) > 0 for row in rows)
    assert all(row.split("|")[11].strip() == "active" for row in rows)


def test_bench_fleq_times_the_evaluation_asked_for(capsys):
    code = main(["bench", "fleq", "calculator", "--evaluation", "full", "--seconds", "0.05",
                 "--json"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert code == 0 and [row["evaluation"] for row in rows] == ["full"]
    assert rows[0]["full_passes"] == 0


def test_bench_fleq_sets_the_reference_interpreter_beside_every_row(capsys):
    code = main(["bench", "fleq", "calculator", "--batch", "1,2", "--seconds", "0.05",
                 "--json"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert code == 0 and len(rows) == 2
    for row in rows:
        assert row["reference_steps_per_second"] > 0
        assert np.isclose(row["ratio"], row["program_steps_per_second"]
                          / row["reference_steps_per_second"])
        assert np.isclose(row["program_steps_per_second"], row["batch"] / row["seconds_per_pass"])


def test_bench_fleq_shows_a_file_name_escaped(capsys, tmp_path):
    """An ESC in a .fleq file's name was printed raw in the progress line and the table, and
    drove the terminal."""
    source = tmp_path / "c\x1b[31m.fleq"
    source.write_text(".data\nx: 1.0\n.code\nx = add(x, x)\nhalt\n")
    assert main(["bench", "fleq", str(source), "--seconds", "0.05"]) == 0
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out + captured.err
    assert f"| '{tmp_path}/c\\x1b[31m.fleq' | 1 |" in captured.out


def test_bench_fleq_refuses_an_unknown_workload(capsys):
    code = main(["bench", "fleq", "no-such-workload", "--seconds", "0.05"])
    assert code == 2 and "no FLEQ workload or file named" in capsys.readouterr().err


def test_bench_fleq_names_an_empty_path_as_given(capsys):
    """'' was read as the current directory: 'cannot read .: Is a directory'."""
    code = main(["bench", "fleq", "", "--seconds", "0.05"])
    assert code == 2 and capsys.readouterr().err == (
        "ltvm: error: no FLEQ workload or file named '' (built-in: calculator, inverse-d8)\n")


def test_bench_fleq_says_a_directory_is_one(capsys, tmp_path):
    """A directory named x.fleq was 'no FLEQ workload or file named', as if missing."""
    (tmp_path / "x.fleq").mkdir()
    code = main(["bench", "fleq", str(tmp_path / "x.fleq"), "--seconds", "0.05"])
    assert code == 2 and "Is a directory" in capsys.readouterr().err


def test_inverse_d8_is_a_d8_machine_with_a_many_head_layer_and_runs_exactly():
    program = fleq_workload("inverse-d8")
    weights = machine_for(fleq_geometry_for(program), None).weights
    assert program.d == 8 and max(weights.heads) >= 64
    exact = run_fleq_reference(program, 1000)
    memory = program.named_memory(exact.cells)
    assert exact.halted and np.isclose(float(np.ravel(memory["y"])[0]), 0.5)


def test_bench_fleq_refuses_a_bad_file_or_batch_before_timing_anything(capsys, monkeypatch,
                                                                        tmp_path):
    """The first workload used to be timed (and its row thrown away) before a bad file
    named after it or a batch beyond memory was found."""
    def never_timed(*args, **kwargs):
        raise AssertionError("a measurement started before every workload was checked")
    monkeypatch.setattr(vm.tools.bench, "timed", never_timed)
    bad = tmp_path / "bad.fleq"
    bad.write_text("x\n")
    assert main(["bench", "fleq", "calculator", str(bad), "--seconds", "0.05"]) == 2
    assert "bad.fleq:1:1" in capsys.readouterr().err
    assert main(["bench", "fleq", "calculator", "--batch", "1,1000000000",
                 "--seconds", "0.05"]) == 2
    assert "run fewer programs" in capsys.readouterr().err


def test_bench_fleq_warms_up_with_the_run_that_measures_its_length(monkeypatch):
    """A row ran the program once to learn its length, then made a second runner and
    warmed it up with another whole run: one untimed, unreported run and set-up more than
    --seconds asked for (70 s of a 3-minute row at n = 32,359). Now that first run is the
    warm-up, and a row makes one runner."""
    from vm.runtime.executor import TransformerExecutor
    from vm.tools.bench import bench_fleq
    made, advanced = [], []
    runner_of = TransformerExecutor.runner

    def counted_runner(self, X):
        runner = runner_of(self, X)
        made.append(runner)
        advance = runner.advance
        runner.advance = lambda passes, *args, **kwargs: (advanced.append(passes),
                                                          advance(passes, *args, **kwargs))
        return runner
    monkeypatch.setattr(TransformerExecutor, "runner", counted_runner)
    row, = bench_fleq(["calculator"], [1], EngineConfig(evaluation="full"), 1e-6)
    assert len(made) == 1
    length = int(made[0].result().steps.max())
    assert advanced[0] == vm.tools.bench.FLEQ_BENCH_STEPS and advanced[1:] == [length]
    assert row.warmup_seconds > 0 and row.seconds_per_pass > 0


def test_bench_fleq_refuses_a_file_of_another_instruction_set_by_its_suffix(capsys, tmp_path):
    """A .sq file was parsed as FLEQ and refused at its first instruction: "unexpected 'b';
    expected ':', '='"."""
    source = tmp_path / "p.sq"
    source.write_text(".data\na: 3\nb: 0\n.code\n  subleq b, a\nhalt\n")
    code = main(["bench", "fleq", str(source), "--seconds", "0.05"])
    assert code == 2 and capsys.readouterr().err == (
        f"ltvm: error: {source}: ltvm bench fleq times FLEQ programs (.fleq), not '.sq' "
        "files\n")
