"""Self-correction with a verifier (Algorithm 1, Theorem 4.7) on the looped transformer.

The paper's synthetic task: a data string over {0, 1} and a 3-SAT instance (4 variables,
20 clauses); the answer is the string copied if the instance is satisfiable, else
reversed. Three experts (copy, reverse, rotate: SUBLEQ programs run with stochastic reads
at --noise, so each answer is right only with some probability) and a regret-minimizing
FLEQ program (explore-then-commit, --explore rounds of round robin) that picks an expert
each round from the verifier's rewards. Neither the experts nor the bandit are told which
kind of task they face.

For --instances instances (half satisfiable), prints per round the mean reward, the mean
regret against the best expert (success probabilities estimated from 64 extra runs of each
expert per instance) and the fraction of instances on their right expert; checks every
choice of the FLEQ program against the same algorithm in Python; writes
self_correction.png and .json into --out (default examples/out).

    python examples/self_correction.py [--instances 20] [--rounds 36] [--noise 0.35]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib
import numpy as np

from vm.cli.common import directory_path, positive_float, positive_int, seed_value
from vm.tools.self_correction import (EXPERTS, expert_responses, explore_then_commit,
                                      random_3sat, satisfiable, self_correct, target)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VARIABLES, CLAUSES, LENGTH = 4, 20, 5
ESTIMATE_RUNS = 64


def instances(count: int, rng: np.random.Generator) -> list[tuple[list[int], list]]:
    """Half satisfiable, half not; strings whose reverse differs from their copy."""
    wanted = {True: count - count // 2, False: count // 2}
    made = []
    while any(wanted.values()):
        clauses = random_3sat(rng, VARIABLES, CLAUSES)
        kind = satisfiable(clauses, VARIABLES)
        data = rng.integers(0, 2, size=LENGTH).tolist()
        if wanted[kind] and data != data[::-1]:
            wanted[kind] -= 1
            made.append((data, clauses))
    return made


def success_rates(data: list[int], clauses: list, noise: float, seed: int) -> list[float]:
    """Each expert's probability of the right answer, estimated from fresh runs."""
    wanted = target(data, clauses, VARIABLES)
    return [float(np.mean([answer == wanted for answer in
                           expert_responses(expert, data, ESTIMATE_RUNS, noise, seed)]))
            for expert in EXPERTS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=positive_int, default=20,
                        help="task instances, half of them satisfiable (default 20)")
    parser.add_argument("--rounds", type=positive_int, default=36,
                        help="rounds of the bandit on each instance (default 36)")
    parser.add_argument("--explore", type=positive_int, default=12,
                        help="rounds of round robin before it commits, at most --rounds "
                             "(default 12)")
    parser.add_argument("--noise", type=positive_float, default=0.35,
                        help="temperature of the experts' stochastic reads (default 0.35)")
    parser.add_argument("--seed", type=seed_value, default=0,
                        help="seed of the instances (default 0)")
    parser.add_argument("--out", type=directory_path, default=ROOT / "examples" / "out",
                        help="directory for self_correction.png and .json (default "
                             "examples/out)")
    args = parser.parse_args()
    if args.explore > args.rounds:  # no round left to commit: the rates were NaN
        parser.error(f"--explore {args.explore} leaves no round of --rounds {args.rounds} "
                     f"to commit")
    rng = np.random.default_rng(args.seed)
    rewards, regrets, on_right, agree, solved = [], [], [], 0, {True: [], False: []}
    for index, (data, clauses) in enumerate(instances(args.instances, rng)):
        rates = success_rates(data, clauses, args.noise, 10_000 + 100 * index)
        run = self_correct(data, clauses, VARIABLES, args.rounds, args.explore, args.noise,
                           seed=1000 * index)
        table = [[reward if arm == chosen else 0 for arm in range(len(EXPERTS))]
                 for chosen, reward in zip(run.choices, run.rewards)]
        agree += explore_then_commit(table, args.explore) == run.choices
        rewards.append(run.rewards)
        regrets.append([max(rates) - rates[arm] for arm in run.choices])
        on_right.append([arm == run.correct_arm for arm in run.choices])
        solved[satisfiable(clauses, VARIABLES)].append(run.choices[-1] == run.correct_arm)
        print(f"instance {index}: {'SAT  ' if satisfiable(clauses, VARIABLES) else 'UNSAT'} "
              f"data {''.join(map(str, data))} rates {np.round(rates, 2).tolist()} choices "
              f"{''.join(map(str, run.choices))} rewards {''.join(map(str, run.rewards))}")
    reward, regret = np.mean(rewards, axis=0), np.mean(regrets, axis=0)
    right = np.mean(on_right, axis=0)
    print(f"\n{args.instances} instances, noise {args.noise}, explore {args.explore} rounds; "
          f"the FLEQ bandit chose as explore-then-commit in Python on {agree} of "
          f"{args.instances}")
    print("| round | mean reward | mean regret | cumulative regret | on the right expert |")
    print("|---:|---:|---:|---:|---:|")
    for t in range(args.rounds):
        print(f"| {t + 1} | {reward[t]:.2f} | {regret[t]:.3f} | {regret[:t + 1].sum():.2f} | "
              f"{right[t]:.2f} |")
    print(f"last round on the right expert: satisfiable {np.mean(solved[True]):.2f}, "
          f"unsatisfiable {np.mean(solved[False]):.2f}")
    args.out.mkdir(parents=True, exist_ok=True)
    figure, (left, right_axis) = plt.subplots(1, 2, figsize=(9, 3.6))
    rounds = np.arange(1, args.rounds + 1)
    left.plot(rounds, np.cumsum(regret), "o-", ms=3)
    left.axvline(args.explore + 0.5, color="grey", lw=0.8, ls="--")
    left.set(xlabel="round", ylabel="cumulative regret (mean)", title="regret")
    right_axis.plot(rounds, reward, "o-", ms=3, label="mean reward")
    right_axis.plot(rounds, right, "s-", ms=3, label="on the right expert")
    right_axis.set(xlabel="round", ylim=(-0.05, 1.05), title="verifier reward")
    right_axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(args.out / "self_correction.png", dpi=120)
    (args.out / "self_correction.json").write_text(json.dumps(
        {"noise": args.noise, "explore": args.explore, "agree": agree,
         "mean_reward": reward.tolist(), "mean_regret": regret.tolist(),
         "on_right_expert": right.tolist()}, indent=2))
    print(f"wrote {args.out / 'self_correction.png'} and self_correction.json")


if __name__ == "__main__":
    main()
