"""`ltvm rope`: figures on a small instance, exit 2 with one message for bad sizes."""

from __future__ import annotations

import json
import math
import re

import pytest

from vm.cli import main, rope


def test_small_run_reports_error_time_memory_and_rank(capsys):
    assert main(["rope", "--n", "64", "--d", "4", "--degree", "8", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rank"] == 495
    assert report["error"] < 1e-6
    assert report["exact_time"] > 0 and report["fast_time"] > 0
    assert report["factor_memory"] > 0


def test_skip_exact_runs_only_the_fast_path(capsys):
    assert main(["rope", "--n", "32", "--form", "general", "--degree", "2", "--skip-exact"]) == 0
    out = capsys.readouterr().out
    assert "rank: 45" in out and "error:" not in out.replace("exp_error:", "")


@pytest.mark.parametrize("argv, message", [
    (["--n", "200000"], "--n must be between 1 and 131072"),
    (["--n", "0"], "--n must be between"),
    (["--n", "8", "--d", "17"], "--d must be between 1 and 16"),
    (["--n", "8", "--d", "5"], "--d must be even"),
    (["--n", "8", "--degree", "9"], "--degree must be between 0 and 8"),
    (["--n", "8", "--bound", "inf"], "--bound must be finite and positive"),
    (["--n", "8", "--bound", "-1"], "--bound must be finite and positive, got -1\n"),
    (["--n", "8", "--bound", "0"], "--bound must be finite and positive, got 0\n"),  # was 0.0
    (["--n", "64", "--bound", "1000"], "--bound must be between 1e-30 and 350"),
    (["--n", "64", "--bound", "1e308"], "--bound must be between 1e-30 and 350"),
    (["--n", "64", "--bound", "351", "--json"], "--bound must be between 1e-30 and 350"),
    (["--n", "64", "--bound", "1e-308"], "--bound must be between 1e-30 and 350"),
    (["--n", "64", "--bound", "1e-31", "--json"], "--bound must be between 1e-30 and 350"),
    # minutes of silent set-up that --max-seconds could not stop
    (["--n", "2", "--d", "8", "--form", "general", "--max-seconds", "5"],
     "enumerates 2,042,975 monomials before it starts"),
    (["--n", "8", "--form", "diagonal"], "unknown form"),
    (["--n", "8", "--d", "16", "--degree", "8"], "GiB of factors"),
    # counted 2.7 GiB (under the limit) and held 5.4: the final einsum copies both sides
    (["--n", "8", "--d", "16", "--degree", "5"], "GiB of factors"),
    (["--n", "65536"], "pass --skip-exact"),
])
def test_bad_sizes_exit_2_with_one_message(capsys, argv, message):
    assert main(["rope", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
    assert captured.out == ""


def test_bench_rope_quick_writes_its_table_csv_and_plot(tmp_path, capsys):
    assert main(["bench", "rope", "--quick", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "rope_gradient.csv", "rope_gradient.md", "rope_gradient.png"]
    table = (tmp_path / "rope_gradient.md").read_text()
    assert "ltvm bench rope" in table and "General W_(i-j) form" in table
    assert "Bounded-entry boundary" in table and "d = 8, smallest degree" in table


def test_bench_rope_runs_only_the_sections_asked_for(tmp_path, capsys):
    assert main(["bench", "rope", "--quick", "--sections", "boundary", "--out",
                 str(tmp_path)]) == 0
    table = (tmp_path / "rope_gradient.md").read_text()
    assert "Bounded-entry boundary" in table
    assert "Time vs n" not in table and "General W_(i-j)" not in table and "d = 8" not in table
    rows = (tmp_path / "rope_gradient.csv").read_text().splitlines()[1:]
    assert rows and all(",boundary," in row for row in rows)


@pytest.mark.parametrize("argv, message", [
    (["--degree", "0"], "must be between"), (["--degree", "9"], "must be between"),
    (["--max-exact-n", "100"], "must be between"),
    (["--max-exact-n", "131072"], "must be between"),
    (["--sections", "time,speed"], "--sections takes"), (["--sections", ","], "--sections takes"),
])
def test_bench_rope_refuses_bad_arguments(argv, message, capsys, tmp_path):
    assert main(["bench", "rope", "--out", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def strict_json(text: str) -> dict:
    """json.loads that refuses NaN and Infinity, which are not JSON."""
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("form, d", [("rotary", 4), ("general", 2)])
@pytest.mark.parametrize("bound", ["350", "1e-30"])
def test_the_extreme_bounds_give_finite_figures(form: str, d: int, bound: str, capsys):
    """B = 360 printed exp_error inf, B = 1000 (and 1e-100) NaN with exit 0; at the limits
    every figure is a number."""
    assert main(["rope", "--n", "64", "--d", str(d), "--form", form, "--bound", bound,
                 "--json"]) == 0
    report = strict_json(capsys.readouterr().out)
    assert all(math.isfinite(value) for value in report.values() if isinstance(value, float))
    if bound == "1e-30":
        assert report["error"] < 1e-12


def test_a_non_finite_figure_is_a_precision_failure(monkeypatch, capsys):
    monkeypatch.setattr("vm.attention.rope.polynomial.exp_error_bound",
                        lambda bound, degree: float("nan"))
    assert main(["rope", "--n", "16", "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "precision error: exp_error" in captured.err


@pytest.mark.parametrize("seed", [str(2 ** 64), "-1"])
def test_seeds_torch_cannot_take_are_refused_by_the_parser(seed: str, capsys):
    """2^64 raised 'Overflow when unpacking long long' from torch's manual_seed."""
    with pytest.raises(SystemExit) as stop:
        main(["rope", "--n", "8", "--seed", seed])
    captured = capsys.readouterr()
    assert stop.value.code == 2 and "--seed" in captured.err and "Traceback" not in captured.err


@pytest.mark.parametrize("form, d", [("rotary", 4), ("general", 3)])
def test_one_token_has_no_relative_error_to_report(form: str, d: int, capsys):
    """At n = 1 the exact gradient is 0: the relative error printed 0.0 although the fast
    gradient differs from it (max_abs_error > 0); it is undefined, so null."""
    assert main(["rope", "--n", "1", "--d", str(d), "--form", form, "--bound", "10",
                 "--json"]) == 0
    report = strict_json(capsys.readouterr().out)
    assert report["max_abs_error"] > 0 and report["error"] is None
    assert main(["rope", "--n", "1", "--d", str(d), "--form", form]) == 0
    assert "error: undefined" in capsys.readouterr().out


def test_max_seconds_stops_the_command_with_one_line(capsys):
    code = main(["rope", "--n", "3000", "--d", "4", "--max-seconds", "1e-9"])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and "Traceback" not in err
    assert re.fullmatch(r"ltvm: error: stopped by --max-seconds 1e-09 after \d+ percent of the "
                        r"fast gradient, before it finished\n", err)


@pytest.mark.parametrize("form", ["rotary", "general"])
def test_both_gradients_report_their_progress_to_the_end(form, monkeypatch, capsys):
    seen: dict[str, list[int]] = {}

    class Recording:
        def __init__(self, label: str, total: int, **_: object) -> None:
            self.label = label
            seen[label] = []

        def __call__(self, count: int) -> None:
            seen[self.label].append(count)

        def done(self) -> None:
            pass

    monkeypatch.setattr(rope, "Progress", Recording)
    # n = 700 gives the exact gradient two row blocks; degree 3, not the default 8, keeps
    # every stage of the general route (112 reports) at 0.3 s instead of 9 s
    assert main(["rope", "--n", "700", "--d", "4", "--degree", "3", "--form", form,
                 "--json"]) == 0
    assert "error" in json.loads(capsys.readouterr().out)
    for name in ("fast", "exact"):
        counts = seen[f"percent of the {name} gradient"]
        assert counts and counts == sorted(counts) and counts[-1] == 100


@pytest.mark.parametrize("bound", ["\u0661", "1_0", "one"])
def test_a_bound_not_written_in_ascii_digits_is_refused(capsys, bound):
    """float() read `--bound ١` (Arabic-Indic one) as 1 and ran."""
    with pytest.raises(SystemExit) as stopped:
        main(["rope", "--n", "8", "--bound", bound])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (f"ltvm rope: error: argument --bound: "
                                                       f"'{bound}' is not a number")
