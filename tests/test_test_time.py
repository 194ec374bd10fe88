"""Test-time strategies and their sample complexity (vm/tools/test_time.py)."""

from __future__ import annotations

import json
import math
import re
import time
import tracemalloc
from collections import Counter
from fractions import Fraction
from math import comb
from pathlib import Path

import numpy as np
import pytest

from assembler.subleq import assemble, assemble_file
from vm.cli import main
from vm.common.errors import InputError
from vm.machines.subleq.punchcard import geometry_for
from vm.tools.test_time import (CheckerReward, best_of_n, best_of_n_hard_instance, best_of_n_success,
                                distribution, fitted_exponent, majority, majority_success_two,
                                reference_reward, sample_answers, samples_needed, self_consistency_hard_instance,
                                simulated_success)

ROOT = Path(__file__).resolve().parents[1]
FACTORIAL = str(ROOT / "programs" / "subleq" / "factorial.sq")


def test_a_distribution_of_no_answers_is_refused():
    """It was an empty distribution whose gap Delta was 0, as if two answers tied."""
    with pytest.raises(ValueError, match="at least one answer"):
        distribution([])


def test_distribution_orders_answers_and_measures_the_gap():
    shown = distribution(["a", "b", "a", "c", "a", "b"])
    assert shown.answers == ("a", "b", "c")
    assert shown.probabilities == pytest.approx((3 / 6, 2 / 6, 1 / 6))
    assert shown.gap("a") == pytest.approx(1 / 6)
    assert shown.gap("b") == pytest.approx(-1 / 6)
    assert shown.gap("z") == pytest.approx(-1 / 2)


def test_majority_and_best_of_n_pick_as_defined():
    assert majority([3, 1, 3, 2, 1, 3]) == 3
    rng = np.random.default_rng(0)
    assert {majority([1, 2], rng) for _ in range(50)} == {1, 2}
    assert best_of_n([5, 9, 7], reward=lambda a: -abs(a - 7)) == 7


@pytest.mark.parametrize("p_correct, n", [(0.55, 1), (0.55, 10), (0.6, 31), (0.52, 100)])
def test_exact_majority_success_matches_simulation(p_correct, n):
    simulated = simulated_success("majority", [p_correct, 1 - p_correct], n, 40_000,
                                  np.random.default_rng(1))
    assert majority_success_two(p_correct, n) == pytest.approx(simulated, abs=0.01)


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_simulated_weights_may_be_any_finite_numbers():
    """Weights of 1e308 summed to inf: numpy's 'probabilities do not sum to 1' and an
    overflow warning. Weights 3e307 and 1e307 are the probabilities 3/4 and 1/4."""
    rng = np.random.default_rng(4)
    assert simulated_success("best-of-n", [1e308, 1e308], 1, 20_000, rng) == \
        pytest.approx(0.5, abs=0.02)
    assert simulated_success("best-of-n", [3e307, 1e307], 1, 20_000, rng) == \
        pytest.approx(0.75, abs=0.02)


def test_exact_best_of_n_success_matches_simulation():
    probabilities = best_of_n_hard_instance(0.05, 20)
    simulated = simulated_success("best-of-n", probabilities, 30, 40_000,
                                  np.random.default_rng(2))
    assert best_of_n_success(probabilities[0], 30) == pytest.approx(simulated, abs=0.01)


def test_samples_needed_is_the_least_sufficient_n():
    def success(n: int) -> float:
        return best_of_n_success(0.1, n)

    needed = samples_needed(success, 0.1)
    assert success(needed) >= 0.9 > success(needed - 1)
    assert needed == math.ceil(math.log(0.1) / math.log(0.9))
    with pytest.raises(ValueError, match="more than 64 samples needed"):
        samples_needed(lambda n: 0.0, 0.1, limit=64)


def test_hard_instances_have_the_theorems_exponents():
    gaps = np.geomspace(0.01, 0.3, 8)
    majority_n = [samples_needed(lambda n, g=g: majority_success_two(
        self_consistency_hard_instance(g)[0], n), 0.1) for g in gaps]
    best_n = [samples_needed(lambda n, g=g: best_of_n_success(
        best_of_n_hard_instance(g, 1000)[0], n), 0.1) for g in gaps]
    assert abs(fitted_exponent(gaps, majority_n) - 2) < 0.2
    assert abs(fitted_exponent(gaps, best_n) - 1) < 0.2


