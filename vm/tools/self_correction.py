"""Self-correction with a verifier (Algorithm 1 of test-time-scaling-sample-complexity.md).

The roles of Theorem 4.7, each run on the looped transformer:

- experts f_1 .. f_K: SUBLEQ programs run with stochastic reads, so a response is random;
  here copy, reverse and rotate a data string (the paper's synthetic task: copy the string
  when a small 3-SAT instance is satisfiable, else reverse it);
- the regret-minimization model f_0: a FLEQ program, explore-then-commit over the K
  experts, that reads the last expert's reward and writes which expert to run next; its
  decisions on reward sums are exact 0/1 counters (`relu_prime`, docs/fleq_machine.md);
- the verifier r(q, u): 1 when the response is the task's target, else 0.

The protocol of Algorithm 1 (append the action, the response and the reward to the prompt)
is the loop in `self_correct`: it carries f_0's memory from one round to the next, as the
prompt carries the tokens. Not built: the composition phi(f_0, ..., f_K) of the theorem into
one transformer; the experts and f_0 are separate programs on separate weights.
"""

from __future__ import annotations

import itertools
import numbers
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from assembler.program import word_range
from assembler.subleq import assemble
from vm.common.errors import RunFailure
from vm.common.limits import is_whole_number
from vm.isa import FLEQ, SUBLEQ
from vm.tools.test_time import sample_runs

EXPERTS = ("copy", "reverse", "rotate")
"""The expert programs, in arm order: where each writes element i of the data."""
MAX_VARIABLES = 20
"""Most variables `satisfiable` tries every assignment of (2^20: seconds)."""
WORD_BITS = 8
"""The experts' word size: each data value is one word."""
Clause = tuple[int, int, int]
"""A 3-SAT clause: literals +v (x_v) or -v (not x_v), variables numbered from 1."""


def _whole(value: object, least: int) -> bool:
    """Whether `value` is an integer (numpy's too, not a bool) of at least `least`."""
    return is_whole_number(value) and value >= least


# -- the task -------------------------------------------------------------------------
def satisfiable(clauses: Sequence[Clause], variables: int) -> bool:
    """Whether some assignment satisfies every clause (by trying all 2^variables). The
    instance is checked first: 40 variables meant 2^40 tries with no end in sight, a
    literal 9 of 3 variables an IndexError, and a literal 0 (no variable) was read as
    x_{variables} negated."""
    if not _whole(variables, 0) or variables > MAX_VARIABLES:
        raise ValueError(f"variables must be a whole number from 0 to {MAX_VARIABLES} (every "
                         f"assignment is tried), got {variables!r}")
    for clause in clauses:
        if not all(isinstance(v, numbers.Integral) and 1 <= abs(v) <= variables
                   for v in clause):
            raise ValueError(f"clause {tuple(clause)!r}: a literal is +v or -v for a variable "
                             f"v from 1 to {variables}")
    for values in itertools.product((False, True), repeat=variables):
        if all(any(values[abs(v) - 1] == (v > 0) for v in clause) for clause in clauses):
            return True
    return False


def random_3sat(rng: np.random.Generator, variables: int = 4,
                clauses: int = 20) -> list[Clause]:
    """Clauses of three distinct variables with random signs (the paper's instances:
    4 variables, 20 clauses)."""
    if not 3 <= variables <= MAX_VARIABLES or clauses < 0:  # numpy: 'larger sample than ...'
        raise ValueError(f"a 3-SAT instance needs 3 to {MAX_VARIABLES} variables and at least "
                         f"0 clauses, got {variables} and {clauses}")
    made = []
    for _ in range(clauses):
        chosen = rng.choice(np.arange(1, variables + 1), size=3, replace=False)
        signs = rng.choice((-1, 1), size=3)
        made.append(tuple(int(v * s) for v, s in zip(chosen, signs)))
    return made


