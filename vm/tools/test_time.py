"""Test-time strategies over sampled answers, and their sample complexity.

Self-consistency (majority vote) and best-of-n (the answer a reward ranks highest) as in
Section 3 of test-time-scaling-sample-complexity.md. `samples_needed` finds the least n at
which a strategy returns the correct answer with probability at least 1 - delta; on the
paper's hard instances it grows as 1/Delta^2 (majority) and 1/Delta (best-of-n), where
Delta is the gap between the correct answer's probability and the runner-up's.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Hashable, Sequence

import numpy as np

from assembler.program import Program, word_range
from vm.common.errors import InputError, shown_path
from vm.common.limits import is_whole_number
from vm.common.geometry import Geometry
from vm.runtime.config import EngineConfig

Answer = Hashable
SAMPLE_BATCH = 256
"""Stochastic runs per batch (one noise seed each)."""
STRATEGIES = ("majority", "best-of-n")
MAX_DRAWS = 1 << 26
"""Most trials x n one `simulated_success` draws (512 MiB of answers): 10^9 x 10^9 asked
numpy for 6.9 EiB."""
MAX_EXACT_SAMPLES = 1 << 36
"""Largest n `majority_success_two` sums (10^7 terms there)."""
WINDOW_SIGMAS = 19
"""Half-width of the terms `majority_success_two` sums, in sqrt(n): the binomial's mass past
19 sqrt(n) from its mean is below 2 exp(-2 x 19^2) < 1e-300."""
MAX_ANSWERS = 1 << 24
"""Most answers a hard instance lists: 10**9 built an 8 GB tuple."""
SEEDS = 1 << 64
"""Torch's seeds are 0 .. 2^64 - 1; a batch past them failed deep in torch ('Overflow when
unpacking long long')."""


def _whole(value: object, name: str, least: int) -> int:
    """`value` when it is an integer >= `least` (numpy's included, not a bool), else
    ValueError: n = 0 simulated a coin toss, 1.5 steps failed as a slice."""
    if not is_whole_number(value) or value < least:
        raise ValueError(f"{name} must be a whole number, at least {least}, got {value!r}")
    return int(value)


def _probability(value: float, name: str) -> float:
    """`value` when it lies in [0, 1], else ValueError: p = 2 gave a 'success' of 2.0."""
    if not 0.0 <= value <= 1.0:  # NaN too
        raise ValueError(f"{name} must be a probability in [0, 1], got {value}")
    return value


@dataclass(frozen=True)
class Distribution:
    """An empirical answer distribution: answers by decreasing probability."""

    answers: tuple[Answer, ...]
    probabilities: tuple[float, ...]

    def gap(self, correct: Answer) -> float:
        """Delta = p(correct) - max over other answers of p(answer) (negative when another
        answer is more likely)."""
        p_correct = dict(zip(self.answers, self.probabilities)).get(correct, 0.0)
        others = [p for a, p in zip(self.answers, self.probabilities) if a != correct]
        return p_correct - (max(others) if others else 0.0)


def distribution(answers: Sequence[Answer]) -> Distribution:
    """The answers' frequencies; ValueError for no answers (it was an empty distribution
    with a gap of 0, as if two answers tied)."""
    if not len(answers):
        raise ValueError("a distribution needs at least one answer, got none")
    counts = Counter(answers).most_common()
    total = len(answers)
    return Distribution(tuple(a for a, _ in counts), tuple(c / total for _, c in counts))


def majority(answers: Sequence[Answer], rng: np.random.Generator | None = None) -> Answer:
    """Self-consistency: the most frequent answer; ties broken at random (or by first seen)."""
    _some(answers)
    counts = Counter(answers)
    top = max(counts.values())
    tied = [answer for answer, count in counts.items() if count == top]
    return tied[int(rng.integers(len(tied)))] if rng is not None and len(tied) > 1 else tied[0]


def best_of_n(answers: Sequence[Answer], reward: Callable[[Answer], float]) -> Answer:
    """Best-of-n: the answer with the highest reward (the first one among equals), each
    distinct answer rewarded once. A NaN reward is refused: max() compares nothing above
    NaN, so an answer rewarded NaN first was picked over every other."""
    rewards = {answer: reward(answer) for answer in dict.fromkeys(_some(answers))}
    for answer, value in rewards.items():
        if math.isnan(value):
            raise ValueError(f"reward({answer!r}) is NaN; a reward must be a number")
    return max(rewards, key=rewards.__getitem__)


def _some(answers: Sequence[Answer]) -> Sequence[Answer]:
    """`answers` when there is one or more (max() said 'arg is an empty sequence')."""
    if not len(answers):
        raise ValueError("a strategy needs at least one answer, got none")
    return answers


