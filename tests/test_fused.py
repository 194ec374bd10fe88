"""The fused pass's 8-bit score mirror (vm/runtime/fused.py): what it refuses, and that a
cache it cannot mirror exactly sends the pass to the torch form instead of a guess."""

import dataclasses
import os
import signal
import threading
import time
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("numba")

import vm.runtime.fused as fused_module  # noqa: E402
from vm.runtime.executor import EngineConfig, TransformerExecutor  # noqa: E402
from vm.runtime.fused import (MIRROR_MAX, NARROW_NO_SCORE, NO_SCORE, SCAN_BLOCK,  # noqa: E402
                              _entry_rows, _first_at_least, _head_scores, _lane_feed_forward,
                              _lanes_in, _lattice_exact, _mirror_scores, _numerators, _project,
                              _scoring, _sparse, _top_two)
from vm.transformer.layers import flush_denormals, to_internal  # noqa: E402
from vm.tools.workloads import looping_programs, workload_geometry  # noqa: E402


def _head(r: int = 2) -> SimpleNamespace:
    """One head's group: queries in projection rows 0..r-1, keys in r..2r-1."""
    return SimpleNamespace(count=1, r=r, q=slice(0, r), key=slice(r, 2 * r))


@pytest.mark.parametrize("bits", [0, 1, 3])
def test_the_mirror_takes_numerators_up_to_8_bits_and_refuses_more(bits):
    """A row's largest numerator is its weights' absolute sum times 2^F (lattice inputs)."""
    reach = np.ones(4)
    reach[3] = MIRROR_MAX / 2 ** bits
    assert _scoring([(0, bits, _head())], reach) is not None
    reach[3] = (MIRROR_MAX + 1) / 2 ** bits
    assert _scoring([(0, bits, _head())], reach) is None


def test_the_mirror_layout_names_each_heads_query_and_key_rows():
    """Two layers' heads: the mirror holds every query row, then every key row, of each."""
    first, second = _head(2), SimpleNamespace(count=2, r=1, q=slice(1, 3), key=slice(3, 5))
    rows, scale, largest, groups, own_bound, heads = _scoring(
        [(0, 0, first), (10, 2, second)], np.ones(20))
    assert rows.tolist() == [0, 1, 2, 3, 11, 12, 13, 14]
    assert scale.tolist() == [1, 1, 1, 1, 4, 4, 4, 4]
    assert groups.tolist() == [[0, 2, 0], [4, 6, 1]]
    assert heads.tolist() == [[0, 2, 2], [4, 6, 1], [5, 7, 1]]
    assert own_bound.tolist() == [2, 16, 16]


def test_query_numerators_use_the_least_power_of_two_and_respect_the_limit():
    P = np.array([[0.75], [-1.5], [2.0]])
    out = np.empty(3)
    assert _numerators(P, 0, 3, 0, out, 2.0 ** 24) == 4.0
    assert out.tolist() == [3.0, -6.0, 8.0]
    assert _numerators(P, 2, 1, 3, out, 2.0 ** 24) == 8.0
    assert out[0] == 16.0
    assert _numerators(P, 0, 3, 0, out, 8.0) == 0.0


def test_a_cache_entry_the_mirror_cannot_hold_sends_the_pass_to_the_torch_form():
    """A cached key that is not an integer numerator (impossible on the lattice, forced
    here) must not be rounded into the mirror: the fused form makes no pass, X is left as
    it was, and the torch pass that follows still matches the full pass."""
    shape = workload_geometry(64)
    executor = TransformerExecutor(shape, EngineConfig(evaluation="fused"))
    cards = executor.load(looping_programs(shape, 2, seed=3))
    pc = np.arange(executor.layout["pc"].start, executor.layout["pc"].stop)
    evaluator = executor.active
    with torch.inference_mode(), flush_denormals():
        full, active = to_internal(cards), to_internal(cards)
        run = evaluator.start(active, fused=True)
        record = torch.empty((4, len(pc), active.shape[1]), dtype=active.dtype)
        run.step(0)
        executor.model.step_(full)
        assert run.fused_state is None
        mirrored_row = int(evaluator.fused.mirror_rows[0])
        run.cache[1, mirrored_row, 5] += 0.5
        before = active.clone()
        assert run.fused_steps(4, record, pc, threads=1) == 0
        assert torch.equal(active, before) and run.fused_state is None
        run.stale = True
        for step in range(1, 6):
            executor.model.step_(full)
            if not run.fused_steps(1, record, pc, threads=1):
                run.step(step)
            assert torch.equal(full, active), f"X differs after pass {step}"
        assert run.fused_passes > 0