def test_hard_instances_have_the_stated_gap():
    for gap in (0.01, 0.2):
        assert distribution_gap(self_consistency_hard_instance(gap)) == pytest.approx(gap)
        assert distribution_gap(best_of_n_hard_instance(gap, 50)) == pytest.approx(gap)
        assert sum(best_of_n_hard_instance(gap, 50)) == pytest.approx(1)


def distribution_gap(probabilities) -> float:
    return probabilities[0] - max(probabilities[1:])


@pytest.mark.parametrize("call, message", [
    (lambda: simulated_success("bogus", [0.5, 0.5], 3, 10, np.random.default_rng()),
     "unknown strategy 'bogus'"),                                  # simulated as majority
    (lambda: simulated_success("majority", [0.5, 0.5], 0, 10, np.random.default_rng()),
     "n must be a whole number, at least 1"),                      # a success of 0.5
    (lambda: simulated_success("majority", [0.5, 0.5], 10 ** 9, 10 ** 9,
                               np.random.default_rng()), "exceed"),  # 6.9 EiB asked
    (lambda: majority_success_two(1.5, 10), "p_correct must be a probability"),   # NaN
    (lambda: best_of_n_success(2.0, 3), "p_correct must be a probability"),       # 2.0
    (lambda: samples_needed(lambda n: math.nan, 0.1), "success(1) must be a probability"),
    (lambda: samples_needed(lambda n: 1.0, -1.0), "delta must lie strictly between"),
    (lambda: fitted_exponent([0.1], [10]), "two or more distinct gaps"),           # 0.5
    (lambda: fitted_exponent([0.0, 0.1], [1, 2]), "gaps must lie in (0, 1]"),     # LAPACK
    (lambda: fitted_exponent([0.1, 0.2], [1, math.inf]), "counts be finite"),     # NaN
    (lambda: self_consistency_hard_instance(2.0), "gap must be a probability"),    # p = -0.5
    (lambda: best_of_n_hard_instance(0.5, 0), "answers must be a whole number"),   # 1 / 0
    (lambda: best_of_n_hard_instance(0.5, 10 ** 9), "answers must be at most"),  # 8 GB
])
def test_the_sample_complexity_tools_refuse_what_is_not_a_question(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_exact_majority_success_is_a_probability_at_large_n():
    """lgamma's rounding summed to 1.00000000013 at n = 10^5 (1.0000002 at 10^8)."""
    assert majority_success_two(0.6, 10 ** 5) <= 1.0


@pytest.mark.parametrize("keywords, message", [
    ({"max_steps": 1.5}, "max_steps must be a whole number"),     # a TypeError from a slice
    ({"batch": 0}, "batch must be a whole number, at least 1"),   # range() arg 3
    ({"seed": 2 ** 64}, "seed must be at most 2^64 - 1"),         # torch's 'long long'
    ({"samples": 0}, "samples must be a whole number, at least 1"),   # no answers, silently
    ({"samples": -1}, "samples must be a whole number, at least 1"),
    ({"samples": 2.5}, "samples must be a whole number, at least 1"),  # list * float
])
def test_sample_answers_refuses_counts_and_seeds_it_cannot_run(keywords, message):
    program = assemble_file(FACTORIAL)
    arguments = {"samples": 4, "temperature": 0.2, "seed": 0, "cell": "fact",
                 "max_steps": 100, **keywords}
    with pytest.raises(InputError, match=re.escape(message)):
        sample_answers(program, geometry_for(program), **arguments)


def test_sample_answers_refuses_an_unknown_cell():
    program = assemble_file(FACTORIAL)
    with pytest.raises(InputError, match="no memory cell named 'nope'"):
        sample_answers(program, geometry_for(program), 4, 0.2, 0, "nope", 100)


def test_ltvm_sample_returns_the_reference_answer_when_delta_is_large(capsys):
    """Best-of-n without --reward uses the reference reward, and its JSON says so (it said
    "reward": null)."""
    for strategy in ("majority", "best-of-n"):
        code = main(["sample", FACTORIAL, "--cell", "fact", "--noise", "0.1",
                     "--samples", "32", "--strategy", strategy, "--json"])
        report = json.loads(capsys.readouterr().out)
        assert code == 0 and report["correct"] is True and report["answer"] == 720
        assert report.get("reward") == ("reference" if strategy == "best-of-n" else None)


@pytest.mark.parametrize("argv, message", [
    (["--cell", "nope"], "no memory cell named 'nope'"),
    (["--cell", "fact", "--noise", "inf"], "must be finite"),
    (["--cell", "fact", "--noise", "1e40"], "must be at most 1e+06"),  # lam T: inf in float32
    (["--cell", "fact", "--samples", "100000000"], "exceeds the limit"),
])
def test_ltvm_sample_rejects_bad_input_with_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as raised:
        code = main(["sample", FACTORIAL, *argv])
        raise SystemExit(code)
    assert raised.value.code == 2
    assert message in capsys.readouterr().err


def test_the_checker_program_accepts_exactly_the_proper_factors():
    checker = assemble_file(ROOT / "programs" / "subleq" / "check_factor.sq")
    reward = CheckerReward(checker, geometry_for(checker), 2_000)
    candidates = [-32768, -7, 0, 1, 2, 7, 13, 14, 90, 91, 92, 32767, None]
    reward.prepare(candidates)
    accepted = [c for c in candidates if reward(c) == 1.0]
    assert accepted == [c for c in candidates if c is not None and 1 < c < 91 and 91 % c == 0]
    assert all(reward(c) == 0.0 for c in candidates if c not in accepted)


def test_the_checker_rewards_only_whole_numbers():
    """7.5 was written into the candidate word as 7 and verified as a factor of 91 (reward
    1); '7' raised TypeError in the word's range check."""
    checker = assemble_file(ROOT / "programs" / "subleq" / "check_factor.sq")
    reward = CheckerReward(checker, geometry_for(checker), 2_000)
    reward.prepare([7.5, "7", 13.0, 10 ** 30])
    assert [reward(a) for a in (7.5, "7", 13.0, 10 ** 30)] == [0.0, 0.0, 1.0, 0.0]


SLOW_CHECK = (".bits 16\n.data\ncandidate: 0\nok: 0\nk: 300\none: 1\nneg1: -1\n.code\n"
              "loop: subleq one, k, done\n      goto loop\ndone: subleq neg1, ok\n      halt\n")
"""A checker that accepts every answer after a countdown of 300 (about 600 steps)."""


def test_a_checker_that_does_not_halt_in_time_is_reported(capsys, tmp_path):
    """Its answers were rewarded 0, as if rejected, without a word: the verdict was the
    step limit's, not the checker's."""
    checker = tmp_path / "slow.sq"
    checker.write_text(SLOW_CHECK)
    code = main(["sample", FACTORIAL, "--cell", "fact", "--samples", "4", "--noise", "0.1",
                 "--strategy", "best-of-n", "--reward", str(checker), "--max-steps", "400",
                 "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code in (0, 1) and report["chosen_reward"] == 0.0
    assert report["checker_unfinished"] == len({d["answer"] for d in report["distribution"]
                                                if d["answer"] is not None})
    assert "the checker did not halt within --max-steps 400" in captured.err
    assert main(["sample", FACTORIAL, "--cell", "fact", "--samples", "4", "--noise", "0.1",
                 "--strategy", "best-of-n", "--reward", str(checker), "--max-steps", "2000",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checker_unfinished"] == 0


def test_a_checker_of_no_steps_is_refused():
    """max_steps 0 rewarded every answer 0 without running the checker."""
    checker = assemble_file(ROOT / "programs" / "subleq" / "check_factor.sq")
    with pytest.raises(InputError, match="max_steps must be a whole number, at least 1"):
        CheckerReward(checker, geometry_for(checker), 0)


def test_a_checker_without_the_named_cells_is_refused():
    program = assemble_file(FACTORIAL)
    with pytest.raises(InputError, match="no memory cell named 'candidate'"):
        CheckerReward(program, geometry_for(program), 100)


def test_a_checker_whose_named_cell_is_an_array_is_refused():
    """The candidate was written into the array's first cell alone, without a word."""
    checker = assemble(".data\ncandidate: .array 0, 0\nok: 0\n.code\nsubleq ok, ok, EOF\n")
    with pytest.raises(InputError, match="'candidate' is an array of 2 cells"):
        CheckerReward(checker, geometry_for(checker), 100)


def test_reference_reward_is_one_only_at_the_answer():
    reward = reference_reward(720)
    assert [reward(a) for a in (720, 719, None)] == [1.0, 0.0, 0.0]


def test_ltvm_sample_best_of_n_with_a_checker_program(capsys):
    code = main(["sample", str(ROOT / "programs" / "subleq" / "smallest_factor.sq"),
                 "--cell", "f", "--noise", "0.2", "--samples", "32", "--strategy", "best-of-n",
                 "--reward", str(ROOT / "programs" / "subleq" / "check_factor.sq"), "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 0 and payload["answer"] == 7 and payload["chosen_reward"] == 1.0


def sample_best_of_n(tmp_path, script_text: str, noise: str, samples: int) -> int:
    """`ltvm sample` of the factorial's cell fact, best-of-n under a reward script."""
    script = tmp_path / "reward.py"
    script.write_text(script_text)
    return main(["sample", FACTORIAL, "--cell", "fact", "--noise", noise, "--samples",
                 str(samples), "--strategy", "best-of-n", "--reward", str(script), "--json"])


def test_ltvm_sample_best_of_n_with_a_reward_script(capsys, tmp_path):
    code = sample_best_of_n(tmp_path, "def reward(answer):\n    return 0.0 if answer is None "
                            "else -abs(answer - 720)\n", "0.2", 32)
    payload = json.loads(capsys.readouterr().out)
    assert code == 0 and payload["answer"] == 720 and payload["chosen_reward"] == 0.0


@pytest.mark.parametrize("text, message", [
    ("x = 1 / 0\n", "ZeroDivisionError"),
    ("reward = 3\n", "defines no function reward"),
    ("def reward(answer):\n    return float('nan')\n", "is not finite"),
    ("import sys\nsys.exit(0)\n", "SystemExit"),
    ("import sys\ndef reward(answer):\n    sys.exit(3)\n", "SystemExit"),
    ("def reward(answer):\n    return '1'\n", "returned '1', not a number"),  # taken as 1
    ("def reward(answer):\n    return [1.0]\n", "returned [1.0], not a number"),
    ("def reward(answer):\n    return 10 ** 400\n", "an integer past float's range"),
])
def test_a_broken_reward_script_is_bad_input(capsys, tmp_path, text, message):
    script = tmp_path / "broken.py"
    script.write_text(text)
    code = main(["sample", FACTORIAL, "--cell", "fact", "--noise", "0.1", "--samples", "4",
                 "--strategy", "best-of-n", "--reward", str(script)])
    assert code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("value, shown", [("True", "1"), ("np.float32(0.5)", "0.5"),
                                          ("np.int64(3)", "3")])
def test_a_reward_script_may_return_any_real_number(capsys, tmp_path, value, shown):
    code = sample_best_of_n(tmp_path, f"import numpy as np\ndef reward(answer):\n"
                                      f"    return {value}\n", "0.1", 4)
    assert code in (0, 1) and json.loads(capsys.readouterr().out)["chosen_reward"] == \
        float(shown)


def test_a_reward_without_best_of_n_is_refused_not_ignored(capsys):
    code = main(["sample", FACTORIAL, "--cell", "fact", "--samples", "4", "--reward",
                 "reference"])
    assert code == 2 and "--strategy best-of-n" in capsys.readouterr().err


LOOP = ".bits 16\n.data\nz: 0\ncandidate: 0\nok: 1\n.code\nloop: subleq z, z, loop\n"
"""A SUBLEQ program that never halts (with the cells a checker needs)."""


def test_a_reward_without_best_of_n_is_refused_before_the_reference_runs(capsys, tmp_path):
    """It was refused after the reference run: a program that runs long was run to the
    end, or failed for not halting, before the options were found to conflict."""
    looping = tmp_path / "loop.sq"
    looping.write_text(LOOP)
    code = main(["sample", str(looping), "--cell", "z", "--reward", "reference",
                 "--max-steps", "5"])
    assert code == 2 and "--reward applies to --strategy best-of-n" in capsys.readouterr().err


def test_an_empty_reward_is_refused_not_taken_for_the_reference(capsys):
    """--reward '' (an unset shell variable) rewarded the reference's answer in silence."""
    code = main(["sample", FACTORIAL, "--cell", "fact", "--samples", "2", "--strategy",
                 "best-of-n", "--reward", ""])
    assert code == 2 and "--reward is empty" in capsys.readouterr().err


@pytest.mark.parametrize("stage", ["reference steps", "checker passes"])
def test_ltvm_sample_max_seconds_stops_the_reference_and_the_checker_too(stage, tmp_path,
                                                                          capsys):
    """--max-seconds bounded only the sampled runs: a reference run or a checker that does not
    halt went on for all of --max-steps (10^12 steps: days). In this process: a subprocess's
    imports took much of a 2 s limit under load, and the sampling did not reach the checker."""
    loop = tmp_path / "loop.sq"
    loop.write_text(LOOP)
    program = str(loop) if stage == "reference steps" else FACTORIAL
    argv = ["sample", program, "--cell", "ok" if stage == "reference steps" else "fact",
            "--samples", "2", "--max-steps", str(10 ** 12), "--max-seconds", "3"]
    if stage == "checker passes":
        argv += ["--strategy", "best-of-n", "--reward", str(loop)]
    started = time.monotonic()
    assert main(argv) == 1 and time.monotonic() - started < 60
    err = capsys.readouterr().err
    assert "stopped by --max-seconds 3 after" in err and stage in err


def test_a_reward_script_that_prints_leaves_the_json_whole_and_is_called_once_an_answer(
        capsys, tmp_path):
    """print() in a reward script went to stdout, into the middle of --json's object; and
    the script was called for every sample, not once per distinct answer."""
    code = sample_best_of_n(tmp_path, "print('loading')\ndef reward(answer):\n    "
                            "print('scoring', answer)\n    return 1.0 if answer == 720 else "
                            "0.0\n", "0.1", 16)
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["answer"] == 720
    calls = [line for line in captured.err.splitlines() if line.startswith("scoring")]
    assert "loading" in captured.err and "scoring 720" in calls
    assert len(calls) == len(set(calls)) < 16


def test_a_reward_directory_is_not_called_missing(capsys, tmp_path):
    (tmp_path / "reward.py").mkdir()
    code = main(["sample", FACTORIAL, "--cell", "fact", "--samples", "4", "--strategy",
                 "best-of-n", "--reward", str(tmp_path / "reward.py")])
    assert code == 2 and "reward.py: not a regular file" in capsys.readouterr().err


def test_an_array_is_not_taken_for_its_first_cell(capsys):
    """--cell xs of bubble_sort answered xs[0] alone, with no word about the other six."""
    program = assemble_file(ROOT / "programs" / "subleq" / "bubble_sort.sq")
    with pytest.raises(InputError, match="'xs' is an array of 7 cells"):
        sample_answers(program, geometry_for(program), 4, 0.2, 0, "xs", 100)
    assert main(["sample", str(ROOT / "programs" / "subleq" / "bubble_sort.sq"), "--cell",
                 "xs"]) == 2
    assert "is an array of 7 cells" in capsys.readouterr().err


def _binomial_majority(p: Fraction, n: int) -> float:
    """P(more than half of n draws are correct, half of a tie), exact: with p = a/d each term
    is comb(n, k) a^k (d - a)^(n - k) / d^n, the winning terms summed in integers by Horner's
    rule, so only one division is rounded. Summed as Fractions, n = 2000 took 27-70 s."""
    a, d = p.numerator, p.denominator
    b = d - a
    least_win = n // 2 + 1
    # sum over k >= least_win of comb(n, k) a^(k - least_win) b^(n - k)
    wins_over_a_power, b_power = 0, 1
    for k in range(n, least_win - 1, -1):
        wins_over_a_power = wins_over_a_power * a + comb(n, k) * b_power
        b_power *= b
    twice_wins = 2 * a ** least_win * wins_over_a_power
    if n % 2 == 0:
        twice_wins += comb(n, n // 2) * (a * b) ** (n // 2)
    return float(Fraction(twice_wins, 2 * d ** n))


@pytest.mark.parametrize("p_correct, n", [(0.0, 5), (1.0, 4), (0.5, 4), (0.55, 101),
                                          (0.3, 1000), (0.51, 2000), (1e-300, 5), (0.9, 1)])
def test_exact_majority_success_equals_the_binomial_sum(p_correct, n):
    """p_correct = 0 answered 1 (0 x log 0 was NaN in every term), so samples_needed said
    one sample suffices for a strategy that never succeeds."""
    assert majority_success_two(p_correct, n) == pytest.approx(
        _binomial_majority(Fraction(p_correct), n), rel=1e-12, abs=1e-300)


def test_exact_majority_success_refuses_an_n_too_large_to_sum():
    """n = 10^9 built a Python list of 10^9 lgamma values and was killed for memory."""
    with pytest.raises(ValueError, match=re.escape("n must be at most 2^36")):
        majority_success_two(0.6, (1 << 36) + 1)


@pytest.mark.parametrize("p_correct, n, expected", [
    (1e-17, 10 ** 6, 1e-11),                 # 1 - p rounded to 1: the success was 0
    (1e-20, 10 ** 10, 1e-10),
    (0.1, 30, float(1 - (1 - Fraction(0.1)) ** 30)),
    (0.5, 10 ** 400, 1.0),                   # OverflowError in float's power
    (1e-300, 10 ** 400, 1.0),
    (0.0, 10 ** 400, 0.0),
    (1.0, 0, 0.0),
])
def test_exact_best_of_n_success_keeps_small_probabilities(p_correct, n, expected):
    assert best_of_n_success(p_correct, n) == pytest.approx(expected, rel=1e-9)


def test_best_of_n_refuses_a_nan_reward():
    """max() ranks nothing above NaN: the answer rewarded NaN, seen first, was picked over
    one rewarded 1."""
    with pytest.raises(ValueError, match=re.escape("reward(5) is NaN")):
        best_of_n([5, 9], reward=lambda a: math.nan if a == 5 else 1.0)


@pytest.mark.parametrize("strategy", [majority, lambda answers: best_of_n(answers, float)])
def test_a_strategy_over_no_answers_says_so(strategy):
    """max() said 'arg is an empty sequence'."""
    with pytest.raises(ValueError, match="at least one answer, got none"):
        strategy([])


def _majority_by_hand(draws: np.ndarray) -> float:
    """Mean over rows of P(a uniformly random tie-break among the most frequent picks 0)."""
    chances = []
    for row in draws.tolist():
        counts = Counter(row)
        top = max(counts.values())
        tied = [answer for answer, count in counts.items() if count == top]
        chances.append((0 in tied) / len(tied))
    return float(np.mean(chances))


@pytest.mark.parametrize("answers", [4, 100_000])
def test_simulated_majority_counts_only_the_answers_drawn(answers):
    """Every answer was counted in every trial: 40,000 trials of 100,000 answers asked for
    32 GB; here 1,000 trials of 100,000 took 1.6 GB."""
    probabilities = best_of_n_hard_instance(0.3, answers)
    tracemalloc.start()
    try:
        success = simulated_success("majority", probabilities, 5, 1000,
                                    np.random.default_rng(7))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    draws = np.random.default_rng(7).choice(answers, size=(1000, 5),
                                            p=np.asarray(probabilities) / sum(probabilities))
    assert success == pytest.approx(_majority_by_hand(draws))
    assert peak < 64 * 2 ** 20


def test_nearby_seeds_share_no_batch(executor_configs):
    """Batch i was seeded seed + i: --seed 0 and --seed 1 over 512 samples shared 256
    identical samples. The first batch keeps the seed itself."""
    import vm.runtime.executor as executor
    configs = executor_configs(executor)
    program = assemble_file(FACTORIAL)
    used = {}
    for seed in (0, 1, 2 ** 64 - 1):
        configs.clear()
        sample_answers(program, geometry_for(program), 6, 0.2, seed, "fact", 100, batch=2)
        used[seed] = [config.seed for config in configs]
    assert [batches[0] for batches in used.values()] == [0, 1, 2 ** 64 - 1]
    assert not set(used[0]) & set(used[1])
    assert all(len(set(batches)) == 3 and all(0 <= s < 2 ** 64 for s in batches)
               for batches in used.values())