def simulated_success(strategy: str, probabilities: Sequence[float], n: int, trials: int,
                      rng: np.random.Generator) -> float:
    """The fraction of `trials` in which a strategy over n samples of answers 0, 1, ...
    (answer 0 correct) returns answer 0. best-of-n uses a reward maximized only at 0."""
    if strategy not in STRATEGIES:  # anything else was simulated as majority
        raise ValueError(f"unknown strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
    if _whole(n, "n", 1) * _whole(trials, "trials", 1) > MAX_DRAWS:
        raise ValueError(f"{trials} trials of {n} samples exceed {MAX_DRAWS:,} draws")
    p = np.asarray(probabilities, dtype=float)
    if p.ndim != 1 or not p.size or not (np.isfinite(p).all() and (p >= 0).all()
                                         and (p > 0).any()):
        raise ValueError(f"probabilities must be finite, at least 0 and not all 0, got {p}")
    p = p / p.max()  # weights of 1e308 summed to inf: 'probabilities do not sum to 1'
    draws = rng.choice(len(p), size=(trials, n), p=p / p.sum())
    if strategy == "best-of-n":
        return float((draws == 0).any(axis=1).mean())
    return float(_majority_wins(draws, len(p)).mean())


def _majority_wins(draws: np.ndarray, answers: int) -> np.ndarray:
    """Per trial (row of `draws`), the chance that majority with random tie-breaks picks
    answer 0. Past MAX_DRAWS (trial, answer) pairs only the pairs drawn are counted: a
    count of every answer in every trial took 32 GB for 40,000 trials of 100,000 answers."""
    trials = len(draws)
    keys = (draws + np.arange(trials)[:, None] * answers).ravel()
    if trials * answers <= MAX_DRAWS:
        counts = np.bincount(keys, minlength=trials * answers).reshape(trials, answers)
        top = counts.max(axis=1)
        return (counts[:, 0] == top) / (counts == top[:, None]).sum(axis=1)
    keys, counts = np.unique(keys, return_counts=True)
    rows = keys // answers
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])  # every row drew something
    top = np.maximum.reduceat(counts, starts)
    at_top = counts == top[rows]
    wins = np.zeros(trials)
    wins[rows[at_top & (keys % answers == 0)]] = 1.0
    return wins / np.bincount(rows[at_top], minlength=trials)


def majority_success_two(p_correct: float, n: int) -> float:
    """P(majority correct) with exactly two answers: the self-consistency hard instance
    p = ((1 + Delta)/2, (1 - Delta)/2).

    The binomial's terms are summed within WINDOW_SIGMAS * sqrt(n) of its mode, where all
    but 1e-300 of its mass lies (Hoeffding), each from its neighbour's by the ratio
    (n - k) p / ((k + 1) q): O(sqrt n) and exact to rounding. All n + 1 terms by Python's
    lgamma were killed for memory at n = 10^9, and p_correct = 0 answered 1 (0 x log 0 made
    every term NaN)."""
    p = _probability(p_correct, "p_correct")
    if _whole(n, "n", 0) > MAX_EXACT_SAMPLES:
        raise ValueError(f"n must be at most 2^{MAX_EXACT_SAMPLES.bit_length() - 1}, got {n}")
    q = 1.0 - p
    if n == 0 or p == 0.0 or q == 0.0:  # one outcome: no sample, or every sample alike
        correct = n if q == 0.0 else 0
        return 1.0 if 2 * correct > n else 0.5 if 2 * correct == n else 0.0
    mode = min(n, int((n + 1) * p))
    width = math.ceil(WINDOW_SIGMAS * math.sqrt(n)) + 1
    k = np.arange(max(0, mode - width), min(n, mode + width) + 1, dtype=float)
    # log pmf(k + 1) - log pmf(k), summed outwards from the mode so rounding stays small
    rises = np.log((n - k[:-1]) / (k[:-1] + 1)) + (math.log(p) - math.log(q))
    at = mode - int(k[0])
    log_pmf = np.concatenate([-np.cumsum(rises[:at][::-1])[::-1], [0.0],
                              np.cumsum(rises[at:])])
    pmf = np.exp(log_pmf)
    wins = pmf[2 * k > n].sum() + 0.5 * pmf[2 * k == n].sum()
    return min(1.0, float(wins / pmf.sum()))


