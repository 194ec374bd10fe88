"""`vm.tools.bench`: bounded timing with the warm-up apart, and the JSON rows."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

import vm.tools.bench
from vm.cli import main
from vm.tools.bench import timed


class FakeClock:
    """A clock that `work` advances by a fixed cost per item (plus a first-call cost)."""

    def __init__(self, per_item: float, first_call: float) -> None:
        self.now, self.per_item, self.first_call, self.calls = 0.0, per_item, first_call, 0
        self.sizes: list[int] = []

    def __call__(self) -> float:
        return self.now

    def work(self, items: int) -> None:
        self.now += items * self.per_item + (self.first_call if self.calls == 0 else 0.0)
        self.calls += 1
        self.sizes.append(items)


@pytest.mark.parametrize("per_item", [1e-6, 1e-3, 0.3, 5.0])
def test_timed_stays_within_its_budget_and_reports_the_warmup_apart(per_item):
    clock = FakeClock(per_item, first_call=7.0)
    timing = timed(clock.work, budget=2.0, clock=clock)
    assert timing.warmup_seconds == pytest.approx(7.0 + per_item)
    assert timing.per_second == pytest.approx(1 / per_item)
    measured = clock.now - timing.warmup_seconds
    assert timing.items >= 1
    assert measured <= max(2.0, per_item) + 1e-9


def test_bench_json_rows_carry_the_reference_and_the_ratio(capsys):
    code = main(["bench", "--columns", "16", "--batch", "1", "--seconds", "0.05", "--json"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert code == 0 and len(rows) == 1
    row = rows[0]
    assert row["ratio"] == pytest.approx(row["transformer_steps_per_second"]
                                         / row["reference_steps_per_second"])
    assert row["threads"] >= 1 and row["warmup_seconds"] > 0


def test_bench_reports_how_a_pass_grows_with_n_from_its_own_rows(capsys):
    """Issue 14's n^0.3 target was read off the table by hand; the bench now says it, from
    the rates it printed."""
    assert main(["bench", "--columns", "16,24", "--batch", "1", "--seconds", "0.05",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rates = {row["columns"]: row["transformer_steps_per_second"] for row in report["rows"]}
    [found] = report["growth"]
    assert (found["batch"], found["fewest"], found["most"]) == (1, 16, 24)
    assert found["exponent"] == pytest.approx(math.log(rates[16] / rates[24]) / math.log(1.5))
    ratios = {row["columns"]: row["ratio"] for row in report["rows"]}
    assert found["exponent_against_reference"] == pytest.approx(
        math.log(ratios[16] / ratios[24]) / math.log(1.5))
    assert main(["bench", "--columns", "16,24", "--batch", "1", "--seconds", "0.05"]) == 0
    assert "batch 1: a pass costs ~ n^" in capsys.readouterr().out


def test_bench_measures_a_size_named_twice_once(capsys):
    assert main(["bench", "--columns", "16,16", "--batch", "1,1", "--seconds", "0.05",
                 "--json"]) == 0
    assert [(row["columns"], row["batch"]) for row in
            json.loads(capsys.readouterr().out)["rows"]] == [(16, 1)]


@pytest.mark.parametrize("seconds", ["-1", "0", "inf", "nan", "x", "1e308", "3601"])
def test_bench_refuses_a_budget_that_is_not_a_positive_number_up_to_an_hour(capsys, seconds):
    with pytest.raises(SystemExit) as stop:
        main(["bench", "--seconds", seconds])
    assert stop.value.code == 2 and "--seconds" in capsys.readouterr().err


@pytest.mark.parametrize("target", [[], ["fleq"], ["vsubleq"], ["attention"]])
@pytest.mark.parametrize("threads", ["0", "257", "100000"])
def test_bench_refuses_a_thread_count_out_of_range_before_any_work(capsys, target, threads):
    """100,000 threads used to end in a segmentation fault."""
    with pytest.raises(SystemExit) as stop:
        main(["bench", *target, "--threads", threads])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--threads" in err and "Traceback" not in err


def test_bench_refuses_a_batch_beyond_memory_with_a_message(capsys):
    """100,000 programs at n = 4096 need terabytes: exit 2 at once, not a swap or a trace."""
    assert main(["bench", "--columns", "4096", "--batch", "100000", "--seconds", "0.1"]) == 2
    assert "run fewer programs" in capsys.readouterr().err


@pytest.mark.parametrize("unit", [1, 32])
def test_timed_calls_work_in_whole_units(unit):
    """A CUDA graph makes its passes in chunks: every call asks for a multiple of them."""
    clock = FakeClock(1e-4, first_call=0.5)
    timing = timed(clock.work, budget=1.0, clock=clock, unit=unit)
    assert clock.sizes[0] == unit and all(size % unit == 0 for size in clock.sizes)
    assert timing.items == sum(clock.sizes[1:]) and timing.items > unit


def never_timed(*args, **kwargs):
    raise AssertionError("a measurement started before every size was checked")


@pytest.mark.parametrize("columns, batch, message", [
    ("64,5", "1", "at least 6"), ("64,1", "1", "at least 6"),
    ("16", "1,1000000000", "run fewer programs")])
def test_bench_refuses_every_bad_size_before_timing_anything(capsys, monkeypatch, columns,
                                                             batch, message):
    """A bad value late in a list used to be found only after the rows before it were timed
    (and thrown away), and a huge batch after its list of programs was made; n = 5 silently
    ran the 6 columns its program needs while reporting 5."""
    monkeypatch.setattr(vm.tools.bench, "timed", never_timed)
    assert main(["bench", "--columns", columns, "--batch", batch, "--seconds", "0.05"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bench_json_stays_json_when_a_rate_is_not_finite(capsys, monkeypatch):
    """A non-finite figure (here a reference rate) is null, never the bare NaN that strict
    JSON readers refuse."""
    monkeypatch.setattr(vm.tools.bench.ReferenceSlices, "rate",
                        lambda slices: vm.tools.bench.ReferenceRate(math.nan, math.nan, math.nan))
    assert main(["bench", "--columns", "16", "--batch", "1", "--seconds", "0.05", "--json"]) == 0
    row = json.loads(capsys.readouterr().out,
                     parse_constant=lambda name: pytest.fail(f"{name} in JSON"))["rows"][0]
    assert row["reference_steps_per_second"] is None and row["ratio"] is None
    assert row["transformer_steps_per_second"] > 0


@pytest.mark.parametrize("target", ["fleq", "vsubleq", "attention", "rope"])
def test_bench_refuses_options_before_a_target_instead_of_ignoring_them(capsys, target):
    """`ltvm bench --device cuda fleq` timed the CPU and `--json vsubleq` printed a table:
    the target's own defaults replaced what was written before it."""
    with pytest.raises(SystemExit) as stop:
        main(["bench", "--device", "cuda", "--json", target, "-h"])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert f"--device, --json before '{target}' would be ignored: write them after it" in err


