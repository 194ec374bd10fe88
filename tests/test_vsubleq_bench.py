"""`ltvm bench vsubleq`: the counting loop, the rows, and the sizes it refuses."""

from __future__ import annotations

import json

import pytest

from vm.cli import main
from vm.common.errors import InputError
from vm.machines.vsubleq.reference import run_reference
import vm.tools.vsubleq_bench
from vm.tools.vsubleq_bench import counting_loop


@pytest.mark.parametrize("steps, count, pc", [
    (1, -1, 0), (128, -128, 0),  # 8-bit count from 0 down to -128, jumping back to 0
    (129, 127, 3),               # wraps to 127 > 0: falls through to `Z Z 0`
    (130, 127, 0), (131, 126, 3),  # which jumps back; each positive count takes two steps
    (383, 0, 0),                 # 126 of them, then 1 -> 0 jumps
])
def test_the_counting_loop_never_halts_and_counts_through_the_wraparound(steps, count, pc):
    image = counting_loop(16, 8)
    assert image.size == 16
    result = run_reference(image, steps)
    assert not result.halted and result.steps == steps
    assert (result.memory[7], result.pc) == (count, pc)


@pytest.mark.parametrize("evaluation", ["full", "active"])
def test_bench_vsubleq_json_rows_name_the_geometry_and_the_ratio(capsys, evaluation):
    code = main(["bench", "vsubleq", "--words", "16,32", "--bits", "8", "--seconds", "0.05",
                 "--evaluation", evaluation, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and "standard SUBLEQ" in out["title"]
    rows = out["rows"]
    assert [row["words"] for row in rows] == [16, 32]
    for row in rows:
        assert row["bits"] == 8 and row["columns"] == row["words"] + 2  # cpu + the sentinel
        assert row["layers"] == 5 and row["heads"] == 3
        assert row["evaluation"] == evaluation and row["dtype"] == "float32"
        assert row["transformer_steps_per_second"] > 0 and row["reference_steps_per_second"] > 0
        assert row["ratio"] == pytest.approx(row["transformer_steps_per_second"]
                                             / row["reference_steps_per_second"])


@pytest.mark.parametrize("arguments, message", [
    (["--words", "100"], "powers of two"),
    (["--words", "8"], "from 16"),
    (["--words", "256,65536", "--bits", "40"], "from 16 to 32768"),
    (["--words", "256", "--bits", "8"], "more than 8-bit words can address"),
])
def test_bench_vsubleq_refuses_sizes_the_machine_cannot_hold(capsys, arguments, message):
    assert main(["bench", "vsubleq", "--seconds", "0.05", *arguments]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("seconds", ["1e308", "3601", "0", "nan"])
def test_bench_vsubleq_refuses_a_budget_beyond_an_hour_like_the_other_targets(capsys, seconds,
                                                                               monkeypatch):
    """1e308 was taken: the measurement ran until killed."""
    def never_timed(*args, **kwargs):
        raise AssertionError("a measurement started")
    monkeypatch.setattr(vm.tools.vsubleq_bench, "timed", never_timed)
    with pytest.raises(SystemExit) as stop:
        main(["bench", "vsubleq", "--words", "16", "--seconds", seconds])
    assert stop.value.code == 2 and "--seconds" in capsys.readouterr().err


@pytest.mark.parametrize("device, message", [
    ("xx", "unknown device 'xx'"), ("mps", "device 'mps' cannot run the machine"),
    ("cuda:99", "device 'cuda:99'"),
])
def test_bench_vsubleq_refuses_a_device_that_cannot_run_it_in_one_line(capsys, device, message):
    """Each was torch's traceback from the first tensor, exit 1."""
    assert main(["bench", "vsubleq", "--words", "16", "--seconds", "0.05",
                 "--device", device]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_transformer_run_that_halts_is_a_one_line_failure(capsys, monkeypatch):
    """A transformer run that halted timed passes that did nothing, in chunks doubling until
    OverflowError's traceback; the check after the timing raised a bare RuntimeError, a
    traceback too. It fails now at the first chunk: one line, exit 1."""
    class Halting(vm.tools.vsubleq_bench.TransformerRun):
        halted = True
    monkeypatch.setattr(vm.tools.vsubleq_bench, "TransformerRun", Halting)
    assert main(["bench", "vsubleq", "--words", "16", "--seconds", "0.01",
                 "--evaluation", "full"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("ltvm: error: the counting loop halted on the transformer at "
                              "m = 16, N = 16 (float32, full)")


def test_bench_vsubleq_refuses_dense_attention_beyond_memory_before_timing_any_row(
        capsys, monkeypatch):
    """TransformerRun refuses dense n x n scores beyond the memory free, but only when its
    row comes: --words 16,256 timed m = 16 first and then threw its row away."""
    import vm.transformer.memory

    def never_timed(*args, **kwargs):
        raise AssertionError("a measurement started")
    monkeypatch.setattr(vm.tools.vsubleq_bench, "timed", never_timed)
    monkeypatch.setattr(vm.transformer.memory, "free_memory", lambda where: 100_000)
    assert main(["bench", "vsubleq", "--words", "16,256", "--attention", "dense",
                 "--seconds", "0.05"]) == 2
    assert capsys.readouterr().err.startswith("ltvm: error: --attention dense at n = 258 "
                                              "columns holds 258 x 258 scores")


@pytest.mark.parametrize("arguments, message", [
    (([16], 16, float("nan")), "positive number of seconds, got nan"),
    (([16], 16, -1.0), "positive number of seconds, got -1.0"),
    (([16], 16, 0), "positive number of seconds, got 0"),
    (([16.0], 16, 0.05), "--words takes whole numbers, got 16.0"),
    ((["16"], 16, 0.05), "--words takes whole numbers, got '16'"),
    ((16, 16, 0.05), "--words must be a list of memory sizes, got int"),
    (([16], 16.0, 0.05), "--bits takes whole numbers, got 16.0"),
    (([16], 16, 0.05, "float32", "masked", "cpu", "bogus"), "evaluation must be one of"),
    (([16], 16, 0.05, "float32", "sparse"), "attention must be one of"),
])
def test_bench_vsubleq_refuses_bad_arguments_before_any_work(arguments, message: str):
    """A NaN budget timed chunks doubling without end (a hang), -1 and 0 timed one chunk,
    evaluation 'bogus' ran as 'active', 16.0 words failed with a TypeError."""
    with pytest.raises(InputError, match=message):
        vm.tools.vsubleq_bench.bench_vsubleq(*arguments)