def _reference_top_two(scores: list[int]) -> tuple[int, int, int]:
    """The scan the branch-free sweeps replaced: strictly greater takes the lead, so the
    first column holding the largest wins and a tie makes the runner-up the largest."""
    top = second = NO_SCORE
    winner = -1
    for i, score in enumerate(scores):
        if score > second:
            if score > top:
                second, top, winner = top, score, i
            else:
                second = score
    return top, second, winner


@pytest.mark.parametrize("none", [NO_SCORE, NARROW_NO_SCORE])
@pytest.mark.parametrize("seed", range(40))
def test_the_top_two_sweeps_agree_with_the_scan_they_replaced(seed, none):
    """In int32 and in int16 (a live head's narrow scores), each with its own NO_SCORE."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 4 * SCAN_BLOCK))  # the top in any block, or its remainder
    scores = rng.integers(-3, 4, size=n).astype(type(none))  # many ties
    scores[rng.random(n) < rng.choice([0.2, 1.0])] = none  # columns evaluated apart
    given = scores.copy()
    top, second, winner = _top_two(scores, n, none)
    expected = _reference_top_two(np.where(given == none, NO_SCORE, given).tolist())
    assert ((NO_SCORE if top == none else int(top)), (NO_SCORE if second == none
            else int(second)), int(winner)) == expected
    assert np.array_equal(scores, given)  # the winner's slot, hidden for a sweep, restored


@pytest.mark.parametrize("seed", range(40))
def test_the_threshold_scan_finds_the_first_value_at_least_the_threshold(seed):
    """Blocks of SCAN_BLOCK counted at once, then one by one: the same index as a plain
    scan, hits at a block's edges, in its remainder and none at all included."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 4 * SCAN_BLOCK))
    values = np.where(rng.random(n) < rng.choice([0.0, 0.01, 0.2]), 1.0, -np.inf)
    start = int(rng.integers(0, n + 1))
    expected = next((j for j in range(start, n) if values[j] >= 0.5), n)
    assert _first_at_least(values, start, n, 0.5) == expected


def test_integer_scores_are_the_exact_sums_and_ignore_rows_without_entries():
    """A row whose mirror is all zero adds nothing even when its numerator is far past
    int32 (a float64 numerator of such a row is not bounded by the caller)."""
    rng = np.random.default_rng(0)
    r, n = 6, 50
    mirror = rng.integers(-2, 3, size=(1, r, n)).astype(np.int8)
    mirror[0, 4] = 0
    reach = np.abs(mirror[0]).max(axis=1).astype(np.float64)
    numerators = rng.integers(-1000, 1000, size=r).astype(np.float64)
    numerators[4] = 2.0 ** 50
    scores = np.empty(n, np.int32)
    _mirror_scores(mirror, 0, 0, numerators, reach, r, n, scores)
    expected = sum(int(numerators[t]) * mirror[0, t].astype(np.int64) for t in range(r)
                   if reach[t] > 0)
    assert scores.tolist() == expected.tolist()