@pytest.mark.parametrize("window, pace, budget, one_pass, unit", [
    (128, 32, 0.5, 0.004, 96), (128, 32, 2.0, 0.004, 128), (128, 32, 0.01, 0.004, 32),
    (128, 1, 0.5, 0.004, 125), (128, 1, 0.001, 0.004, 1)])
def test_a_fused_run_is_timed_in_whole_calls_of_its_compiled_form(window, pace, budget,
                                                                  one_pass, unit):
    """An eager first pass of 4 ms made a budget of 0.5 s hold 125 passes: a CUDA graph
    run then made 29 of them eagerly in every timed call."""
    assert vm.tools.bench.fused_unit(window, pace, budget, one_pass) == unit


def test_timed_calls_of_a_graphed_run_make_no_eager_pass(monkeypatch):
    """With the CPU form of the CUDA graphs (chunks of 32 passes as Python calls) and a
    budget that holds 125 passes at the eager first pass's rate, every pass after the
    starting ones is a graph's (one thread, as on a GPU: on the CPU a run tries thread
    counts in calls of a few passes)."""
    from vm.runtime import executor as executor_module
    from vm.runtime.active import ActiveRun
    from vm.runtime.graphed import GRAPH_PASSES, GraphedPasses
    from vm.tools.workloads import looping_programs, workload_geometry
    monkeypatch.setattr(executor_module, "_compiled",
                        lambda evaluator, weights, compiles: GraphedPasses(evaluator))
    executor_module._active.cache_clear()
    eager, honest = [], ActiveRun.step

    def counted(run, step=0):
        eager.append(step)
        return honest(run, step)

    monkeypatch.setattr(ActiveRun, "step", counted)
    ticks = iter(range(4))  # the set-up's clock: a first pass of 4 ms, as on an H100
    monkeypatch.setattr(vm.tools.bench, "time",
                        SimpleNamespace(perf_counter=lambda: 0.002 * next(ticks)))
    program = looping_programs(workload_geometry(64), 1)[0]
    config = vm.tools.bench.EngineConfig(evaluation="fused", threads=1)  # no thread tries
    start = len(eager)
    try:
        timing, evaluation, _, _ = vm.tools.bench.transformer_speed(program, 4, config, 0.5)
    finally:
        executor_module._active.cache_clear()
    assert evaluation == "fused"
    assert len(eager) - start == vm.tools.bench.STARTING_PASSES + 1
    assert timing.items % (4 * GRAPH_PASSES) == 0


