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
from vm.transformer.threads import (LONGEST_WAIT, SINGLE_THREAD_MAX_COLUMNS,
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
    large = SINGLE_THREAD_MAX_COLUMNS + 1
    assert MeasuredThreads.for_torch(large, None, True).candidates == (1, 2)
    assert MeasuredThreads.for_torch(large, 3, True).candidates == (3,)
    assert MeasuredThreads.for_torch(SINGLE_THREAD_MAX_COLUMNS, None, True).candidates == (1,)
    assert MeasuredThreads.for_torch(large, None, False).candidates == ()
    torch.set_num_threads(1)
    assert MeasuredThreads.for_torch(large, None, True).candidates == (1,)
    torch.set_num_threads(2)


def _run(threads: MeasuredThreads, seconds: dict[int, float], parts: int) -> list[int]:
    """The counts `parts` parts ran at, each taking `seconds[count]` a pass."""
    used = []
    for _ in range(parts):
        count = threads.next()
        used.append(count)
        threads.learn(count, seconds[count] * 4, passes=4)
    return used


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
def test_torch_passes_give_the_same_bits_at_one_and_two_threads(evaluation):
    """The FLEQ calculator's float64 passes on a batch large enough for torch to split its
    products, at one thread and at two: X equal bit for bit after every pass."""
    program = fleq_workload("calculator")
    states = []
    for threads in (1, 2):
        executor = TransformerExecutor(fleq_geometry_for(program),
                                       EngineConfig(evaluation=evaluation, threads=threads,
                                                    checked=False))
        runner = executor.runner(executor.load([program] * 48))
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