def best_of_n_success(p_correct: float, n: int) -> float:
    """P(the correct answer is among n samples), which a reward maximized only at the correct
    answer then selects: 1 - (1 - p)^n, as -expm1(n log1p(-p)). Formed as written, 1 - p
    rounded a p below 1e-16 away (success 0 for p = 1e-17 at n = 10^6, not 1e-11), and an n
    past 1e308 overflowed float's power."""
    p = _probability(p_correct, "p_correct")
    if _whole(n, "n", 0) == 0 or p in (0.0, 1.0):  # log1p(-1) is no number, inf x 0 NaN
        return float(n > 0 and p == 1.0)
    try:
        draws = float(n)
    except OverflowError:  # (1 - p)^n is 0 for any p > 0
        draws = math.inf
    return -math.expm1(draws * math.log1p(-p))


def samples_needed(success: Callable[[int], float], delta: float, limit: int = 1 << 22) -> int:
    """Least n with success(n) >= 1 - delta (success assumed increasing in n): doubling,
    then bisection. Raises ValueError past `limit`, or for a success that is not a
    probability (NaN passed the first test and answered 1)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie strictly between 0 and 1, got {delta}")

    def enough(n: int) -> bool:
        return _probability(success(n), f"success({n})") >= 1 - delta

    high = 1
    while not enough(high):
        high *= 2
        if high > limit:
            raise ValueError(f"more than {limit} samples needed")
    low = high // 2
    while high - low > 1:
        middle = (low + high) // 2
        if enough(middle):
            high = middle
        else:
            low = middle
    return max(high, 1)


def fitted_exponent(gaps: Sequence[float], samples: Sequence[int]) -> float:
    """Slope of log(samples) against log(1/gap): 2 for majority, 1 for best-of-n."""
    gaps, samples = np.asarray(gaps, dtype=float), np.asarray(samples, dtype=float)
    if gaps.ndim != 1 or gaps.shape != samples.shape or len(set(gaps.tolist())) < 2:
        raise ValueError(f"a slope needs two or more distinct gaps, each with its sample "
                         f"count; got {gaps.size} gaps and {samples.size} counts")
    if not ((gaps > 0) & (gaps <= 1)).all() or not ((samples >= 1) & (samples < np.inf)).all():
        raise ValueError("gaps must lie in (0, 1] and sample counts be finite and at least 1 "
                         "(a gap of 0 or a count of inf sent LAPACK's least squares into NaN)")
    x = np.log(1.0 / gaps)
    y = np.log(samples)
    return float(np.polyfit(x, y, 1)[0])


def self_consistency_hard_instance(gap: float) -> tuple[float, float]:
    """Theorem 3.1's lower-bound instance: two answers, (1 + Delta)/2 and (1 - Delta)/2."""
    _probability(gap, "gap")
    return (1 + gap) / 2, (1 - gap) / 2


def best_of_n_hard_instance(gap: float, answers: int) -> tuple[float, ...]:
    """Theorem 3.2's lower-bound instance: the correct answer Delta + (1 - Delta)/O, the
    other O - 1 answers (1 - Delta)/O each."""
    rest = (1 - _probability(gap, "gap")) / _whole(answers, "answers", 1)
    if answers > MAX_ANSWERS:
        raise ValueError(f"answers must be at most {MAX_ANSWERS:,} (a tuple of 8 bytes an "
                         f"answer), got {answers:,}")
    return (gap + rest,) + (rest,) * (answers - 1)


def reference_reward(correct: Answer) -> Callable[[Answer], float]:
    """1 for the reference interpreter's answer, 0 for any other."""
    return lambda answer: 1.0 if answer == correct else 0.0


