"""The executor: batches, step counts, limits, dtypes, devices, and the checked mode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vm.machines.subleq.punchcard import geometry_for
from vm.transformer.memory import score_bytes
from assembler.subleq import assemble, assemble_file
from vm.common.errors import InputError, PrecisionError
from vm.runtime.config import FUSED_CHECK_EVERY, FUSED_SOLO_WINDOW
from vm.runtime.executor import (BatchRun, EngineConfig, TransformerExecutor, run_traced,
                                 run_transformer)
from vm.machines.subleq.reference import run_reference
from vm.tools.workloads import looping_programs, workload_geometry

ROOT = Path(__file__).resolve().parents[1]
FACTORIAL = assemble_file(ROOT / "programs" / "subleq" / "factorial.sq")
COUNTDOWN = """.data
n: {n}
acc: 0
one: 1
.code
loop: subleq one, n, done
      subleq one, acc
      goto loop
done: halt
"""


@pytest.mark.parametrize("check_every", [1, 7, 16])
def test_a_batch_of_programs_gives_each_its_result_and_exact_step_count(check_every):
    programs = [assemble(COUNTDOWN.format(n=n), "c.sq") for n in (1, 5, 30, 12)]
    executor = TransformerExecutor(geometry_for(programs[0]), EngineConfig(check_every=check_every))
    results = executor.results(executor.run(executor.load(programs), 10_000))
    for program, result in zip(programs, results, strict=True):
        expected = run_reference(program)
        assert result.halted and result.memory == expected.memory
        assert result.steps == expected.steps


def test_step_limit_leaves_programs_running():
    program = assemble(COUNTDOWN.format(n=50), "c.sq")
    result = run_transformer(program, geometry_for(program), max_steps=20)
    expected = run_reference(program, max_steps=20)
    assert not result.halted and result.steps == 20
    assert result.memory == expected.memory and result.pc == expected.pc


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("attention", ["masked", "dense"])
def test_dtypes_and_attention_modes_agree_with_the_reference(dtype, attention):
    config = EngineConfig(dtype=dtype, attention=attention)
    result = run_transformer(FACTORIAL, geometry_for(FACTORIAL), config=config)
    assert result.memory == run_reference(FACTORIAL).memory and result.steps == 184


def test_traced_run_matches_the_reference_trace():
    program = assemble(COUNTDOWN.format(n=3), "c.sq")
    traced = run_traced(program, geometry_for(program))
    expected = run_reference(program, trace=True)
    assert [(t.pc, t.b, t.old, t.new, t.next_pc) for t in traced.trace] == \
        [(t.pc, t.b, t.old, t.new, t.next_pc) for t in expected.trace]


def test_checked_mode_reports_step_layer_column_and_field_when_the_temperature_is_too_low():
    config = EngineConfig(checked=True, temperature=1.5)
    with pytest.raises(PrecisionError) as caught:
        run_transformer(FACTORIAL, geometry_for(FACTORIAL), config=config)
    error = caught.value
    assert (error.step, error.layer, error.column, error.field) == (0, 0, 0, "cur")
    assert "precision error at step 0, layer 0, column 0, field 'cur'" in str(error)
    assert error.exit_code == 1


def test_an_unsafe_temperature_turns_the_checked_mode_on_by_itself():
    executor = TransformerExecutor(geometry_for(FACTORIAL), EngineConfig(temperature=1.0))
    assert executor.checked
    with pytest.raises(PrecisionError):
        executor.run(executor.load([FACTORIAL]), 1000)
    safe = TransformerExecutor(geometry_for(FACTORIAL), EngineConfig(temperature=6.0))
    assert not safe.checked
    opted_out = TransformerExecutor(geometry_for(FACTORIAL),
                                    EngineConfig(temperature=1.0, checked=False))
    assert not opted_out.checked


def test_checked_mode_passes_a_correct_run():
    config = EngineConfig(checked=True)
    result = run_transformer(FACTORIAL, geometry_for(FACTORIAL), config=config)
    assert result.memory == run_reference(FACTORIAL).memory


@pytest.mark.parametrize("field,value", [("dtype", "float16"), ("attention", "sparse"),
                                         ("temperature", -1.0), ("check_every", 0),
                                         ("threads", 0), ("checked", 1)])
def test_bad_engine_settings_are_input_errors(field, value):
    with pytest.raises(InputError):
        EngineConfig(**{field: value})


def test_cuda_request_without_a_device_is_an_input_error():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(InputError, match="no CUDA device"):
        EngineConfig(device="cuda")


def test_the_cpu_named_with_its_index_runs_and_a_second_cpu_is_refused():
    """'cpu:0' was refused ("X is on cpu, this executor runs on cpu:0") and 'cpu:5' taken."""
    result = run_transformer(FACTORIAL, geometry_for(FACTORIAL),
                             config=EngineConfig(device="cpu:0"))
    assert result.memory == run_reference(FACTORIAL).memory
    with pytest.raises(InputError, match="one CPU device"):
        EngineConfig(device="cpu:5")


def test_a_progress_that_is_not_a_function_and_results_of_no_run_are_input_errors():
    """run(progress=5) failed after the first window with 'int' object is not callable, and
    results(None) with an AttributeError."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    with pytest.raises(InputError, match="progress"):
        executor.run(executor.load([FACTORIAL]), 10, progress=5)
    with pytest.raises(InputError, match="progress"):  # run_traced: the same TypeError
        run_traced(FACTORIAL, geometry_for(FACTORIAL), 10, progress=5)
    with pytest.raises(InputError, match="BatchRun"):
        executor.results(None)