def test_the_reference_runs_before_the_first_chunk_and_after_each_for_as_long(monkeypatch):
    """The reference was timed half the budget just before a row and half just after, so a
    machine whose speed moved within seconds gave ratios 11-15 % apart (standard deviation
    over mean) in one minute. Now it runs in slices between the row's chunks: one of
    budget / SLICES before the first chunk, then after each chunk one as long as it took
    (at the rate found so far), none of it inside the row's timing."""
    clock = FakeClock(per_item=0.002, first_call=1.0)
    events: list[tuple[str, float]] = []

    def reference(steps: int) -> None:
        clock.now += steps * 1e-4
        events.append(("reference", steps))
    slices = vm.tools.bench.ReferenceSlices(reference, clock)

    def beside(seconds: float) -> None:
        before = clock.now
        slices(seconds)
        events.append(("slice", round(clock.now - before, 9)))
    timing = timed(clock.work, budget=1.0, clock=clock, beside=beside)
    assert timing.per_second == pytest.approx(500.0)
    chunks = [size * 0.002 for size in clock.sizes[1:]]
    spans = [seconds for kind, seconds in events if kind == "slice"]
    first_slice = 1.0 / vm.tools.bench.SLICES
    assert first_slice <= spans[0] < 2 * first_slice + 1e-9  # doubling steps from one
    assert spans[1:] == pytest.approx(chunks) and len(chunks) >= 10
    assert max(chunks) < 1.0 / vm.tools.bench.SLICES
    rate = slices.rate()
    assert (rate.per_second, rate.first, rate.second, rate.drift) == pytest.approx(
        (1e4, 1e4, 1e4, 0.0))


def test_the_reference_rate_and_its_drift_come_from_its_slices():
    """The rate is over every slice; the drift compares the second half of the slices with
    the first (two slices: the one before the row's chunks and the one after)."""
    clock = FakeClock(per_item=0.0, first_call=0.0)
    costs = iter([1e-3, 1e-3, 1e-3, 2e-3, 2e-3])  # seconds a step, slice by slice

    def reference(steps: int) -> None:
        clock.now += steps * cost
    slices = vm.tools.bench.ReferenceSlices(reference, clock)
    for seconds in (0.5, 0.2, 0.2, 0.2, 0.2):
        cost = next(costs)
        slices(seconds)
    steps = [count for count, _ in slices.slices]
    assert steps[0] == 511 and steps[1:4] == [200, 200, 200]  # 1 + 2 + ... + 256 steps first
    rate = slices.rate()
    assert rate.first == pytest.approx(1000.0)
    assert rate.second == pytest.approx(sum(steps[2:]) / (
        steps[2] * 1e-3 + (steps[3] + steps[4]) * 2e-3))
    assert rate.drift == pytest.approx(rate.second / 1000.0 - 1) and rate.drift < -0.2
    assert rate.per_second == pytest.approx(sum(steps) / (
        (steps[0] + steps[1] + steps[2]) * 1e-3 + (steps[3] + steps[4]) * 2e-3))


