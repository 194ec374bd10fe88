"""`ltvm sample`: many stochastic runs of a SUBLEQ program, and a test-time strategy over them."""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import json
import math
import numbers
import sys
import tokenize
from pathlib import Path
from typing import Callable

import numpy as np

from assembler.diagnostics import SourceError, source_bytes, undecodable
from assembler.program import Program
from vm.cli.common import (add_time_limit, file_path, load_program, positive_int,
                            seed_value, temperature_value)
from vm.common.errors import InputError, shown_path
from vm.common.files import require_regular_file
from vm.isa import ProgramOptions, for_path, for_program
from vm.tools.progress import Progress
from vm.tools.test_time import (SAMPLE_BATCH, Answer, CheckerReward, answer_address, best_of_n,
                                distribution, majority, reference_reward, sample_answers)

DEFAULT_SAMPLES = 64
DEFAULT_MAX_STEPS = 10_000
MAX_SAMPLES = 1 << 16


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "sample", help="sample a program's answer with stochastic reads; majority or best-of-n",
        description="Run a SUBLEQ program many times on the looped transformer with "
                    "stochastic reads (Gumbel noise on the scratch column's attention scores "
                    "at --noise T, seeded), take the value of memory cell --cell as each run's "
                    "answer, print the answer distribution and its gap Delta to the reference "
                    "interpreter's answer, and the answer a strategy picks: majority "
                    "(self-consistency) or best-of-n under --reward. Exit 0 when the pick is "
                    "the reference's answer, 1 when not. docs/test_time_scaling.md.")
    parser.add_argument("program", type=file_path, metavar="PROG", help="SUBLEQ source (.sq)")
    parser.add_argument("--cell", required=True, metavar="NAME",
                        help="the memory cell whose final value is the answer")
    parser.add_argument("--noise", type=temperature_value, default=0.2, metavar="T",
                        help="temperature of the stochastic reads, above 0 and at most 1e6 "
                             "(default 0.2)")
    parser.add_argument("--samples", type=positive_int, default=DEFAULT_SAMPLES, metavar="N",
                        help=f"runs (default {DEFAULT_SAMPLES}, at most {MAX_SAMPLES})")
    parser.add_argument("--strategy", choices=["majority", "best-of-n"], default="majority",
                        help="majority (default): the most frequent answer of the samples; "
                             "best-of-n: the sampled answer with the highest --reward")
    parser.add_argument("--reward", metavar="R",
                        help="best-of-n's reward: 'reference' (1 for the reference "
                             "interpreter's answer, else 0; the default), CHECK.sq (a SUBLEQ "
                             "verifier run on the transformer with the answer in its cell "
                             "'candidate'; its cell 'ok' is the reward) or SCRIPT.py (a Python "
                             "file defining reward(answer) -> float; answer None for a run "
                             "that did not halt)")
    parser.add_argument("--seed", type=seed_value, default=0, help="noise seed (default 0)")
    parser.add_argument("--max-steps", type=positive_int, default=DEFAULT_MAX_STEPS,
                        metavar="K", help="step limit per run; a run that does not halt "
                                          f"answers 'none' (default {DEFAULT_MAX_STEPS})")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_time_limit(parser)
    parser.set_defaults(func=run, csv=None, bits=None, scratch=None, block_size=None,
                        param=[], functions=None)