def test_punchcards_of_the_wrong_shape_are_refused():
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    with pytest.raises(InputError, match="shape"):
        executor.load_punchcards(np.zeros((3, 4)))
    with pytest.raises(InputError, match=r"shape \(5,\)"):  # it said "shape ()"
        executor.load_punchcards(np.zeros(5))


def test_threads_are_restored_after_a_run():
    before = torch.get_num_threads()
    run_transformer(FACTORIAL, geometry_for(FACTORIAL), config=EngineConfig(threads=1))
    assert torch.get_num_threads() == before


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_runs_agree_with_the_reference(dtype):
    config = EngineConfig(device="cuda", dtype=dtype)
    programs = [assemble(COUNTDOWN.format(n=n), "c.sq") for n in (3, 9)]
    executor = TransformerExecutor(geometry_for(programs[0]), config)
    for program, result in zip(programs, executor.results(executor.run(
            executor.load(programs), 1000), strict=True)):
        assert result.memory == run_reference(program).memory
    assert not torch.backends.cuda.matmul.allow_tf32


def test_a_batch_larger_than_free_memory_is_refused_before_any_work(monkeypatch):
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    [(one, _)] = executor.memory_needed(1)
    monkeypatch.setattr("vm.transformer.memory.free_memory", lambda device: 5 * one)
    assert executor.load([FACTORIAL] * 2).shape[0] == 2
    with pytest.raises(InputError, match="batch of 10 programs .* run fewer"):
        executor.load([FACTORIAL] * 10)


def test_dense_scores_beyond_the_free_memory_are_refused_before_any_work(monkeypatch):
    """A SUBLEQ or FLEQ run at --attention dense allocated a head's n x n scores in its first
    pass whatever the memory free; n = 65,536 needs 32 GiB in float32."""
    n = geometry_for(FACTORIAL).columns
    dense = TransformerExecutor(geometry_for(FACTORIAL), EngineConfig(attention="dense"))
    monkeypatch.setattr("vm.transformer.memory.free_memory", lambda device: 2 * n * n * 4 - 1)
    with pytest.raises(InputError, match=rf"--attention dense at n = {n} columns .* smaller "
                                         "program"):
        dense.load([FACTORIAL])


