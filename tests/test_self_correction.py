"""Self-correction with a verifier (vm/tools/self_correction.py): the FLEQ bandit chooses as
the same algorithm in Python does, the experts compute what they claim, and the protocol
ends on the expert that solves the task, for satisfiable and unsatisfiable instances."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from assembler.subleq import assemble
from vm.machines.subleq.reference import run_reference
from vm.tools.self_correction import (EXPERTS, BanditState, bandit_choice, expert_responses,
                                      expert_source, explore_then_commit, random_3sat,
                                      satisfiable, self_correct)

UNSAT = [tuple(s * v for s, v in zip(signs, (1, 2, 3)))
         for signs in itertools.product((1, -1), repeat=3)]
"""All eight sign patterns over x1, x2, x3: every assignment falsifies one clause."""


@pytest.mark.parametrize("seed, explore", [(0, 6), (1, 3), (2, 9)])
def test_the_fleq_bandit_chooses_as_explore_then_commit_does(seed, explore):
    rewards = np.random.default_rng(seed).integers(0, 2, size=(11, 3)).tolist()
    state, choices = BanditState(3, explore), []
    for round_, paid in enumerate(rewards):
        arm = bandit_choice(state)
        choices.append(arm)
        state.last, state.reward, state.round = arm, paid[arm], round_ + 1
    assert choices == explore_then_commit(rewards, explore)


def test_explore_then_commit_breaks_ties_toward_the_first_arm():
    assert explore_then_commit([[1, 1, 0]] * 5, 3) == [0, 1, 2, 0, 0]
    assert explore_then_commit([[0, 1, 1]] * 5, 3) == [0, 1, 2, 1, 1]


def test_satisfiability_by_brute_force():
    assert not satisfiable(UNSAT, 3)
    assert satisfiable(UNSAT[:-1], 3)
    assert satisfiable([(1, -2, 3)], 3)
    rng = np.random.default_rng(4)
    verdicts = {satisfiable(random_3sat(rng), 4) for _ in range(40)}
    assert verdicts == {True, False}


@pytest.mark.parametrize("expert", EXPERTS)
def test_each_expert_program_computes_its_function(expert):
    data = [3, 1, 4, 1, 5]
    program = assemble(expert_source(expert, data), expert)
    ys = program.symbols["ys"]
    result = run_reference(program, 1000)
    got = result.memory[ys.address:ys.address + ys.size]
    expected = {"copy": data, "reverse": data[::-1], "rotate": data[-1:] + data[:-1]}[expert]
    assert result.halted and got == expected


@pytest.mark.parametrize("clauses, expert", [(UNSAT[:-1], "copy"), (UNSAT, "reverse")],
                         ids=["satisfiable", "unsatisfiable"])
def test_self_correction_ends_on_the_expert_that_solves_the_task(clauses, expert):
    """The task copies the data when the instance is satisfiable and reverses it otherwise;
    the expert is named here, not derived from the module's own target()."""
    data = [0, 1, 1, 0, 0]
    run = self_correct(data, clauses, 3, rounds=9, explore=6, noise=0.1, seed=5)
    wanted = EXPERTS.index(expert)
    assert run.correct_arm == wanted
    assert run.choices[6:] == [wanted] * 3
    assert run.rewards[6:] == [1, 1, 1]


@pytest.mark.parametrize("expert, data, message", [
    ("copy", [], "one or more whole numbers from -128 to 127"),      # SourceError at '.array'
    ("copy", [300, 1], "one or more whole numbers from -128 to 127"),  # 'does not fit'
    ("copy", [1.5], "one or more whole numbers from -128 to 127"),   # "unknown directive '.5,'"
    ("copy", [True], "one or more whole numbers from -128 to 127"),
    ("sort", [1, 2], "unknown expert 'sort'"),                       # KeyError
])
def test_an_expert_refuses_what_it_cannot_write_by_name(expert, data, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        expert_source(expert, data)


@pytest.mark.parametrize("call, message", [
    (lambda: satisfiable([], 40), "variables must be a whole number from 0 to 20"),  # 2^40
    (lambda: satisfiable([(1, 2, 9)], 3), "clause (1, 2, 9): a literal is +v or -v"),  # Index
    (lambda: satisfiable([(0, 1, 2)], 3), "clause (0, 1, 2): a literal is +v or -v"),  # x_3
    (lambda: random_3sat(np.random.default_rng(), variables=2), "needs 3 to 20 variables"),
])
def test_a_3sat_instance_outside_what_brute_force_can_decide_is_refused(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


@pytest.mark.parametrize("call, message", [
    (lambda: BanditState(0, 3), "one or more arms"),                     # chose no arm
    (lambda: BanditState(3, -1), "0 or more rounds of exploration"),
    (lambda: BanditState(3, 2, sums=[1, 2]), "3 arms need 3 reward sums"),  # IndexError
    (lambda: BanditState(3, 2, last=5), "a last arm below 3"),           # credited no arm
    (lambda: self_correct([1, 2], UNSAT, 3, -1, 1, 0.1, 0), "rounds must be a whole number"),
    (lambda: expert_responses("copy", [1, 2], -1, 0.1, 0), "attempts must be a whole number"),
])
def test_a_bandit_or_protocol_that_cannot_play_is_refused(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_explore_then_commit_of_no_rounds_chooses_nothing():
    """rewards[0] was an IndexError."""
    assert explore_then_commit([], 3) == []
