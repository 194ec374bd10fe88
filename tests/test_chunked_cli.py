"""`ltvm attention` and the `attention` target of `ltvm bench`."""

from __future__ import annotations

import argparse
import csv
import json

import pytest
import torch

from vm.attention.chunked.bench import Config, measure_config, run_bench, run_worker_process
from vm.cli import attention, main
from vm.common.errors import InputError


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