def test_masked_scores_beyond_the_free_memory_are_refused_before_any_work(monkeypatch):
    """`ltvm run prog.sq --scratch 65000` built 65,000 x n scores a head (16.9 GB in
    float32) in its first pass and was killed by the kernel with no word."""
    executor = TransformerExecutor(geometry_for(FACTORIAL, scratch=2000))
    n = executor.layout.columns
    needed = score_bytes(n, 4, 2000)
    [(state, _)] = executor.memory_needed(1)
    assert needed > state  # so that the scores, not the batch, decide
    monkeypatch.setattr("vm.transformer.memory.free_memory", lambda device: needed)
    assert executor.load([FACTORIAL]).shape[0] == 1
    monkeypatch.setattr("vm.transformer.memory.free_memory", lambda device: needed - 1)
    with pytest.raises(InputError, match=rf"2,000 scratch columns at n = {n:,} .*--scratch"):
        executor.load([FACTORIAL])


def test_the_score_estimate_is_what_masked_attention_holds(monkeypatch):
    """`score_bytes` counts the scores and softmax weights of one head under masked
    attention: the softmaxes `_masked` runs, each an input and an output of that size."""
    from vm.transformer.layers import Attention
    sizes = []
    softmax = torch.softmax
    monkeypatch.setattr(torch, "softmax", lambda scores, dim: sizes.append(scores.numel())
                        or softmax(scores, dim=dim))
    n, scratch, r = 300, 40, 3
    Attention._masked(torch.randn(1, r, n), torch.randn(1, r, n), torch.randn(1, 2, n), scratch)
    assert 2 * 4 * sum(sizes) == score_bytes(n, 4, scratch)


def test_the_memory_estimate_covers_what_a_fused_run_allocates():
    """`bench --columns 64 --batch 60000` was estimated at 8.2 GiB and peaked at 12.7 GB:
    the fused pass's undo log (two columns a pass for a 128-pass window), its 8-bit mirror
    and its workspace were not counted. The estimate must cover X, its copies, the cache
    and every array the fused pass keeps for the run."""
    from vm.runtime import fused
    from vm.tools.workloads import looping_programs, workload_geometry
    if not fused.available():
        pytest.skip("fused passes need numba")
    programs = looping_programs(workload_geometry(64), 8)
    executor = TransformerExecutor(geometry_for(programs[0]), EngineConfig(evaluation="fused"))
    runner = executor.runner(executor.load(programs))
    runner.advance(300)
    assert runner.evaluation == "fused"
    form = executor.active.fused
    *arrays, dirty = runner.active.fused_state
    kept = [runner.X, runner.active.cache, *form._log_arrays, *form._work, *form._lane_work,
            *arrays, *dirty]
    used = sum(array.nbytes if isinstance(array, np.ndarray) else
               array.numel() * array.element_size() for array in kept)
    [(estimated, _)] = executor.memory_needed(len(programs))
    assert estimated >= used, f"estimated {estimated} bytes, the run keeps {used}"


@pytest.mark.parametrize("evaluation", ["auto", "active", "full"])
def test_a_restarted_run_ends_where_a_fresh_run_ends(evaluation):
    """Runner.restart: the same steps, halts and X as a new run, from a run left halfway
    and from one that halted (whose active cache must be rebuilt from the new X)."""
    programs = [assemble(COUNTDOWN.format(n=n), "c.sq") for n in (3, 9)]
    executor = TransformerExecutor(geometry_for(programs[0]),
                                   EngineConfig(evaluation=evaluation, check_every=4))
    cards = executor.load(programs)
    fresh = executor.runner(cards)
    fresh.advance(1000)
    runner = executor.runner(executor.load(programs[::-1]))
    for halfway in (5, 1000):
        runner.advance(halfway)
        runner.restart(cards)
        runner.advance(1000)
        ends = [runner.result(), fresh.result()]
        assert torch.equal(ends[0].X, ends[1].X) and ends[0].halted.all()
        assert np.array_equal(ends[0].steps, ends[1].steps)
        runner.restart(executor.load(programs[::-1]))
    with pytest.raises(InputError, match="shape"):  # was a bare ValueError
        runner.restart(cards[:1])


