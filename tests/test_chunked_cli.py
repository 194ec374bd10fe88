"""`ltvm attention` and the `attention` target of `ltvm bench`."""

from __future__ import annotations

import argparse
import csv
import json
import re
from pathlib import Path

import pytest
import torch

from vm.attention.chunked import bench as bench_module
from vm.attention.chunked.bench import (Config, measure_config, run_bench, run_worker_process,
                                        worker_failure)
from vm.cli import attention, main
from vm.common.errors import InputError, RunFailure


@pytest.fixture(autouse=True)
def one_thread():
    """Small tensors: one torch thread avoids waiting on a busy second core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def parse_lines(text: str) -> dict[str, str]:
    pairs = [line.split(": ", 1) for line in text.strip().splitlines()]
    assert all(len(pair) == 2 for pair in pairs), text
    return dict(pairs)


@pytest.mark.parametrize("mode, extra", [
    ("exact", []), ("causal", ["--dtype", "float64"]), ("window", ["--window", "24"]),
    ("sink", ["--window", "20", "--sinks", "3"]), ("sampled", ["--score-scale", "0.3"]),
])
def test_each_mode_prints_its_figures(mode: str, extra: list[str], capsys) -> None:
    code = main(["attention", "--n", "300", "--m", "40", "--mode", mode, "--heads", "2",
                 "--layers", "2", "--oracle-heads", "2", *extra])
    assert code == 0
    lines = parse_lines(capsys.readouterr().out)
    for key in ("calls", "expected_calls", "error", "time", "memory"):
        assert key in lines
    assert lines["calls"] == lines["expected_calls"]
    assert lines["time"].endswith(" s") and lines["memory"].endswith(" MiB")
    if mode != "sampled":
        assert float(lines["error"]) <= (1e-10 if "float64" in extra else 1e-5)
    else:
        assert float(lines["normalizer_error"]) <= float(lines["normalizer_bound"])


def test_json_output_has_numbers(capsys) -> None:
    assert main(["attention", "--n", "200", "--m", "50", "--mode", "exact", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["calls"] == report["expected_calls"] == 2 * 5 ** 2
    assert report["error"] < 1e-5 and report["time"] > 0 and report["memory"] >= 0


@pytest.mark.parametrize("argv, message", [
    (["--n", "100", "--m", "200", "--mode", "exact"], "exceeds the sequence length"),
    (["--n", "0", "--m", "0", "--mode", "exact"], "positive"),
    (["--n", "100", "--m", "20", "--mode", "fast"], "unknown attention mode 'fast'"),
    (["--n", "100", "--m", "20", "--mode", "exact", "--heads", "0"], "--heads must be positive"),
    (["--n", "100", "--m", "20", "--mode", "window", "--window", "20"], "must exceed window"),
    (["--n", "100", "--m", "20", "--mode", "exact", "--dtype", "float16"], "unknown dtype"),
    (["--n", "100", "--m", "20", "--mode", "exact", "--window", "8"],
     "--window does not apply to mode exact"),
    (["--n", "100", "--m", "20", "--mode", "window", "--sinks", "3"],
     "--sinks does not apply to mode window"),
    (["--n", "100", "--m", "20", "--mode", "sampled", "--window", "8", "--sinks", "3"],
     "--window and --sinks do not apply to mode sampled"),
])
def test_bad_options_give_one_message_and_exit_2(argv: list[str], message: str, capsys) -> None:
    assert main(["attention", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("ltvm: error: ")
    assert message in captured.err


@pytest.mark.parametrize("option, value", [("--score-scale", "nan"), ("--score-scale", "inf"),
                                           ("--score-scale", "-1"), ("--threads", "0"),
                                           ("--threads", "100000")])
def test_bad_numbers_are_refused_by_the_parser(option: str, value: str, capsys) -> None:
    """A NaN score scale used to print `error: nan` and exit 0."""
    with pytest.raises(SystemExit) as stop:
        main(["attention", "--n", "64", "--m", "16", "--mode", "exact", option, value])
    assert stop.value.code == 2 and option in capsys.readouterr().err


@pytest.mark.parametrize("limit", ["nan", "inf", "0"])
def test_bench_refuses_a_memory_limit_that_is_not_a_positive_number(limit: str, tmp_path,
                                                                    capsys) -> None:
    """A NaN limit used to let full attention run at every N (minutes at N = 65536)."""
    with pytest.raises(SystemExit) as stop:
        main(["bench", "attention", "--full-limit-gib", limit, "--out", str(tmp_path / "b")])
    assert stop.value.code == 2 and "--full-limit-gib" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
    with pytest.raises(InputError, match="positive and finite"):
        run_bench(tmp_path / "c", [256], [64], full_limit_gib=float(limit))


def bench_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ltvm bench")
    attention.register_bench(parser.add_subparsers(dest="target"))
    return parser


def test_bench_target_parses_its_options() -> None:
    args = bench_parser().parse_args(["attention", "--n-values", "512,1024", "--m-values", "64",
                                      "--full-limit-gib", "0.5", "--out", "somewhere"])
    assert args.n_values == [512, 1024] and args.m_values == [64]
    assert args.full_limit_gib == 0.5 and str(args.out) == "somewhere"
    assert args.func is attention.run_bench_command


def test_bench_skips_full_attention_over_the_limit_and_writes_table_and_plot(tmp_path,
                                                                            capsys) -> None:
    rows = run_bench(tmp_path, [256, 512], [64], full_limit_gib=0.0005, head_dim=4,
                     error_limit=512, worker=measure_config)
    full = {row.n: row for row in rows if row.method == "full"}
    assert full[256].seconds is not None
    assert full[512].seconds is None and "skipped: estimated" in full[512].note
    assert "skipped: estimated" in capsys.readouterr().err
    simulated = [row for row in rows if row.method != "full"]
    assert {row.method for row in simulated} == {"exact", "window", "sampled"}
    exact = {row.n: row for row in simulated if row.method == "exact"}
    assert exact[512].calls == 2 * 9 ** 2 and exact[512].error < 1e-5
    with open(tmp_path / "attention.csv") as handle:
        assert len(list(csv.DictReader(handle))) == len(rows) == 8
    assert "| exact | 512 | 64 | 162 |" in (tmp_path / "attention.md").read_text()
    assert (tmp_path / "attention.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_worker_runs_in_a_fresh_process() -> None:
    measured = run_worker_process(Config("exact", 300, 40, 4, 10, 0, error_limit=300))
    assert measured["calls"] == 2 * 8 ** 2
    assert measured["seconds"] > 0 and measured["peak_bytes"] >= 0
    assert measured["error"] < 1e-5


def strict_json(text: str) -> dict:
    """json.loads that refuses NaN and Infinity, which are not JSON."""
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("mode", ["exact", "causal", "sampled"])
@pytest.mark.parametrize("scale, dtype", [("1e200", "float32"), ("1e39", "float32"),
                                          ("88", "float32"), ("709", "float64")])
def test_score_scales_beyond_the_dtype_are_refused_before_work(mode: str, scale: str,
                                                              dtype: str, capsys) -> None:
    """From 1e39 in float32 the scores overflowed to inf: `error: nan` (sampled: `d: inf`)
    with exit 0."""
    assert main(["attention", "--n", "64", "--m", "16", "--mode", mode, "--dtype", dtype,
                 "--score-scale", scale]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "--score-scale" in captured.err and "exceeds the limit of" in captured.err


def test_infinite_bounds_of_theorem_4_1_are_null_in_json(capsys) -> None:
    """C beyond e^700 (float64 scores near 700) printed Infinity, which is not JSON."""
    assert main(["attention", "--n", "64", "--m", "16", "--mode", "sampled", "--dtype",
                 "float64", "--score-scale", "200", "--json"]) == 0
    report = strict_json(capsys.readouterr().out)
    assert report["c"] is None and report["bound"] is None
    assert report["normalizer_bound"] is None and report["d"] > 0


def test_a_non_finite_error_is_a_precision_failure(monkeypatch, capsys) -> None:
    monkeypatch.setattr("vm.attention.chunked.reference.relative_error",
                        lambda approx, exact: float("nan"))
    assert main(["attention", "--n", "64", "--m", "16", "--mode", "exact", "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "precision error" in captured.err


HUGE_SEED = str(2 ** 64)


@pytest.mark.parametrize("argv", [
    ["attention", "--n", "64", "--m", "16", "--mode", "exact", "--seed", HUGE_SEED],
    ["attention", "--n", "64", "--m", "16", "--mode", "exact", "--seed", "-1"],
    ["bench", "attention", "--seed", HUGE_SEED],
])
def test_seeds_torch_cannot_take_are_refused_by_the_parser(argv: list[str], capsys) -> None:
    """2^64 raised 'Overflow when unpacking long long' from torch's manual_seed."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    captured = capsys.readouterr()
    assert stop.value.code == 2 and "--seed" in captured.err and "Traceback" not in captured.err


