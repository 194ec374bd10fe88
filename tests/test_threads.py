"""The thread count of a run's passes: one thread for small work, `--threads` when given, and
otherwise the faster of one thread and the pool, by measurement; the count never changes X."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.machines.subleq.punchcard import geometry_for
from vm.runtime import fused
from vm.runtime.executor import EngineConfig, TransformerExecutor
from vm.tools.bench import fleq_workload
from vm.tools.workloads import looping_programs, workload_geometry
from vm.transformer.threads import (FIRST_TRY, LONGEST_WAIT, MAX_KINDS, SINGLE_THREAD_MAX_WORK,
                                    TRY_PASSES, MeasuredThreads, cpu_threads)


def test_cpu_threads_picks_one_thread_for_small_work_and_restores():
    torch.set_num_threads(2)
    with cpu_threads(100):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with cpu_threads(100, requested=2):
        assert torch.get_num_threads() == 2


def test_only_large_unrequested_cpu_work_is_measured():
    torch.set_num_threads(2)
    large = SINGLE_THREAD_MAX_WORK + 1
    assert MeasuredThreads.for_torch(large, None, True).candidates == (1, 2)
    assert MeasuredThreads.for_torch(large, 3, True).candidates == (3,)
    assert MeasuredThreads.for_torch(SINGLE_THREAD_MAX_WORK, None, True).candidates == (1,)
    assert MeasuredThreads.for_torch(large, None, False).candidates == ()
    torch.set_num_threads(1)
    assert MeasuredThreads.for_torch(large, None, True).candidates == (1,)
    torch.set_num_threads(2)


def test_runs_are_measured_by_the_work_of_a_pass_not_by_their_columns():
    """FLEQ's inverse-d8 has 473 columns, far below the 32K at which SUBLEQ runs start to
    be measured, but a pass of it is about 1e9 multiply-adds (and faster at two threads on
    an idle 2-core machine): its runs are measured. The calculator's (4e6) and a SUBLEQ
    program's at n = 64 run at one thread, and a SUBLEQ batch of 32K columns is within a
    factor 2 of the bound, where its runs switched before."""
    torch.set_num_threads(2)

    def candidates(geometry, programs) -> tuple[int, ...]:
        executor = TransformerExecutor(geometry, EngineConfig(evaluation="active",
                                                              checked=False))
        return executor.runner(executor.load(programs)).torch_threads.candidates

    inverse, calculator = fleq_workload("inverse-d8"), fleq_workload("calculator")
    assert candidates(fleq_geometry_for(inverse), [inverse]) == (1, 2)
    assert candidates(fleq_geometry_for(calculator), [calculator]) == (1,)
    program = looping_programs(workload_geometry(64), 1)[0]
    assert candidates(geometry_for(program), [program]) == (1,)
    work = TransformerExecutor(geometry_for(program), EngineConfig()).model.multiply_adds(512)
    assert SINGLE_THREAD_MAX_WORK / 2 < work < 2 * SINGLE_THREAD_MAX_WORK


def _run(threads: MeasuredThreads, seconds: dict[int, float], parts: int) -> list[int]:
    """The counts `parts` parts ran at, each taking `seconds[count]` a pass."""
    used = []
    for _ in range(parts):
        count = threads.next()
        used.append(count)
        threads.learn(count, seconds[count] * 4, passes=4)
    return used


def _run_kinds(threads: MeasuredThreads, seconds: dict[str, dict[int, float]],
               kinds: list[str], parts: int, keyed: bool = True) -> list[int]:
    """The counts of `parts` single-pass parts of the kinds `kinds` in turn, a part of kind
    k at count c taking `seconds[k][c]` (told its kind only where `keyed`)."""
    used = []
    for index in range(parts):
        kind, count = kinds[index % len(kinds)], threads.next()
        used.append(count)
        threads.learn(count, seconds[kind][count], kind=kind if keyed else None)
    return used


CHEAP_AND_DEAR = {"cheap": {1: 1.0, 2: 0.6}, "dear": {1: 10.0, 2: 6.0}}
"""Passes of two kinds, each faster at two threads (a FLEQ program alternating an
instruction of a small block and one of a large block)."""


def test_passes_of_differing_cost_are_compared_with_passes_of_their_kind():
    """Cheap and dear passes in turn: told their kinds, the run chooses the pool, faster on
    both, and keeps it; compared with the pass before them, every try paired a cheap pass
    at one thread with a dear one at two, and the run stayed at one thread."""
    keyed = MeasuredThreads((1, 2))
    used = _run_kinds(keyed, CHEAP_AND_DEAR, ["cheap", "dear"], 400)
    assert keyed.chosen == 2 and used.count(2) > 380
    unkeyed = MeasuredThreads((1, 2))
    used = _run_kinds(unkeyed, CHEAP_AND_DEAR, ["cheap", "dear"], 400, keyed=False)
    assert unkeyed.chosen == 1 and used.count(2) < 20


def test_a_try_of_a_kind_the_chosen_count_has_not_run_decides_nothing():
    """Every part a new kind: no try has a part to be compared with, so the run stays at
    its first count however fast the other is, trying again after the same short wait,
    and keeps at most MAX_KINDS times."""
    threads = MeasuredThreads((1, 2))
    seconds = {str(i): {1: 9.0, 2: 1.0} for i in range(3 * MAX_KINDS)}
    used = _run_kinds(threads, seconds, list(seconds), 3 * MAX_KINDS)
    assert threads.chosen == 1
    gaps = np.diff([i for i, count in enumerate(used) if count == 2])
    assert set(gaps[1:]) == {FIRST_TRY + 2}
    assert len(threads._latest) <= MAX_KINDS


def test_a_slower_pool_is_tried_ever_more_rarely():
    threads = MeasuredThreads((1, 2))
    used = _run(threads, {1: 1.0, 2: 20.0}, 6000)
    tries = [i for i, count in enumerate(used) if count == 2]
    assert used[:4] == [1, 2, 1, 2], "each count's first part, then a pair at once"
    gaps = np.diff(tries)  # the wait, the chosen count's part of the pair, and the try
    assert (np.diff(gaps) >= 0).all() and gaps.max() == LONGEST_WAIT + 2
    assert len(tries) < 20 and threads.most_used == 1
    assert threads.passes == {1: 4 * (6000 - len(tries)), 2: 4 * len(tries)}


def test_a_faster_pool_is_chosen_and_kept():
    threads = MeasuredThreads((1, 2))
    used = _run(threads, {1: 3.0, 2: 1.0}, 200)
    assert used[:4] == [1, 2, 1, 2]
    assert used.count(1) < 20 and threads.chosen == 2 and threads.most_used == 2


def test_the_choice_follows_a_change_of_load():
    threads = MeasuredThreads((1, 2))
    _run(threads, {1: 3.0, 2: 1.0}, 100)
    assert threads.chosen == 2
    _run(threads, {1: 1.0, 2: 5.0}, 200)
    assert threads.chosen == 1


def test_a_try_is_a_pair_of_flagged_parts_chosen_count_first():
    threads = MeasuredThreads((1, 2))
    flagged = []
    for _ in range(40):
        trying, count = threads.trying, threads.next()
        if trying:
            flagged.append(count)
        threads.learn(count, {1: 1.0, 2: 9.0}[count])
    assert len(flagged) >= 4 and flagged == [1, 2] * (len(flagged) // 2)
    assert threads.passes[2] == len(flagged) // 2 and not MeasuredThreads((3,)).trying


def test_a_try_is_compared_with_an_equally_short_part_of_the_chosen_count():
    """A fused call pays a fixed cost per call (each program's working set reloaded): the
    pool, twice as fast per pass, lost every try of 4 passes against the chosen count's
    calls of 128, and batch 16 ran at one thread, half its rate."""
    threads = MeasuredThreads((1, 2))
    per_pass, per_call = {1: 2.4, 2: 1.2}, 8.0
    for _ in range(40):
        count = threads.next()
        passes = TRY_PASSES if threads.trying else 128
        threads.learn(count, per_call + per_pass[count] * passes, passes)
    assert threads.chosen == 2 and threads.most_used == 2


def test_a_counts_first_part_is_not_compared_and_a_run_can_try_first():
    """A first part may include a compile (numba's parallel kernel on a cold cache): a pool
    whose first part took 1000 s a pass is still chosen once it runs faster."""
    threads = MeasuredThreads((1, 2))
    _run(threads, {1: 3.0}, 1)
    threads.try_next()
    assert threads.trying and threads.next() == 2
    threads.learn(2, 1000.0)
    used = _run(threads, {1: 3.0, 2: 1.0}, 20)
    assert used[:2] == [1, 2], "compared as soon as each count has run once"
    assert threads.chosen == 2 and used.count(2) > 10


def test_a_single_count_is_always_used_and_other_counts_are_ignored():
    threads = MeasuredThreads((3,))
    assert _run(threads, {3: 1.0}, 10) == [3] * 10
    threads.learn(7, 1.0)
    threads.learn(3, 1.0, passes=0)
    assert threads.passes == {3: 40} and MeasuredThreads(()).next() == 0


@pytest.mark.parametrize("evaluation", ["full", "active"])
@pytest.mark.parametrize("name, batch", [("calculator", 48), ("inverse-d8", 1)])
def test_torch_passes_give_the_same_bits_at_one_and_two_threads(evaluation, name, batch):
    """FLEQ's float64 passes large enough for torch to split its products (the calculator
    on a batch, inverse-d8 alone, which runs measured), at one thread and at two: X equal
    bit for bit after every pass."""
    program = fleq_workload(name)
    states = []
    for threads in (1, 2):
        executor = TransformerExecutor(fleq_geometry_for(program),
                                       EngineConfig(evaluation=evaluation, threads=threads,
                                                    checked=False))
        runner = executor.runner(executor.load([program] * batch))
        passes = []
        for _ in range(4):
            runner.advance(1)
            passes.append(runner.state().numpy().view(np.uint64).copy())
        assert runner.threads == threads
        states.append(passes)
    for one, two in zip(*states):
        assert np.array_equal(one, two)


@pytest.mark.skipif(not fused.available(), reason="fused passes need numba")
def test_a_subleq_run_measures_the_fused_threads_unless_threads_are_given():
    program = looping_programs(workload_geometry(64), 1)[0]
    geometry = geometry_for(program)
    pool = fused.thread_count(None)
    given = TransformerExecutor(geometry, EngineConfig(evaluation="fused", threads=1))
    runner = given.runner(given.load([program] * 4))
    runner.advance(300)
    assert runner.fused_threads.candidates == (1,) and runner.threads == 1
    free = TransformerExecutor(geometry, EngineConfig(evaluation="fused"))
    runner = free.runner(free.load([program] * 4))
    measured, learn, tries = runner.fused_threads, runner.fused_threads.learn, []

    def learning(threads: int, seconds: float, passes: int = 1) -> None:
        if measured.trying:
            tries.append(passes)
        learn(threads, seconds, passes)
    runner.fused_threads.learn = learning
    runner.advance(600)
    assert measured.candidates == ((1, pool) if pool > 1 else (1,))
    assert (sum(measured.passes.values()) + sum(runner.torch_threads.passes.values())) == 600
    if pool > 1:  # the other count was tried, in short calls
        assert tries and max(tries) <= TRY_PASSES