def test_progress_hears_of_every_pass_not_only_of_each_window():
    """It heard of a window of 16 passes at its end: a FLEQ program of 62,000 columns,
    whose pass takes about a minute, ran a quarter of an hour with nothing on stderr."""
    heard = []
    program = assemble(COUNTDOWN.format(n=30), "c.sq")
    executor = TransformerExecutor(geometry_for(program),
                                   EngineConfig(check_every=16, evaluation="full"))
    executor.run(executor.load([program]), 5, heard.append)
    assert heard[:5] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("cards", [
    lambda X: np.where(X == 0, np.nan, X), lambda X: np.where(X == 0, np.inf, X),
    lambda X: X.astype(complex) + 1j])
def test_punchcards_with_nan_inf_or_complex_values_are_refused(cards):
    """NaN cards 'halted' after one step with made-up memory; complex ones ran on the real
    part."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    X = executor.load([FACTORIAL]).numpy()
    with pytest.raises(InputError, match="punchcards must be"):
        executor.load_punchcards(cards(X))


@pytest.mark.parametrize("convert", [lambda X: X != 0, lambda X: torch.as_tensor(X != 0)])
def test_bool_punchcards_are_refused(convert):
    """A bool array loaded as 1 and 0 and ran: punchcards hold real numbers."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    X = executor.load([FACTORIAL]).numpy()
    with pytest.raises(InputError, match="punchcards must be real numbers, got a bool array"):
        executor.load_punchcards(convert(X))


@pytest.mark.parametrize("pcs", [None, [1.0, -1.0]])
def test_running_refuses_codes_that_are_not_a_tensor(pcs):
    """None failed with a bare TypeError from torch's multiplication."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    with pytest.raises(InputError, match="running takes .* torch tensor, got"):
        executor.running(pcs)
    X = executor.load([FACTORIAL])
    assert executor.running(X[:, executor._pc_rows, 0].T).tolist() == [True]


@pytest.mark.parametrize("programs", [[], FACTORIAL])
def test_load_takes_a_non_empty_list(programs):
    with pytest.raises(InputError, match="non-empty list of programs"):
        TransformerExecutor(geometry_for(FACTORIAL)).load(programs)


@pytest.mark.parametrize("bad,message", [
    (lambda X: X.half(), "dtype"), (lambda X: X.double(), "dtype"), (lambda X: X.long(), "dtype"),
    (lambda X: X.numpy(), "torch tensor"), (lambda X: X[0], "shape"),
    (lambda X: X[:, :-1], "shape"), (lambda X: X[:, :, :-1], "shape"),
    (lambda X: X.to("meta"), "on meta"), (lambda X: X.clone().fill_(float("nan")), "finite")])
def test_a_state_the_executor_cannot_run_is_refused_naming_x(bad, message):
    """They failed deep in torch (a dtype mismatch in matmul, an index out of range), and a
    restart from float16 rounded the state silently."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    X = executor.load([FACTORIAL])
    runner = executor.runner(X)
    for call in (executor.runner, executor.step, runner.restart):
        with pytest.raises(InputError, match=f"X .*{message}|{message}"):
            call(bad(X))


def test_decode_refuses_another_geometrys_rows():
    """X with a row cut off decoded silently into a wrong memory."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    with pytest.raises(InputError, match="shape"):
        executor.decode(executor.load([FACTORIAL])[:, :-1])
    with pytest.raises(InputError, match="X must be a torch tensor"):  # an AttributeError
        executor.decode(executor.load([FACTORIAL]).numpy())


@pytest.mark.parametrize("max_steps", [-1, 2.5, float("nan"), float("inf"), "5", None, True])
def test_max_steps_must_be_a_whole_number_not_below_zero(max_steps):
    """-1 and NaN ran no pass and returned 'not halted'; 2.5 failed slicing a tensor."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    runner = executor.runner(executor.load([FACTORIAL]))
    with pytest.raises(InputError, match="max_steps"):
        runner.advance(max_steps)
    runner.advance(0)
    assert runner.done == 0


@pytest.mark.parametrize("config", [None, {"dtype": "float64"}])
def test_a_config_that_is_not_an_engine_config_is_refused(config):
    """It failed with "'dict' object has no attribute 'temperature'"."""
    with pytest.raises(InputError, match="config must be an EngineConfig"):
        TransformerExecutor(geometry_for(FACTORIAL), config)