@pytest.mark.parametrize("total", [2 ** 15 - 1, 2 ** 15, 2 ** 20])
def test_head_scores_are_summed_in_int16_only_where_int16_holds_every_sum(total):
    """A head whose terms' magnitudes add up to `total` (`size`), every term positive in
    column 0 and negative in column 1, so that those scores are +-total: below 2^15 the
    int16 sum is exact; from 2^15 on it would wrap (2^15 is -2^15 in int16), so the scores
    must come from the int32 sum, as before."""
    rng = np.random.default_rng(total)
    r, n = 5, 40
    cuts = np.sort(rng.choice(np.arange(1, total), size=r - 1, replace=False))
    numerators = np.diff(np.concatenate([[0], cuts, [total]])).astype(np.float64)
    mirror = rng.integers(-1, 2, size=(1, r, n)).astype(np.int8)
    mirror[0, :, 0], mirror[0, :, 1] = 1, -1
    reach = np.abs(mirror[0]).max(axis=1).astype(np.float64)
    size = float(np.abs(numerators) @ reach)
    scores, narrow = np.empty(n, np.int32), np.empty(n, np.int16)
    _head_scores(mirror, 0, 0, numerators, reach, r, n, size, narrow, scores)
    expected = (numerators.astype(np.int64) @ mirror[0].astype(np.int64)).tolist()
    assert size == total and scores[:2].tolist() == [total, -total]
    assert scores.tolist() == expected


@pytest.mark.parametrize("seed", range(30))
def test_a_projection_skips_its_checks_only_where_they_cannot_fail(seed):
    """`_project` takes its unchecked sums on a column of -1, 0 and 1 in a layer
    `_lattice_exact` allows: its answer (proven or not, and every bit of the output) is the
    checked path's, at limits below, at and above the layer's largest row of numerators,
    on lattice columns and on columns holding a half or a third."""
    rng = np.random.default_rng(seed)
    rows, read_rows, bits = int(rng.integers(1, 12)), int(rng.integers(1, 10)), 2
    W = rng.integers(-8, 9, size=(rows, read_rows)) * (rng.random((rows, read_rows)) < 0.5) / 4
    pointers, indices, values = _sparse(W, bits)
    largest = float(np.abs(W * 2 ** bits).sum(axis=1).max())
    read = rng.permutation(read_rows + 3)[:read_rows]
    column = rng.choice([-1.0, 0.0, 1.0], size=read_rows + 3)
    if seed % 3 == 1:
        column[read[0]] = 0.5
    elif seed % 3 == 2:
        column[read[0]] = 1 / 3
    junk = np.zeros(read_rows + 3, np.bool_)
    for limit in (largest, largest + 1, 2.0 ** 24, max(largest - 1, 1.0)):
        answers = []
        for lattice in (_lattice_exact(W, bits, limit), False):
            out, buffer = np.full(rows, np.nan), np.empty(read_rows)
            answers.append((_project(pointers, indices, values, _entry_rows(pointers), bits,
                                     lattice, read, column, out, buffer, limit, junk),
                            out.tobytes()))
        assert answers[0] == answers[1], limit
        assert _lattice_exact(W, bits, limit) == (largest < limit)
        if answers[0][0]:
            exact = [sum(Fraction(float(W[i, j])) * Fraction(float(column[read[j]]))
                         for j in range(read_rows)) for i in range(rows)]
            assert [Fraction(float(v)) for v in np.frombuffer(answers[0][1])] == exact
    junk[read[-1]] = True  # a read row holding a zero-query average: never a projection
    for lattice in (True, False):
        assert not _project(pointers, indices, values, _entry_rows(pointers), bits, lattice, read,
                            column, np.empty(rows), np.empty(read_rows), 2.0 ** 24, junk)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lanes_give_each_relu_layer_exactly_and_refuse_what_they_cannot_prove(dtype):
    """Every ReLU layer of the n = 64 SUBLEQ machine on many columns at once: each lane it
    keeps holds x + W2 relu(W1 x + b1) + b2 computed exactly (in exact rationals), and the
    lanes holding a third, an infinity, a NaN or values whose sums pass the dtype's exact
    range are refused."""
    executor = TransformerExecutor(workload_geometry(64), EngineConfig(evaluation="fused",
                                                                       dtype=dtype))
    form = executor.active.fused
    (ffn_read, W1_pointers, W1_indices, _, _, written, W2_pointers, W2_indices, _, _,
     bits) = form.tables[12:23]
    touch, bounds, lane_W1, lane_b1, lane_W2, lane_b2, scales = form.lane_tables
    assert form.lane_dtype == np.dtype(dtype)
    rng = np.random.default_rng(1)
    big = 2.0 ** (25 if dtype == "float32" else 53)
    for L, layer in enumerate(executor.machine.weights.layers):
        if len(written[L]) == 0:
            continue
        ffn, rows = layer.ffn, len(layer.ffn.b2)
        kept = [rng.choice([-1.0, 0.0, 1.0], size=rows) for _ in range(6)]
        kept += [rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], size=rows) for _ in range(3)]
        refused = []
        for value in (1 / 3, np.inf, np.nan, big):
            column = rng.choice([-1.0, 0.0, 1.0], size=rows)
            column[ffn_read[L]] = value
            refused.append(column)
        V = np.stack(kept + refused, axis=1).astype(dtype)
        lanes = V.shape[1]
        H = np.zeros((len(lane_b1[L]), lanes), dtype)
        lane_bits, lane_ok = np.zeros(lanes, np.int64), np.zeros(lanes, np.bool_)
        lane_max, lane_top, lane_bad = np.zeros(lanes), np.zeros(lanes), np.zeros(lanes, np.int64)
        before = V.copy()
        _lane_feed_forward(W1_pointers[L], W1_indices[L], lane_W1[L], lane_b1[L],
                           W2_pointers[L], W2_indices[L], lane_W2[L], lane_b2[L], ffn_read[L],
                           written[L], touch[L], bits[L, 0], bits[L, 1], bounds[L], scales[L],
                           form.limit, V, H, lanes, lane_bits, lane_max, lane_top, lane_bad,
                           lane_ok)
        assert lane_ok[:len(kept)].all(), f"layer {L} refused a column it can prove"
        assert not lane_ok[len(kept):].any(), f"layer {L} kept a column it cannot prove"
        for lane in range(len(kept)):
            x = [Fraction(float(v)) for v in before[:, lane]]
            hidden = [max(Fraction(0), Fraction(float(ffn.b1[u])) + sum(
                Fraction(float(w)) * x[j] for j, w in enumerate(ffn.W1[u]) if w))
                for u in range(len(ffn.b1))]
            for row in written[L]:
                exact = x[row] + Fraction(float(ffn.b2[row])) + sum(
                    Fraction(float(w)) * hidden[u] for u, w in enumerate(ffn.W2[row]) if w)
                assert Fraction(float(V[row, lane])) == exact, (L, lane, row)


