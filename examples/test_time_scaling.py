"""Sample complexity of self-consistency against best-of-n (Theorems 3.1 and 3.2).

Part 1, the paper's hard instances: for gaps Delta from 0.01 to 0.3, the least n at which
majority vote (two answers, (1 +- Delta)/2) and best-of-n (the correct answer at
Delta + (1 - Delta)/O among O = 1000 answers, a reward maximized only there) return the
correct answer with probability >= 0.9, computed exactly; the fitted slopes of log n
against log(1/Delta) (theory: 2 and 1).

Part 2, the looped transformer: factorial (programs/subleq/factorial.sq, answer: cell
`fact`) sampled with stochastic reads at several noise temperatures (a run that has not
halted after twice the reference's steps answers None); the empirical answer distribution
and its Delta, and the samples each strategy needs on it (by resampling the transformer's
own answers).

Part 3: the answer distribution of five programs at three noise temperatures.

    python examples/test_time_scaling.py [--out DIR] [--samples N]

prints the tables and writes test_time_scaling.png and .json into DIR (default
examples/out). About three to four minutes on the project's 2-core machine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib
import numpy as np

from assembler.subleq import assemble_file
from vm.machines.subleq.punchcard import geometry_for
from vm.machines.subleq.reference import run_reference
from vm.cli.common import directory_path, positive_int
from vm.tools.test_time import (best_of_n_hard_instance, best_of_n_success, distribution,
                                fitted_exponent, majority_success_two, sample_answers,
                                samples_needed, self_consistency_hard_instance,
                                simulated_success)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DELTA = 0.1
TEMPERATURES = [0.15, 0.2, 0.22, 0.24, 0.26, 0.27, 0.28, 0.29, 0.3]
"""Noise temperatures for factorial: the answer distribution turns over between 0.2 and 0.25."""
"""Failure probability: a strategy must be right with probability at least 0.9."""


def hard_instances() -> dict:
    gaps = np.geomspace(0.01, 0.3, 10)
    majority = [samples_needed(lambda n, g=g: majority_success_two(
        self_consistency_hard_instance(g)[0], n), DELTA) for g in gaps]
    best = [samples_needed(lambda n, g=g: best_of_n_success(
        best_of_n_hard_instance(g, 1000)[0], n), DELTA) for g in gaps]
    return {"gaps": gaps.tolist(), "majority": majority, "best_of_n": best,
            "majority_exponent": fitted_exponent(gaps, majority),
            "best_of_n_exponent": fitted_exponent(gaps, best)}


def transformer_rows(samples: int, temperatures: list[float]) -> list[dict]:
    program = assemble_file(ROOT / "programs" / "subleq" / "factorial.sq")
    geometry = geometry_for(program)
    reference = run_reference(program, 10_000)
    correct = reference.memory[program.symbols["fact"].address]
    rng = np.random.default_rng(0)
    rows = []
    for temperature in temperatures:
        answers = sample_answers(program, geometry, samples, temperature, seed=17,
                                 cell="fact", max_steps=2 * reference.steps)
        shown = distribution(answers)
        gap = shown.gap(correct)
        ordered = sorted(zip(shown.answers, shown.probabilities),
                         key=lambda item: item[0] != correct)
        probabilities = [p for _, p in ordered]
        row = {"noise": temperature, "p_correct": dict(zip(shown.answers,
                                                             shown.probabilities)).get(correct, 0.0),
               "answers": len(shown.answers), "delta": gap}
        if gap > 0 and ordered[0][0] == correct:
            for name in ("majority", "best-of-n"):
                row[name] = samples_needed(lambda n, s=name: simulated_success(
                    s, probabilities, n, 2000, rng), DELTA, limit=1 << 14)
        rows.append(row)
    return rows


PROGRAMS = [("factorial.sq", "fact"), ("gcd.sq", "g"), ("multiply.sq", "prod"),
            ("isqrt.sq", "root"), ("smallest_factor.sq", "f")]
"""Programs and the cell holding their answer, for the distribution per temperature."""
SURVEY_TEMPERATURES = [0.2, 0.25, 0.3]


def survey(samples: int) -> list[dict]:
    """p(correct), the number of distinct answers and Delta per program and temperature."""
    rows = []
    for name, cell in PROGRAMS:
        program = assemble_file(ROOT / "programs" / "subleq" / name)
        reference = run_reference(program, 100_000)
        correct = reference.memory[program.symbols[cell].address]
        for temperature in SURVEY_TEMPERATURES:
            answers = sample_answers(program, geometry_for(program), samples, temperature,
                                     seed=23, cell=cell, max_steps=2 * reference.steps)
            shown = distribution(answers)
            rows.append({"program": name, "noise": temperature, "answer": correct,
                         "p_correct": answers.count(correct) / samples,
                         "answers": len(shown.answers), "delta": shown.gap(correct)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=directory_path, default=ROOT / "examples" / "out",
                        help="directory for test_time_scaling.png and .json (default "
                             "examples/out)")
    parser.add_argument("--samples", type=positive_int, default=512,
                        help="transformer runs per noise temperature (default 512)")
    args = parser.parse_args()
    hard = hard_instances()
    print(f"Hard instances, samples needed for success >= {1 - DELTA}:")
    print("| Delta | majority | best-of-n |")
    print("|---:|---:|---:|")
    for gap, m, b in zip(hard["gaps"], hard["majority"], hard["best_of_n"]):
        print(f"| {gap:.4f} | {m} | {b} |")
    print(f"fitted exponents against 1/Delta: majority {hard['majority_exponent']:.2f} "
          f"(theory 2), best-of-n {hard['best_of_n_exponent']:.2f} (theory 1)\n")
    rows = transformer_rows(args.samples, TEMPERATURES)
    print(f"Factorial on the transformer, {args.samples} samples per noise temperature:")
    print("| noise | p(720) | answers | Delta | majority n | best-of-n n |")
    print("|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['noise']} | {row['p_correct']:.3f} | {row['answers']} | "
              f"{row['delta']:.3f} | {row.get('majority', '-')} | {row.get('best-of-n', '-')} |")
    fitted = [row for row in rows if row.get("majority", 1) > 1]
    if len(fitted) >= 3:
        gaps = [row["delta"] for row in fitted]
        print(f"fitted exponents over Delta {min(gaps):.3f}..{max(gaps):.3f}: majority "
              f"{fitted_exponent(gaps, [row['majority'] for row in fitted]):.2f}, best-of-n "
              f"{fitted_exponent(gaps, [row['best-of-n'] for row in fitted]):.2f} (these are "
              f"not the hard instances: the theorems bound the worst case)")
    survey_rows = survey(args.samples // 2)
    print(f"\nAnswer distributions, {args.samples // 2} samples per program and temperature:")
    print("| program | answer | noise | p(answer) | distinct answers | Delta |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in survey_rows:
        print(f"| {row['program']} | {row['answer']} | {row['noise']} | {row['p_correct']:.3f} | "
              f"{row['answers']} | {row['delta']:.3f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    figure, axis = plt.subplots(figsize=(5, 4))
    gaps = 1 / np.asarray(hard["gaps"])
    axis.loglog(gaps, hard["majority"], "o-", label="majority (hard instance)")
    axis.loglog(gaps, hard["best_of_n"], "s-", label="best-of-n (hard instance)")
    measured = [row for row in rows if "majority" in row]
    if measured:
        axis.loglog([1 / row["delta"] for row in measured], [row["majority"] for row in measured],
                    "o", mfc="none", label="majority (transformer)")
        axis.loglog([1 / row["delta"] for row in measured],
                    [row["best-of-n"] for row in measured], "s", mfc="none",
                    label="best-of-n (transformer)")
    axis.set_xlabel("1 / Delta")
    axis.set_ylabel(f"samples for success >= {1 - DELTA}")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(args.out / "test_time_scaling.png", dpi=120)
    (args.out / "test_time_scaling.json").write_text(json.dumps(
        {"hard_instances": hard, "transformer": rows, "survey": survey_rows}, indent=2,
        default=str))
    print(f"\nwrote {args.out / 'test_time_scaling.png'} and test_time_scaling.json")


if __name__ == "__main__":
    main()