@pytest.mark.parametrize("cards", [None, object()])
def test_punchcards_that_are_not_numbers_are_refused(cards):
    """None became NaN ('they hold NaN'), an object raised float()'s TypeError."""
    with pytest.raises(InputError, match="punchcards must be an array of numbers"):
        TransformerExecutor(geometry_for(FACTORIAL)).load_punchcards(cards)


@pytest.mark.parametrize("geometry", [None, "g", FACTORIAL])
def test_what_is_no_geometry_is_refused_as_such(geometry):
    """A program (or None) in the geometry's place was told "this command runs SUBLEQ (.sq)
    and FLEQ (.fleq) programs; .dec images run with ltvm run, ...", about a command."""
    with pytest.raises(InputError, match="geometry must be a program's geometry"):
        run_transformer(FACTORIAL, geometry)


def test_a_sampling_config_is_refused_where_passes_are_exact():
    """step() ignored `sampling`: run_traced of a sampling config returned an exact run."""
    with pytest.raises(InputError, match="sampling runs go through run"):
        run_traced(FACTORIAL, geometry_for(FACTORIAL), config=EngineConfig(sampling=0.5))


@pytest.mark.parametrize("batch", [1, 2])
def test_a_result_or_state_taken_midway_is_not_changed_by_later_passes(batch):
    """result().steps shared the runner's counters (numpy of a CPU tensor), and for a batch
    of 1 result().X and state() were views of the running state: both moved on with later
    advance() calls, and restart() zeroed the steps of results already taken."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    runner = executor.runner(executor.load([FACTORIAL] * batch))
    runner.advance(5)
    early, state = runner.result(), runner.state()
    X, steps = early.X.clone(), early.steps.copy()
    runner.advance(50)
    runner.restart(executor.load([FACTORIAL] * batch))
    assert torch.equal(early.X, X) and torch.equal(state, X)
    assert np.array_equal(early.steps, steps) and list(steps) == [5] * batch


def test_the_checked_mode_holds_a_run_to_its_own_start_not_to_the_last_cards_loaded():
    """The executor checked every run against the punchcards it loaded last: X loaded
    before another program was a PrecisionError ("raise the temperature"), before a batch of
    two an IndexError, and an X it never loaded a TypeError ('NoneType' not subscriptable)."""
    a = assemble(".data\nx: 5\ny: 0\n.code\nsubleq x, y\nhalt\n", "a.sq")
    b = assemble(".data\nx: 5\ny: 0\n.code\nsubleq y, x\nhalt\n", "b.sq")
    checked = EngineConfig(checked=True)
    executor = TransformerExecutor(geometry_for(a), checked)
    X = executor.load([a])
    executor.load([b])
    assert executor.results(executor.run(X, 10))[0].memory == [0, -1, 5, -5]
    executor.load([a, b])
    assert executor.results(executor.run(X, 10))[0].memory == [0, -1, 5, -5]
    other = TransformerExecutor(geometry_for(a), checked)
    assert other.results(other.run(X, 10))[0].memory == [0, -1, 5, -5]
    assert other.decode(other.step(X))[0] == ([0, -1, 5, -5], 1)


def test_punchcards_without_a_program_counter_are_refused():
    """All-zero cards ran 0 steps and came back halted=True at pc -5."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    with pytest.raises(InputError, match="program counter"):
        executor.load_punchcards(np.zeros((executor.layout.rows, executor.layout.columns)))


def test_punchcards_past_the_dtypes_range_or_an_empty_batch_are_refused():
    """float64 cards of 1e308 became inf in a float32 machine and ran; a card of 1e30 in
    memory 'halted' at pc -11 with all-zero memory. An empty batch ran nothing and
    'finished'."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    X = executor.load([FACTORIAL]).numpy().astype(np.float64)
    X[0, executor.layout["mem"].start, 1] = 1e308
    with pytest.raises(InputError, match="past torch.float32's range"):
        executor.load_punchcards(X)
    with pytest.raises(InputError, match="the batch is empty"):
        executor.load_punchcards(np.zeros((0, executor.layout.rows, executor.layout.columns)))


def test_decode_refuses_a_state_with_nan_or_inf():
    """A NaN program counter decoded as pc -11."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    X = executor.load([FACTORIAL])
    assert executor.decode(X)[0][1] == 0
    X[:, executor.layout["pc"], 0] = float("nan")
    with pytest.raises(InputError, match="finite to decode"):
        executor.decode(X)