def test_each_row_has_its_own_reference_slices(monkeypatch):
    """The reference was timed once for all of an n's batches, so a row's ratio could mix
    two minutes of a machine whose speed moved 1.8x in half an hour. Every row now runs
    the reference between its own chunks: the row shows its rate and how far it drifted."""
    events: list[str] = []
    rates = iter([(150.0, 100.0, 200.0), (350.0, 300.0, 400.0)])

    def transformer(program, batch, config, budget, reference):
        events.append(f"batch {batch}")
        reference.rate = lambda: vm.tools.bench.ReferenceRate(*next(rates))
        return SimpleNamespace(per_second=50.0, warmup_seconds=0.1), "fused", 0, 1
    monkeypatch.setattr(vm.tools.bench, "transformer_speed", transformer)
    rows = vm.tools.bench.bench([16], [1, 4], vm.tools.bench.EngineConfig(), 0.5)
    assert events == ["batch 1", "batch 4"]
    assert [row.reference_steps_per_second for row in rows] == [150.0, 350.0]
    assert [row.reference_drift for row in rows] == [1.0, pytest.approx(1 / 3)]
    assert rows[0].ratio == pytest.approx(50.0 / 150.0)


@pytest.mark.parametrize("target", [[], ["fleq"]])
@pytest.mark.parametrize("rounds", ["0", "-2", "101", "x", "1.5"])
def test_bench_refuses_a_round_count_out_of_range(capsys, target, rounds):
    with pytest.raises(SystemExit) as stop:
        main(["bench", *target, "--rounds", rounds])
    assert stop.value.code == 2 and "--rounds" in capsys.readouterr().err


def test_rounds_are_reported_as_the_median_round_with_their_spread(monkeypatch):
    """Three rounds of one cell, each with its own reference slices: the row is the
    round of the median ratio (the second here, although its rate is neither the median
    nor the first), with the lowest and highest ratio, every round's full passes and the
    first round's warm-up (the one that pays a compile)."""
    events: list[str] = []
    references = iter([100.0, 60.0, 100.0])
    rounds = iter([(40.0, 9.0, 1), (30.0, 0.1, 0), (60.0, 0.2, 2)])

    def transformer(program, batch, config, budget, reference):
        rate, warmup, full = next(rounds)
        events.append(f"batch {batch}")
        own = next(references)
        reference.rate = lambda: vm.tools.bench.ReferenceRate(own, own, own)
        return SimpleNamespace(per_second=rate, warmup_seconds=warmup), "fused", full, 1
    monkeypatch.setattr(vm.tools.bench, "transformer_speed", transformer)
    progress: list[str] = []
    rows = vm.tools.bench.bench([16], [4], vm.tools.bench.EngineConfig(), 0.5, progress.append,
                                rounds=3)
    assert events == ["batch 4"] * 3
    assert [line.split(" (")[1] for line in progress] == ["round 1/3) ...", "round 2/3) ...",
                                                          "round 3/3) ..."]
    [row] = rows
    assert (row.rounds, row.transformer_steps_per_second) == (3, 30.0)
    assert (row.ratio, row.ratio_low, row.ratio_high) == (0.5, 0.4, 0.6)
    assert (row.full_passes, row.warmup_seconds) == (3, 9.0)
    assert vm.tools.bench.format_table(rows).splitlines()[-1].endswith("| 3 | 3: 0.400-0.600 |")


def test_one_round_keeps_the_row_as_it_was_measured(monkeypatch):
    monkeypatch.setattr(vm.tools.bench.ReferenceSlices, "rate",
                        lambda slices: vm.tools.bench.ReferenceRate(80.0, 80.0, 80.0))
    monkeypatch.setattr(vm.tools.bench, "transformer_speed",
                        lambda program, batch, config, budget, reference: (
                            SimpleNamespace(per_second=20.0, warmup_seconds=0.5), "active", 0, 2))
    [row] = vm.tools.bench.bench([16], [1], vm.tools.bench.EngineConfig(), 0.5)
    assert (row.rounds, row.ratio, row.ratio_low, row.ratio_high) == (1, 0.25, 0.25, 0.25)
    assert vm.tools.bench.format_table([row]).splitlines()[-1].endswith("| 0 | 1 |")