def test_float32_lanes_refuse_a_value_float32_would_round():
    """The lanes of a float32 run are float32, the programs' evaluated columns float64: a
    value float32 cannot hold (1 + 2^-30, 2^30 + 1) reaches its lane as NaN, and the lane
    is refused, where a cast would have handed the ReLU layer a rounded 1.0 or 2^30."""
    executor = TransformerExecutor(workload_geometry(64), EngineConfig(evaluation="fused",
                                                                       dtype="float32"))
    form = executor.active.fused
    (ffn_read, W1_pointers, W1_indices, _, _, written, W2_pointers, W2_indices, _, _,
     bits) = form.tables[12:23]
    touch, bounds, lane_W1, lane_b1, lane_W2, lane_b2, scales = form.lane_tables
    L = next(L for L in range(len(written)) if len(written[L]) > 0)
    rows = len(executor.machine.weights.layers[L].ffn.b2)
    states = np.random.default_rng(2).choice([-1.0, 0.0, 1.0], size=(3, rows, 1))
    states[1, ffn_read[L][0], 0] = 1.0 + 2.0 ** -30
    states[2, written[L][0], 0] = 2.0 ** 30 + 1.0
    lanes = 3
    V = np.zeros((rows, lanes), np.float32)
    _lanes_in(V, states, np.arange(lanes), np.zeros(lanes, np.int64), touch[L], lanes)
    assert not np.isnan(V[:, 0]).any() and (V[touch[L], 0] == states[0, touch[L], 0]).all()
    assert np.isnan(V[ffn_read[L][0], 1]) and np.isnan(V[written[L][0], 2])
    H = np.zeros((len(lane_b1[L]), lanes), np.float32)
    lane_bits, lane_ok = np.zeros(lanes, np.int64), np.zeros(lanes, np.bool_)
    lane_max, lane_top, lane_bad = np.zeros(lanes), np.zeros(lanes), np.zeros(lanes, np.int64)
    _lane_feed_forward(W1_pointers[L], W1_indices[L], lane_W1[L], lane_b1[L], W2_pointers[L],
                       W2_indices[L], lane_W2[L], lane_b2[L], ffn_read[L], written[L], touch[L],
                       bits[L, 0], bits[L, 1], bounds[L], scales[L], form.limit, V, H, lanes,
                       lane_bits, lane_max, lane_top, lane_bad, lane_ok)
    assert lane_ok.tolist() == [True, False, False]