def test_states_handed_back_can_be_edited_in_place():
    """step(), Runner.state() and result().X were inference tensors: editing memory between
    passes failed with "Inplace update to inference tensor outside InferenceMode"."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    X = executor.load([FACTORIAL])
    runner = executor.runner(X)
    runner.advance(3)
    for state in (executor.step(X), runner.state(), runner.result().X):
        state[0, 0, 0] += 0.0


@pytest.mark.parametrize("batch", [-5, 0, 1.5, True, None])
def test_a_batch_size_that_is_no_count_of_programs_is_refused(batch):
    """check_memory(-5) needed negative bytes and passed in silence; memory_needed(-1)
    answered negative bytes, 1.5 half a program's, None failed with a TypeError."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    with pytest.raises(InputError, match="batch must be a whole number of programs"):
        executor.check_memory(batch)
    with pytest.raises(InputError, match="batch must be a whole number of programs"):
        executor.memory_needed(batch)


def test_results_refuse_a_run_whose_counts_do_not_match_its_states():
    """A BatchRun with fewer step counts than states lost programs in zip, silently."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    run = executor.run(executor.load([FACTORIAL, FACTORIAL]), 10)
    with pytest.raises(InputError, match="run.X holds 2 programs but run.steps 1"):
        executor.results(BatchRun(run.X, run.steps[:1], run.halted))


@pytest.mark.parametrize("batch, columns, expected", [(1, 64, "full"), (3, 1024, "active")])
def test_the_default_evaluation_does_not_wait_for_a_compile(batch, columns, expected,
                                                            monkeypatch):
    """Where numba has not compiled the fused pass (forced here), a default run goes on as
    it would without numba (the full pass below AUTO_ACTIVE_CELLS, else the torch active
    pass), warns once, and ends bit-identical to the full pass."""
    import vm.runtime.fused as fused_module
    from vm.common.errors import NotCompiledWarning
    pytest.importorskip("numba")
    monkeypatch.setattr(fused_module, "_has_machine_code", lambda kernel, arguments: False)
    shape = workload_geometry(columns)
    executor = TransformerExecutor(shape, EngineConfig())
    monkeypatch.setattr(executor.active.fused, "_ready_kernels", set())  # shared, maybe used
    full = TransformerExecutor(shape, EngineConfig(evaluation="full"))
    cards = executor.load(looping_programs(shape, batch, seed=5))
    runner = executor.runner(cards)
    assert runner.evaluation == "fused"
    with pytest.warns(NotCompiledWarning, match="numba has not compiled the fused pass"):
        runner.advance(40)
    assert runner.evaluation == expected
    assert torch.equal(runner.state(), full.run(cards, 40).X)


def test_a_fused_run_of_one_program_widens_its_window_and_keeps_every_step(monkeypatch):
    """A fused run of one program on the CPU tests for a halt less and less often: its
    window grows to a quarter of the passes made (whole FUSED_CHECK_EVERY), up to
    FUSED_SOLO_WINDOW; after every part its memory and pc are the reference
    interpreter's after as many steps, and a restart begins with the first window again.
    (Windows are let grow whatever they take: a loaded machine must not stop them here.)"""
    pytest.importorskip("numba")
    import vm.runtime.executor as executor_module
    monkeypatch.setattr(executor_module, "SOLO_WINDOW_SECONDS", float("inf"))
    shape = workload_geometry(64)
    executor = TransformerExecutor(shape, EngineConfig(evaluation="fused"))
    program = looping_programs(shape, 1, seed=7)[0]
    cards = executor.load([program])
    runner = executor.runner(cards)
    assert runner.evaluation == "fused"
    windows = []
    while runner.done < 12_000:
        windows.append(runner.window)
        runner.advance(runner.window)
        assert runner.window <= max(FUSED_CHECK_EVERY, runner.done // 4)
        result, expected = executor.results(runner.result())[0], run_reference(program,
                                                                                runner.done)
        assert (result.memory, result.pc) == (expected.memory, expected.pc), runner.done
    assert windows[0] == FUSED_CHECK_EVERY and windows[-1] == FUSED_SOLO_WINDOW
    assert sorted(windows) == windows
    runner.restart(cards)
    assert runner.window == FUSED_CHECK_EVERY


def test_a_wide_window_wastes_at_most_a_quarter_of_a_run_at_its_halt(monkeypatch):
    """Passes after the halt are no-ops at EOF, made only until the window's end: at most
    a quarter of the passes before it (or the first window). A batch keeps its window."""
    pytest.importorskip("numba")
    import vm.runtime.executor as executor_module
    monkeypatch.setattr(executor_module, "SOLO_WINDOW_SECONDS", float("inf"))
    program = assemble(COUNTDOWN.format(n=20_000), "c.sq", bits=16)
    executor = TransformerExecutor(geometry_for(program), EngineConfig(evaluation="fused"))
    runner = executor.runner(executor.load([program]))
    runner.advance(10 ** 6)
    result, expected = executor.results(runner.result())[0], run_reference(program, 10 ** 6)
    assert result.halted and (result.memory, result.steps) == (expected.memory, expected.steps)
    assert runner.window > FUSED_CHECK_EVERY
    assert runner.done - result.steps <= max(FUSED_CHECK_EVERY, result.steps // 4)
    batch = executor.runner(executor.load([program, program]))
    batch.advance(3000)
    assert batch.window == FUSED_CHECK_EVERY


def test_a_window_that_takes_long_stops_growing(monkeypatch):
    """Progress lines and time limits come at a window's end: a single program's window
    grows only while a window takes less than SOLO_WINDOW_SECONDS (here none does)."""
    pytest.importorskip("numba")
    import vm.runtime.executor as executor_module
    monkeypatch.setattr(executor_module, "SOLO_WINDOW_SECONDS", 0.0)
    shape = workload_geometry(64)
    executor = TransformerExecutor(shape, EngineConfig(evaluation="fused"))
    runner = executor.runner(executor.load(looping_programs(shape, 1, seed=7)))
    runner.advance(6_000)
    assert runner.evaluation == "fused" and runner.window == FUSED_CHECK_EVERY


def test_numpy_step_counts_leave_the_runners_count_a_python_int():
    """advance(np.int64(2)) made the pass count a numpy int: a later np.uint64 count turned
    it into a float (a TypeError in slicing), a later 10**30 overflowed int64."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    for later in (np.uint64(3), 10**30):
        runner = executor.runner(executor.load([FACTORIAL]))
        runner.advance(np.int64(2))
        runner.advance(later)
        assert type(runner.done) is int
        assert runner.result().steps[0] == min(2 + later, run_reference(FACTORIAL, 10**6).steps)


