"""`ltvm bench attention` (vm/attention/chunked/bench.py): the configurations it measures
and what its table says about the ones it skips."""

from __future__ import annotations

import csv
import re

import pytest

from vm.attention.chunked.bench import Config, run_bench
from vm.cli import main
from vm.common.errors import InputError


def fake_worker(measured: list[Config]):
    def worker(config: Config) -> dict:
        measured.append(config)
        return {"calls": 1, "seconds": 0.1, "peak_bytes": 1, "error": None, "method": "test"}
    return worker


def test_a_repeated_n_or_m_is_measured_once(tmp_path):
    """--n-values 64,64 --m-values 16,16 measured every configuration four times over and
    printed 14 rows for 4 configurations."""
    measured: list[Config] = []
    rows = run_bench(tmp_path, [64, 64], [16, 16], head_dim=2, error_limit=0,
                     worker=fake_worker(measured))
    assert [(row.method, row.n, row.m) for row in rows] == [
        ("full", 64, None), ("exact", 64, 16), ("window", 64, 16), ("sampled", 64, 16)]
    assert len(measured) == len(set(measured)) == 4
    assert (tmp_path / "attention.md").read_text().count("| exact | 64 | 16 |") == 1


@pytest.mark.parametrize("m_values, message", [
    ("128", "--m-values 128 is above every N of --n-values (at most 64)"),
    ("16,128,256", "--m-values 128,256 are above every N of --n-values (at most 64)"),
])
def test_an_m_above_every_n_is_refused_before_any_work(tmp_path, capsys, m_values, message):
    """--n-values 64 --m-values 128 measured full attention alone and exited 0: the M asked
    for was dropped without a word."""
    def refuse_work(config: Config) -> dict:
        raise AssertionError(f"measured {config}")
    with pytest.raises(InputError, match=re.escape(message)):
        run_bench(tmp_path / "a", [64], [int(m) for m in m_values.split(",")], head_dim=2,
                  worker=refuse_work)
    assert main(["bench", "attention", "--n-values", "64", "--m-values", m_values, "--out",
                 str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ltvm: error: {message}: no simulation would run at")
    assert err.count("\n") == 1
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_skipped_full_row_shows_an_estimate_that_exceeds_the_limit(tmp_path):
    """With --full-limit-gib 1e-6 the note read 'estimated 0.0 GiB > 1e-06 GiB limit'."""
    rows = run_bench(tmp_path, [64], [16], full_limit_gib=1e-6, head_dim=2, error_limit=0,
                     worker=fake_worker([]))
    assert rows[0].method == "full" and rows[0].seconds is None
    assert rows[0].note == "skipped: estimated 1.76e-05 GiB > 1e-06 GiB limit"


def test_a_fast_measurement_is_not_written_as_zero_seconds(tmp_path):
    """A full attention of 0.12 ms read 0.00 s in attention.md and 0.0000 in attention.csv,
    whose raw numbers lost every digit."""
    def worker(config: Config) -> dict:
        return {"calls": None if config.method == "full" else 1, "seconds": 0.000123456,
                "peak_bytes": 2 ** 20, "error": None, "method": "test"}
    run_bench(tmp_path, [64], [16], head_dim=2, error_limit=0, worker=worker)
    assert "| full | 64 |  |  | 0.00012 | 1.0 |  |  |" in (tmp_path / "attention.md").read_text()
    with open(tmp_path / "attention.csv") as handle:
        assert {row["seconds"] for row in csv.DictReader(handle)} == {"0.000123456"}


@pytest.mark.parametrize("argv, message", [
    (["--n-values", "64,1,-3"], "--n-values must be at least 2, got 1,-3"),
    (["--m-values", ","], "--m-values names no size: give comma-separated integers"),
    (["--head-dim", "0"], "--head-dim must be positive, got 0"),
])
def test_a_bad_size_is_named_with_its_option(tmp_path, capsys, argv, message):
    """Each said 'bench sizes must be at least 2 and the head dimension positive'."""
    out = tmp_path / "out"
    assert main(["bench", "attention", "--out", str(out), *argv]) == 2
    assert capsys.readouterr().err == f"ltvm: error: {message}\n"
    assert not out.exists()