def script_reward(path: Path) -> Callable[[Answer], float]:
    """`reward` from a user's Python file (run as a module, never unpickled), called once
    per distinct answer (it was called for every sample: 4,096 calls of a slow verifier for
    a handful of answers). What the script prints goes to stderr: on stdout it broke the
    --json object."""
    require_regular_file(path, "a Python file defining reward(answer)")
    module = importlib.util.module_from_spec(
        importlib.util.spec_from_file_location(f"ltvm_reward_{path.stem}", path))
    text = _script_text(path)
    try:
        code = compile(text, str(path), "exec")
    except SyntaxError as error:
        raise _located(error, path, text) from None
    except ValueError as error:  # a NUL byte, where Python 3.10 says ValueError
        raise _located(SyntaxError(str(error)), path, text) from None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            exec(code, module.__dict__)
    except (Exception, SystemExit) as error:  # the user's code: any failure is bad input
        raise InputError(f"{shown_path(path)}: {type(error).__name__}: {error}") from None
    reward = getattr(module, "reward", None)
    if not callable(reward):
        raise InputError(f"{shown_path(path)} defines no function reward(answer)")

    def checked(answer: Answer) -> float:
        try:
            with contextlib.redirect_stdout(sys.stderr):
                returned = reward(answer)
        except (Exception, SystemExit) as error:
            raise InputError(f"{shown_path(path)}: reward({answer!r}) failed: "
                             f"{type(error).__name__}: {error}") from None
        if not isinstance(returned, (numbers.Real, np.bool_)):  # float() took the text '1'
            raise InputError(f"{shown_path(path)}: reward({answer!r}) returned {returned!r}, not "
                             "a number")
        try:
            value = float(returned)
        except OverflowError:
            raise InputError(f"{shown_path(path)}: reward({answer!r}) returned an integer past "
                             "float's range") from None
        if not math.isfinite(value):
            raise InputError(f"{shown_path(path)}: reward({answer!r}) = {value} is not finite")
        return value

    return functools.cache(checked)


def _script_text(path: Path) -> str:
    """The script's text in the encoding its coding line names (UTF-8 without one); a byte
    that encoding cannot decode is a located error, with a caret under it ('UnicodeDecodeError:
    ... in position 37' named neither line nor column)."""
    data = source_bytes(path, "script")
    try:
        return importlib.util.decode_source(data)
    except UnicodeDecodeError:
        encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
        raise undecodable(path, data, encoding) from None
    except SyntaxError as error:  # an encoding its coding line names that Python lacks
        raise InputError(f"{shown_path(path)}: {error}") from None


def _located(error: SyntaxError, path: Path, text: str) -> InputError:
    """A syntax error of the script at its line and column, shown with a caret as a source
    error of a program is ('SyntaxError: invalid syntax (reward.py, line 1)' named no
    column). The script is compiled from its text, not its bytes: Python counts the column
    of bytes in UTF-8, and the caret stood two places right of an 'é' line's error. The
    caret's line is the decoded text's: read again as UTF-8, a Latin-1 script (with its
    coding line) lost it. A NUL byte, which Python places nowhere, is placed at the first."""
    line, column = error.lineno, error.offset
    if not line and "\0" in text:
        at = text.index("\0")
        line, column = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
    if not line:
        return InputError(f"{shown_path(path)}: {type(error).__name__}: {error}")
    return SourceError(f"SyntaxError: {error.msg}", str(path), text, line, max(1, column or 1))


def _reward(spec: str, correct: Answer, max_steps: int) -> Callable[[Answer], float]:
    if spec == "reference":
        return reference_reward(correct)
    path = Path(spec)
    if path.suffix == ".py":
        return script_reward(path)
    if path.suffix == ".sq":
        checker, geometry = for_path(path).load(path, ProgramOptions())
        return CheckerReward(checker, geometry, max_steps)
    raise InputError(f"--reward must be 'reference', a .sq checker or a .py script, got "
                     f"{spec!r}")