@pytest.mark.parametrize("step", [1.5, True, -1, "3", None])
def test_a_pass_number_that_is_no_whole_number_from_zero_is_refused(step):
    """step(X, step=1.5) and trace(X, step=-1) were taken: the number names the pass in the
    checked mode's errors."""
    executor = TransformerExecutor(geometry_for(FACTORIAL), EngineConfig(checked=True))
    X = executor.load([FACTORIAL])
    with pytest.raises(InputError, match="step must be the pass's number in its run"):
        executor.step(X, step)
    with pytest.raises(InputError, match="step must be the pass's number in its run"):
        executor.trace(X[0], step)
    assert executor.step(X, np.int64(3)).shape == X.shape


def test_trace_refuses_a_batch_naming_the_one_punchcard_it_takes():
    """A batch X was refused as shape (1, 1, rows, n), a shape nobody passed."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    X = executor.load([FACTORIAL])
    with pytest.raises(InputError, match=r"trace takes one punchcard X \(rows, n\)"):
        executor.trace(X)
    assert executor.trace(X[0])


def test_an_empty_batch_of_states_is_refused_as_load_refuses_one():
    """run(X[:0]) ran no program and returned an empty "finished" run."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    X = executor.load([FACTORIAL])
    with pytest.raises(InputError, match="the batch is empty"):
        executor.run(X[:0], 5)
    with pytest.raises(InputError, match="the batch is empty"):
        executor.step(X[:0])
    assert executor.run(X, 5).steps.tolist() == [5]