def target(data: Sequence[int], clauses: Sequence[Clause], variables: int) -> list[int]:
    """The task's answer: the data copied if the instance is satisfiable, else reversed."""
    return list(data) if satisfiable(clauses, variables) else list(reversed(data))


# -- the experts ----------------------------------------------------------------------
def _destination(expert: str, index: int, length: int) -> int:
    return {"copy": index, "reverse": length - 1 - index,
            "rotate": (index + 1) % length}[expert]


def expert_source(expert: str, data: Sequence[int]) -> str:
    """A SUBLEQ program that writes `data` into ys in the expert's order. The expert and
    the data are checked here: the assembler refused no data, 300 or 1.5 at a line of
    this generated program, and an unknown expert was a KeyError."""
    if expert not in EXPERTS:
        raise ValueError(f"unknown expert {expert!r} (choose from {', '.join(EXPERTS)})")
    low, high = word_range(WORD_BITS)
    if not len(data) or not all(_whole(value, low) and value <= high for value in data):
        raise ValueError(f"the data must be one or more whole numbers from {low} to {high} "
                         f"(the experts' {WORD_BITS}-bit words), got {list(data)!r}")
    length = len(data)
    lines = [f".bits {WORD_BITS}", ".data", f"xs: .array {', '.join(map(str, data))}",
             f"ys: .zero {length}", "t: 0", ".code"]
    for index in range(length):
        lines += [f"    subleq xs+{index}, t",
                  f"    subleq t, ys+{_destination(expert, index, length)}",
                  "    subleq t, t"]
    return "\n".join(lines + ["    halt", ""])


def expert_responses(expert: str, data: Sequence[int], attempts: int, noise: float,
                     seed: int) -> list[list[int] | None]:
    """`attempts` responses of one expert to `data` (None for a run that did not halt)."""
    if not _whole(attempts, 0):  # -1 or 2.5 made the batch list [] or a TypeError
        raise ValueError(f"attempts must be a whole number, at least 0, got {attempts!r}")
    program = assemble(expert_source(expert, data), f"<{expert}>")
    ys = program.symbols["ys"]
    runs = sample_runs([program] * attempts, SUBLEQ.geometry_for(program), noise, seed,
                       max_steps=20 * len(data))
    return [list(run.memory[ys.address:ys.address + ys.size]) if run.halted else None
            for run in runs]


# -- the regret-minimization model f_0 --------------------------------------------------
@dataclass
class BanditState:
    """f_0's memory between rounds: reward sums, the last arm and its reward, the round."""

    arms: int
    explore: int
    """Rounds of round-robin exploration before committing (explore-then-commit)."""
    sums: list[int] = field(default_factory=list)
    last: int = -1
    reward: int = 0
    round: int = 0

    def __post_init__(self) -> None:
        """Checked here: no arms made a program that chose none (RunFailure), two sums for
        three arms an IndexError, and a last arm of 5 of 3 credited no arm."""
        if not _whole(self.arms, 1) or not _whole(self.explore, 0):
            raise ValueError(f"a bandit needs one or more arms and 0 or more rounds of "
                             f"exploration, got {self.arms!r} and {self.explore!r}")
        self.sums = self.sums or [0] * self.arms
        self.last = self.arms - 1 if self.last < 0 else self.last
        if len(self.sums) != self.arms or not self.last < self.arms:
            raise ValueError(f"{self.arms} arms need {self.arms} reward sums and a last arm "
                             f"below {self.arms}, got {len(self.sums)} and {self.last}")