def test_the_largest_seed_runs(capsys) -> None:
    assert main(["attention", "--n", "32", "--m", "8", "--mode", "exact", "--seed",
                 str(2 ** 63 - 1)]) == 0


@pytest.mark.parametrize("argv, message", [
    (["--n", "65536", "--m", "2", "--mode", "exact"], "8,589,934,592 oracle calls"),
    (["--n", "4096", "--m", "4", "--mode", "exact", "--heads", "64"], "oracle calls"),
    (["--n", "30000", "--m", "20000", "--mode", "exact"], "--m 20000 exceeds the limit of 16384"),
    (["--n", "2000000", "--m", "16", "--mode", "window"], "exceeds the limit of 1048576"),
    (["--n", "1048576", "--m", "16384", "--mode", "window", "--heads", "64", "--head-dim",
      "1024"], "more than the limit of 4 GiB"),
])
def test_infeasible_instances_are_refused_before_work(argv: list[str], message: str,
                                                      capsys) -> None:
    """M = 2 at N = 65536 asked for 8.6 billion oracle calls (days); M = 20000 for a 1.5 GiB
    score matrix a call; 64 heads of 1024 at N = 2^20 for a 512 GiB input."""
    assert main(["attention", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err


@pytest.mark.parametrize("argv, message", [
    (["--n-values", "10000000000", "--m-values", "16"], "--n-values 10000000000 exceeds"),
    (["--n-values", "3000000"], "--n-values 3000000 exceeds the limit of 65536"),
    (["--head-dim", "100000000"], "--head-dim 100000000 exceeds the limit of 1024"),
    (["--n-values", "30000", "--m-values", "20000"], "--m-values 20000 exceeds"),
    (["--n-values", "65536", "--m-values", "2"], "raise --m-values or lower --n-values"),
])
def test_bench_refuses_infeasible_sizes_before_work(argv: list[str], message: str, tmp_path,
                                                    capsys) -> None:
    """N = 10^10 printed the worker's whole traceback (can't allocate memory); N = 3,000,000
    ran for minutes."""
    assert main(["bench", "attention", "--out", str(tmp_path / "b"), *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and message in captured.err
    assert not (tmp_path / "b").exists()


def refuse_work(config: Config) -> dict:
    raise AssertionError(f"measured {config} before checking the output directory")


@pytest.mark.parametrize("out, message", [
    ("afile", "not a directory"), ("afile/sub", "is not a directory"),
    ("out", "it is a directory"),
])
def test_bench_checks_its_output_directory_before_any_work(out: str, message: str, tmp_path,
                                                           capsys) -> None:
    """An existing file as --out (or on its path, or a directory where the table goes) was
    refused only after all the measurements (8.5 s)."""
    (tmp_path / "afile").write_text("keep")
    (tmp_path / "out" / "attention.md").mkdir(parents=True)
    with pytest.raises(InputError, match=message):
        run_bench(tmp_path / out, [256], [64], head_dim=4, worker=refuse_work)
    assert main(["bench", "attention", "--n-values", "256", "--m-values", "64", "--out",
                 str(tmp_path / out)]) == 2
    assert message in capsys.readouterr().err
    assert (tmp_path / "afile").read_text() == "keep"


@pytest.mark.parametrize("out", ["/proc/ltvm-bench", "/proc/ltvm-bench/sub"])
def test_bench_tries_its_output_directory_before_any_work(out: str, monkeypatch) -> None:
    """access() lets root write anywhere: as root, --out /proc/x passed the check and was
    refused only after all the measurements (minutes at the default sizes)."""
    monkeypatch.setattr(bench_module.os, "access", lambda path, mode: True)  # root's answer
    with pytest.raises(InputError, match="cannot create /proc/ltvm-bench"):
        run_bench(Path(out), [256], [64], head_dim=4, worker=refuse_work)


def test_bench_creates_missing_output_directories(tmp_path) -> None:
    run_bench(tmp_path / "a" / "b", [64], [16], full_limit_gib=1, head_dim=2, error_limit=0,
              worker=lambda config: {"calls": 1, "seconds": 0.1, "peak_bytes": 1,
                                     "error": None, "method": "test"})
    assert (tmp_path / "a" / "b" / "attention.csv").exists()


def test_bench_writes_its_table_and_plot_all_or_none(monkeypatch, tmp_path) -> None:
    """A plot that failed left attention.md and attention.csv of the new run beside the
    previous run's attention.png."""
    def failing_plot(rows, path, head_dim):
        raise OSError(28, "No space left on device", str(path))
    monkeypatch.setattr(bench_module, "plot", failing_plot)
    (tmp_path / "out").mkdir()
    with pytest.raises(InputError, match="No space left on device"):
        run_bench(tmp_path / "out", [64], [16], full_limit_gib=1, head_dim=2, error_limit=0,
                  worker=lambda config: {"calls": 1, "seconds": 0.1, "peak_bytes": 1,
                                         "error": None, "method": "test"})
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("returncode, stderr, kind, message", [
    (1, "Traceback (most recent call last):\n  File \"x\", line 1\nRuntimeError: [enforce fail "
        "at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to "
        "allocate 640000000000 bytes.\n", InputError, "ran out of memory"),
    (-9, "", InputError, "out-of-memory killer"),
    (-11, "", RunFailure, "killed by signal SIGSEGV"),
    (2, "unknown attention mode 'x'\n", InputError, ": unknown attention mode 'x'"),
    (1, "Traceback (most recent call last):\nValueError: bad\n", RunFailure, "failed: ValueError"),
])
def test_a_failed_worker_is_one_line(returncode: int, stderr: str, kind: type, message: str
                                     ) -> None:
    error = worker_failure(Config("exact", 64, 16, 4, 4, 0, 0), returncode, stderr)
    assert type(error) is kind and message in str(error)
    assert "\n" not in str(error) and "Traceback" not in str(error)


def test_a_worker_out_of_memory_is_one_line() -> None:
    """--head-dim 100000000 printed the worker's traceback and exited 1."""
    with pytest.raises(InputError, match="ran out of memory") as caught:
        run_worker_process(Config("full", 2, 0, 10 ** 8, 0, 0, 0))
    assert "\n" not in str(caught.value)


def test_max_seconds_stops_the_simulation_with_one_line(capsys) -> None:
    """A long instance shows its progress and obeys --max-seconds: one RunFailure line, naming
    how far the simulation got, and nothing on stdout."""
    code = main(["attention", "--n", "2048", "--m", "64", "--mode", "exact",
                 "--max-seconds", "1e-9"])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and "Traceback" not in err
    assert re.fullmatch(r"ltvm: error: stopped by --max-seconds 1e-09 after [\d,]+ oracle "
                        r"calls?, before the simulation finished\n", err)


def test_progress_counts_every_oracle_call_and_every_reference_row(monkeypatch, capsys) -> None:
    seen: dict[str, list[int]] = {}

    class Recording:
        def __init__(self, label: str, total: int, **_: object) -> None:
            self.label, self.total = label, total
            seen[label] = []

        def __call__(self, count: int) -> None:
            seen[self.label].append(count)

        def done(self) -> None:
            seen[self.label].append(-self.total)

    monkeypatch.setattr(attention, "Progress", Recording)
    assert main(["attention", "--n", "300", "--m", "40", "--mode", "window", "--heads", "2",
                 "--layers", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    calls, rows = seen["oracle calls"], seen["reference rows"]
    assert calls[-2] == report["calls"] == -calls[-1] and calls[:-1] == sorted(calls[:-1])
    assert rows[-2] == 2 * 2 * 300 == -rows[-1] and rows[:-1] == sorted(rows[:-1])


def test_the_sampled_check_of_theorem_4_1_shows_progress_and_obeys_max_seconds(monkeypatch,
                                                                               capsys) -> None:
    """The check looks at all N^2 pairs of the first layer (twice the direct attention's
    time); it ran after both limited stages with no progress and past --max-seconds."""
    seen: list[int] = []

    class Recording:
        def __init__(self, label: str, total: int, **_: object) -> None:
            self.label, self.total = label, total

        def __call__(self, count: int) -> None:
            if self.label.startswith("first-layer"):
                seen.append(count)

        def done(self) -> None:
            if self.label.startswith("first-layer"):
                seen.append(-self.total)

    monkeypatch.setattr(attention, "Progress", Recording)
    assert main(["attention", "--n", "2500", "--m", "40", "--mode", "sampled", "--heads", "2",
                 "--json"]) == 0
    assert len(seen) > 3 and seen[-2] == 2 * 2500 == -seen[-1] and seen[:-1] == sorted(seen[:-1])