@pytest.mark.parametrize("steps, halted", [([1.5], [True]), (None, None), ([-1], [True]),
                                           ([3], [1])])
def test_results_refuse_counts_and_flags_that_no_run_made(steps, halted):
    """A BatchRun of float steps took 1.5 as 1 and halted [1] as True; None failed with
    "object of type 'NoneType' has no len()"."""
    executor = TransformerExecutor(geometry_for(FACTORIAL))
    run = executor.run(executor.load([FACTORIAL]), 3)
    with pytest.raises(InputError, match="run.steps must be a list of step counts"):
        executor.results(BatchRun(run.X, steps, halted))
    assert executor.results(BatchRun(run.X, [3], [False]))[0].steps == 3


def test_a_checkpoint_that_is_not_a_function_of_the_part_is_refused_before_the_build():
    """checkpoint=5 failed with "'int' object is not callable" only once the build began."""
    for checkpoint in (5, lambda: None):
        with pytest.raises(InputError, match="checkpoint must"):
            TransformerExecutor(geometry_for(FACTORIAL), EngineConfig(), checkpoint)


def test_a_build_stopped_by_its_checkpoint_keeps_nothing_and_a_finished_one_serves_all():
    """The layers are cached by the build's settings, not by the checkpoint: a build that
    the checkpoint stopped halfway is not found again, a finished one is, under any."""
    geometry = geometry_for(FACTORIAL)
    config = EngineConfig(temperature=31.25, evaluation="full")  # a model no other test has

    class Stop(Exception):
        pass

    def stop_at_the_second_layer(part: str) -> None:
        if part.startswith("building the transformer's layers (layer 2 of"):
            raise Stop

    with pytest.raises(Stop):
        TransformerExecutor(geometry, config, stop_at_the_second_layer)
    parts: list[str] = []
    built = TransformerExecutor(geometry, config, parts.append).model
    layers = len(built.layers)
    assert [part for part in parts if "(layer" in part] == [
        f"building the transformer's layers (layer {i} of {layers})"
        for i in range(1, layers + 1)]
    parts.clear()
    assert TransformerExecutor(geometry, config, parts.append).model is built
    assert parts == ["building the transformer's weights", "building the transformer's layers"]


def test_the_checkpoint_reaches_the_fleq_weights_build_and_stops_it(monkeypatch):
    """The FLEQ weights took 1 to 2.5 s of a 20-sample `ltvm train --hidden 16` build in one
    piece; the checkpoint now sees each function block, and raising there ends the build."""
    from collections import OrderedDict

    from vm.machines.fleq.machine import fleq_machine
    from vm.machines.fleq.punchcard import fleq_geometry_for
    from vm.tools.bench import fleq_workload

    monkeypatch.setattr(fleq_machine, "results", OrderedDict())  # built here, not cached
    geometry = fleq_geometry_for(fleq_workload("calculator"))
    blocks = len(geometry.blocks)

    class Stop(Exception):
        pass

    seen: list[str] = []

    def stop_at_the_second_block(part: str) -> None:
        seen.append(part)
        if part == f"building the transformer's weights (block 2 of {blocks})":
            raise Stop

    with pytest.raises(Stop):
        TransformerExecutor(geometry, EngineConfig(evaluation="full"), stop_at_the_second_block)
    assert seen == ["building the transformer's weights",
                    f"building the transformer's weights (block 1 of {blocks})",
                    f"building the transformer's weights (block 2 of {blocks})"]
    assert not fleq_machine.results