class CheckerReward:
    """A SUBLEQ verifier as the reward: an answer is written into the checker's cell
    `candidate`, the checker runs on the transformer (exactly; the distinct answers of a
    `prepare` call in one batch, cached), and its cell `verdict` is the reward. An answer
    that is no whole number in the checker's word (7.5, '7', None: a sample that did not
    halt) and a checker run that does not halt within `max_steps` reward 0; the latter
    are kept in `unfinished`, for the caller to report."""

    def __init__(self, checker: Program, geometry: Geometry, max_steps: int,
                 candidate: str = "candidate", verdict: str = "ok") -> None:
        try:  # one cell each: an array's name wrote and read its first element alone
            self.candidate = answer_address(checker, candidate)
            self.verdict = answer_address(checker, verdict)
        except InputError as error:
            raise InputError(f"the checker {shown_path(checker.source)}: {error}") from None
        try:  # 0 steps rewarded every answer 0 without running the checker
            self.max_steps = _whole(max_steps, "max_steps", 1)
        except ValueError as error:
            raise InputError(str(error)) from None
        self.checker, self.geometry = checker, geometry
        self.rewards: dict[Answer, float] = {None: 0.0}
        self.unfinished: list[Answer] = []

    def prepare(self, answers: Sequence[Answer],
                progress: Callable[[int], None] | None = None) -> None:
        """Verify every answer not seen yet, in one batched run (`progress` is told its
        passes and may stop it, as --max-seconds does)."""
        fresh = [a for a in dict.fromkeys(answers) if a not in self.rewards]
        programs = []
        for answer in fresh:
            word = self._word(answer)
            if word is None:
                self.rewards[answer] = 0.0
                continue
            memory = list(self.checker.memory)
            memory[self.candidate] = word
            programs.append((answer, replace(self.checker, memory=memory)))
        if not programs:
            return
        from vm.runtime.executor import TransformerExecutor  # torch: only when runs are made
        executor = TransformerExecutor(self.geometry, EngineConfig())
        results = executor.results(executor.run(executor.load([p for _, p in programs]),
                                                self.max_steps, progress))
        for (answer, _), result in zip(programs, results):
            self.rewards[answer] = (float(result.memory[self.verdict])
                                    if result.halted else 0.0)
            if not result.halted:
                self.unfinished.append(answer)

    def __call__(self, answer: Answer) -> float:
        self.prepare([answer])
        return self.rewards[answer]

    def _word(self, answer: Answer) -> int | None:
        """The whole number `answer` equals, if the checker's word holds it (7.0 is 7, as
        the cache takes it): 7.5 was written into the word as 7 and verified as 7, and '7'
        raised TypeError."""
        if not (isinstance(answer, numbers.Integral)
                or isinstance(answer, numbers.Real) and float(answer).is_integer()):
            return None
        low, high = word_range(self.checker.bits)
        return int(answer) if low <= answer <= high else None


def batch_seed(seed: int, index: int) -> int:
    """The noise seed of batch `index` of a run seeded `seed`: `seed` itself for the first,
    a hash of (seed, index) for the others. Batch i was seeded seed + i, so --seed 0 and
    --seed 1 over 512 samples shared 256 identical samples and runs over consecutive seeds
    were not independent."""
    if index == 0:
        return seed
    return int(np.random.SeedSequence((seed, index)).generate_state(1, np.uint64)[0])


def sample_runs(programs: Sequence[Program], geometry: Geometry, temperature: float,
                seed: int, max_steps: int, batch: int = SAMPLE_BATCH,
                progress: Callable[[int], None] | None = None) -> list:
    """One run on the transformer with stochastic reads at `temperature` per program (all of
    one geometry), in batches of `batch` runs, seeded as `batch_seed` says: their
    RunResults. `progress` is told the passes done so far over all batches."""
    try:
        _whole(batch, "batch", 1)
        _whole(max_steps, "max_steps", 1)
        if _whole(seed, "seed", 0) >= SEEDS:
            raise ValueError(f"seed must be at most 2^64 - 1, got {seed}")
    except ValueError as error:
        raise InputError(str(error)) from None
    from vm.runtime.executor import TransformerExecutor  # torch: see `CheckerReward.prepare`
    results = []
    for index, start in enumerate(range(0, len(programs), batch)):
        executor = TransformerExecutor(geometry, EngineConfig(sampling=temperature,
                                                              seed=batch_seed(seed, index)))
        run = executor.run(executor.load(list(programs[start:start + batch])), max_steps,
                           None if progress is None else
                           (lambda done, offset=index * max_steps: progress(offset + done)))
        results.extend(executor.results(run))
    return results


def answer_address(program: Program, cell: str) -> int:
    """The address of the one-cell answer `cell`, or InputError: an array's name gave its
    first element as the answer, with no word that the rest was left out."""
    symbol = program.symbols.get(cell)
    if symbol is None:
        raise InputError(f"no memory cell named {cell!r}; named cells: "
                         f"{', '.join(sorted(program.symbols)) or 'none'}")
    if symbol.size != 1:
        raise InputError(f"{cell!r} is an array of {symbol.size} cells; the answer is one "
                         f"cell (name a cell that holds it)")
    return symbol.address


def sample_answers(program: Program, geometry: Geometry, samples: int, temperature: float,
                   seed: int, cell: str, max_steps: int, batch: int = SAMPLE_BATCH,
                   progress: Callable[[int], None] | None = None) -> list[int | None]:
    """The value of memory cell `cell` after `samples` runs of a SUBLEQ program on the
    transformer with stochastic reads at `temperature` (None for a run that did not halt
    within `max_steps`), seeded as `sample_runs` seeds them. `samples` 0 or below gave no
    answers at all, silently (examples/test_time_scaling.py --samples -1 printed tables of
    zeros and exited 0)."""
    try:
        _whole(samples, "samples", 1)
    except ValueError as error:
        raise InputError(str(error)) from None
    address = answer_address(program, cell)
    return [result.memory[address] if result.halted else None
            for result in sample_runs([program] * samples, geometry, temperature, seed,
                                      max_steps, batch, progress)]