def bandit_source(state: BanditState) -> str:
    """One round of explore-then-commit as a FLEQ program: credit the last reward, then
    write the next arm as one-hot counters a0 .. a{K-1}.

    Explore: the arm after the last one. Commit: arm k when its sum beats every earlier
    arm's and ties or beats every later one's (the lowest-index argmax), each comparison
    relu_prime(S_k - S_j -+ 1/2), exact because sums are integers."""
    arms = state.arms
    data = [f"S{k}: {state.sums[k]}" for k in range(arms)]
    data += [f"c{k}: {int(k == state.last)}" for k in range(arms)]
    data += [f"a{k}: 0" for k in range(arms)]
    data += [f"r: {state.reward}", f"y: {state.round - state.explore + 1}", "zero: 0",
             "one: 1", "d: 0", "f: 0", "votes: 0", "half: 0.5",
             f"needed: {arms - 1.5}", "g: 0.0"]
    code = []
    for k in range(arms):
        code += [f"      if c{k} <= 0 goto credited{k}", f"      S{k} = add(S{k}, r)",
                 f"credited{k}:"]
    code += ["      if y <= 0 goto explore"]
    for k in range(arms):
        code.append("      votes = add(zero, zero)")
        for j in range(arms):
            if j == k:
                continue
            code += [f"      d = sub(S{k}, S{j})",
                     f"      g = {'sub' if j < k else 'add'}(d, half)",
                     "      f = relu_prime(g)", "      votes = add(votes, f)"]
        code += ["      g = sub(votes, needed)", f"      a{k} = relu_prime(g)"]
    code += ["      goto next", "explore:"]
    code += [f"      a{k} = add(c{(k - 1) % arms}, zero)" for k in range(arms)]
    code += ["next: y = add(y, one)", "      halt"]
    return "\n".join([".data", *data, ".code", *code]) + "\n"


def bandit_choice(state: BanditState) -> int:
    """Run one round of f_0 on the transformer and return the arm it chose."""
    from vm.runtime.executor import run_transformer  # torch: only rounds that run pay it
    program = FLEQ.assemble_text(bandit_source(state), "<bandit>")
    result = run_transformer(program, FLEQ.geometry_for(program), 10_000)
    memory = program.named_memory(result.memory)
    chosen = [k for k in range(state.arms) if memory[f"a{k}"] == 1]
    if not result.halted or len(chosen) != 1 or any(
            memory[f"a{k}"] not in (0, 1) for k in range(state.arms)):
        raise RunFailure(f"the bandit program did not choose one arm: "
                         f"{[memory[f'a{k}'] for k in range(state.arms)]}")
    state.sums = [int(memory[f"S{k}"]) for k in range(state.arms)]
    return chosen[0]


def explore_then_commit(rewards: Sequence[Sequence[int]], explore: int) -> list[int]:
    """The same algorithm in plain Python, for checking f_0: the arm of each round when
    round t pays rewards[t][arm]."""
    if not len(rewards):  # rewards[0] was an IndexError
        return []
    arms = len(rewards[0])
    sums, choices = [0] * arms, []
    for t, paid in enumerate(rewards):
        arm = t % arms if t < explore else max(range(arms), key=lambda k: (sums[k], -k))
        choices.append(arm)
        sums[arm] += paid[arm]
    return choices


# -- the protocol -------------------------------------------------------------------------
@dataclass
class Trajectory:
    choices: list[int]
    rewards: list[int]
    correct_arm: int


def self_correct(data: Sequence[int], clauses: Sequence[Clause], variables: int,
                 rounds: int, explore: int, noise: float, seed: int) -> Trajectory:
    """Algorithm 1: each round f_0 picks an expert, the expert answers (a stochastic run),
    the verifier scores the answer and the reward goes back to f_0."""
    if not _whole(rounds, 0):  # -1 played no round, silently
        raise ValueError(f"rounds must be a whole number, at least 0, got {rounds!r}")
    wanted = target(data, clauses, variables)
    state = BanditState(len(EXPERTS), explore)
    choices, rewards = [], []
    for round_ in range(rounds):
        arm = bandit_choice(state)
        response = expert_responses(EXPERTS[arm], data, 1, noise, seed + round_)[0]
        reward = int(response == wanted)
        choices.append(arm)
        rewards.append(reward)
        state.last, state.reward, state.round = arm, reward, round_ + 1
    correct = EXPERTS.index("copy" if satisfiable(clauses, variables) else "reverse")
    return Trajectory(choices, rewards, correct)