def _beside_the_full_pass(config: EngineConfig, programs: int, seed: int, passes: int):
    """A fused runner of `programs` looping programs (n = 64) advanced pass by pass beside
    the full pass under the same config, X equal after every pass; returns the runner and
    its compiled form."""
    shape = workload_geometry(64)
    executor = TransformerExecutor(shape, config)
    cards = executor.load(looping_programs(shape, programs, seed=seed))
    full = TransformerExecutor(shape, dataclasses.replace(config, evaluation="full"))
    run, reference = executor.runner(cards.clone()), full.runner(cards.clone())
    for step in range(passes):
        run.advance(1)
        reference.advance(1)
        assert torch.equal(run.X, reference.X), f"X differs after pass {step}"
    return run, executor.active.fused


@pytest.mark.parametrize("threads", [1, 2])
def test_a_batch_runs_in_lockstep_bit_identically(threads, monkeypatch):
    """Six programs (blocks of three with two threads) for 200 passes: X equal to the full
    pass after every pass, and the passes proven in lockstep, none evaluated again alone;
    with two threads the second share of blocks ran on the pool's thread."""
    pool_threads = set()
    pool = fused_module._thread_pool

    def spied_pool():
        submit = pool().submit
        return SimpleNamespace(submit=lambda *job: submit(_in_thread(pool_threads, *job)))
    monkeypatch.setattr(fused_module, "_thread_pool", spied_pool)
    _, form = _beside_the_full_pass(EngineConfig(evaluation="fused", threads=threads), 6, 5, 200)
    proven, again = form.lockstep_tally()
    assert proven >= 6 * 150 and again == 0
    assert len(pool_threads - {threading.get_ident()}) == (threads > 1)


def _in_thread(seen: set, job, *arguments):
    """`job(*arguments)`, noting the thread it runs in."""
    def noted():
        seen.add(threading.get_ident())
        return job(*arguments)
    return noted


def test_a_batch_whose_guard_fails_is_refused_in_lockstep_and_alone():
    """At temperature 1.0 (n = 64) some pass changes a second memory column: the lockstep
    pass must not prove it, nor the program alone, and X stays equal to the full pass."""
    config = EngineConfig(evaluation="fused", temperature=1.0, checked=False)
    run, form = _beside_the_full_pass(config, 3, 1, 20)
    proven, _ = form.lockstep_tally()
    assert run.fallbacks > 0 and proven == 0


def _two_shares(monkeypatch, lockstep) -> None:
    """Four fused passes of two programs at two threads, each share of blocks (one program
    each) run by `lockstep(start, ...)` in place of the compiled kernel."""
    shape = workload_geometry(64)
    executor = TransformerExecutor(shape, EngineConfig(evaluation="fused", threads=2))
    cards = executor.load(looping_programs(shape, 2, seed=3))
    pc = np.arange(executor.layout["pc"].start, executor.layout["pc"].stop)
    monkeypatch.setattr(fused_module, "_lockstep", lockstep)
    with torch.inference_mode(), flush_denormals():
        active = to_internal(cards)
        run = executor.active.start(active, fused=True)
        run.step(0)
        record = torch.empty((4, len(pc), active.shape[1]), dtype=active.dtype)
        run.fused_steps(4, record, pc, threads=2)


def test_ctrl_c_in_the_calling_thread_waits_for_the_other_share(monkeypatch):
    """A Ctrl-C while the calling thread runs its share of blocks must not return while the
    pool's thread still writes X: the REPL goes on with the same machine after a Ctrl-C."""
    calling_thread, ended = threading.get_ident(), []

    def interrupted_or_slow(start, *arguments):
        if threading.get_ident() == calling_thread:
            raise KeyboardInterrupt
        time.sleep(0.3)
        ended.append(start)
    with pytest.raises(KeyboardInterrupt):
        _two_shares(monkeypatch, interrupted_or_slow)
    assert ended == [1]