def run(args: argparse.Namespace) -> int:
    if args.samples > MAX_SAMPLES:
        raise InputError(f"--samples {args.samples} exceeds the limit of {MAX_SAMPLES}")
    if args.reward is not None and args.strategy != "best-of-n":  # before the reference runs
        raise InputError("--reward applies to --strategy best-of-n (majority takes no reward)")
    if args.reward == "":  # it was taken as no --reward: the reference's answer, in silence
        raise InputError("--reward is empty: give 'reference', a .sq checker or a .py script")
    program, geometry = load_program(args)
    if not isinstance(program, Program):
        raise InputError("ltvm sample runs SUBLEQ programs (.sq)")
    address = answer_address(program, args.cell)
    # --max-seconds bounds the whole command: every stage's Progress is made here, as each
    # counts from its construction (the reference run and the checker ignored the limit)
    batches = -(-args.samples // SAMPLE_BATCH)
    reference_progress = Progress("reference steps", args.max_steps,
                                  max_seconds=args.max_seconds)
    progress = Progress("passes", batches * args.max_steps, max_seconds=args.max_seconds)
    checker_progress = Progress("checker passes", args.max_steps, max_seconds=args.max_seconds)
    reward_progress = Progress("reward calls", max_seconds=args.max_seconds,
                               unfinished="every answer was rewarded")
    try:
        reference = for_program(program).run_reference(program, args.max_steps,
                                                       progress=reference_progress)
    finally:
        reference_progress.done()
    if not reference.halted:
        raise InputError(f"the reference run does not halt within {args.max_steps} steps")
    correct = reference.memory[address]
    reward_name = args.reward or "reference"
    reward = _reward(reward_name, correct, args.max_steps) \
        if args.strategy == "best-of-n" else None
    try:
        answers = sample_answers(program, geometry, args.samples, args.noise, args.seed,
                                 args.cell, args.max_steps, progress=progress)
    finally:
        progress.done()
    shown = distribution(answers)
    if reward is None:
        chosen = majority(answers)
    else:
        if isinstance(reward, CheckerReward):
            try:
                reward.prepare(answers, checker_progress)
            finally:
                checker_progress.done()
            if reward.unfinished:  # rewarded 0 as if rejected: a slow checker failed silently
                print(f"ltvm: note: the checker did not halt within --max-steps "
                      f"{args.max_steps} on {len(reward.unfinished)} of "
                      f"{len(set(answers))} distinct answers (rewarded 0, as if rejected)",
                      file=sys.stderr)
        else:  # a script's calls, one per distinct answer (cached), each timed and counted:
            # a slow verifier ran past --max-seconds with no word (0.5 s x 31 answers: 19 s
            # against --max-seconds 4, exit 0)
            distinct = list(dict.fromkeys(answers))
            reward_progress.total = len(distinct)
            try:
                for done, answer in enumerate(distinct):
                    reward_progress(done)
                    reward(answer)
            finally:
                reward_progress.done()
        chosen = best_of_n(answers, reward)
    report = {"cell": args.cell, "noise": args.noise, "samples": args.samples,
              "seed": args.seed, "reference": correct,
              "distribution": [{"answer": answer, "p": p}
                               for answer, p in zip(shown.answers, shown.probabilities)],
              "delta": shown.gap(correct), "strategy": args.strategy, "answer": chosen,
              "correct": chosen == correct}
    if reward is not None:
        report["reward"] = reward_name
        report["chosen_reward"] = reward(chosen)
    if isinstance(reward, CheckerReward):
        report["checker_unfinished"] = len(reward.unfinished)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report, shown)
    return 0 if report["correct"] else 1


def _print(report: dict, shown) -> None:
    print(f"reference: {report['reference']}")
    for answer, p in list(zip(shown.answers, shown.probabilities))[:10]:
        print(f"  p({'none' if answer is None else answer}) = {p:.3f}")
    if len(shown.answers) > 10:
        print(f"  ... {len(shown.answers) - 10} more answers")
    print(f"delta: {report['delta']:.3f}")
    chosen = "none" if report["answer"] is None else report["answer"]
    verdict = "correct" if report["correct"] else "wrong"
    if "chosen_reward" in report:
        verdict += f", reward {report['chosen_reward']:g} from {report['reward']}"
    print(f"{report['strategy']}: {chosen} ({verdict})")