def test_a_signal_while_waiting_for_the_other_share_is_raised_once_it_ends(monkeypatch):
    """A signal whose handler raises (the command line's SIGTERM raises its own exception,
    not KeyboardInterrupt) while the calling thread waits for the pool's share: the wait
    goes on to the share's end, and the exception is raised then."""
    calling_thread, ended = threading.get_ident(), []

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    def signalling_then_slow(start, *arguments):
        if threading.get_ident() != calling_thread:
            signal.pthread_kill(calling_thread, signal.SIGUSR1)
            time.sleep(0.3)
            ended.append(start)
    previous = signal.signal(signal.SIGUSR1, stop)
    try:
        with pytest.raises(SystemExit):
            _two_shares(monkeypatch, signalling_then_slow)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert ended == [1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_runs_a_batch_on_threads_of_its_own():
    """The pool made in the parent has no threads in a forked child: a two-thread batch
    there waited for ever on work nothing ran. (Torch keeps one thread here: its own pool
    does not survive a fork either.)"""
    shape = workload_geometry(64)
    executor = TransformerExecutor(shape, EngineConfig(evaluation="fused"))
    cards = executor.load(looping_programs(shape, 2, seed=3))
    pc = np.arange(executor.layout["pc"].start, executor.layout["pc"].stop)
    with torch.inference_mode(), flush_denormals():
        active = to_internal(cards)
        run = executor.active.start(active, fused=True)
        run.step(0)
        record = torch.empty((4, len(pc), active.shape[1]), dtype=active.dtype)
        assert run.fused_steps(2, record, pc, threads=2) == 2
        assert fused_module._pool is not None
        child = os.fork()
        if child == 0:
            os._exit(0 if run.fused_steps(2, record, pc, threads=2) == 2 else 1)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        finished, status = os.waitpid(child, os.WNOHANG)
        if finished:
            break
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        os.waitpid(child, 0)
        pytest.fail("the batch in the forked child never finished")
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_machine_code_probe_finds_what_numba_has_and_compiles_nothing():
    """`_has_machine_code` answers from the process and numba's cache; where neither has the
    kernel's code for these types it stops numba's compile, so nothing is compiled."""
    import numba

    @numba.njit
    def twice(x):
        return 2 * x

    assert not fused_module._has_machine_code(twice, (1.5,))
    assert len(twice.overloads) == 0
    assert twice(1.5) == 3.0
    assert fused_module._has_machine_code(twice, (1.5,))
    assert not fused_module._has_machine_code(twice, (np.ones(2),))


@pytest.mark.parametrize("batch", [1, 3])
def test_a_fused_form_that_may_not_compile_runs_only_kernels_numba_has(batch, monkeypatch):
    """Without machine code (forced here) the form raises before any pass and leaves X as
    it was; with it (the suite compiled the kernels) it makes the passes."""
    shape = workload_geometry(64)
    executor = TransformerExecutor(shape, EngineConfig(evaluation="fused"))
    form = fused_module.FusedPass(executor.active, executor.machine.weights, compiles=False)
    assert form.unsupported is None
    pc = np.arange(executor.layout["pc"].start, executor.layout["pc"].stop)
    for has_code in (False, True):
        monkeypatch.setattr(fused_module, "_has_machine_code", lambda kernel, arguments: has_code)
        with torch.inference_mode(), flush_denormals():
            X = to_internal(executor.load(looping_programs(shape, batch, seed=2)))
            before = X.clone()
            run = executor.active.start(X, fused=True)
            run.fused = form
            run.step(0)
            record = torch.empty((4, len(pc), batch), dtype=X.dtype)
            started = X.clone()
            made = run.fused_steps(4, record, pc)
            if has_code:
                assert made == 4 and run.fused is form
            else:
                assert made == 0 and run.fused is None and torch.equal(X, started)
        assert not torch.equal(X, before)  # the torch pass ran in either case
