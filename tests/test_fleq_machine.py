"""The FLEQ looped transformer: layer count, geometry-only weights, exact moves, bounds,
batches and the checked mode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vm.functions import dtype_parameters
from vm.isa import FLEQ
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.runtime.compare import compare_fleq
from vm.common.errors import InexactMovesError, InputError, MagnitudeError, PrecisionError
from vm.runtime.executor import EngineConfig, TransformerExecutor, run_traced, run_transformer
from vm.machines.fleq.reference import run_fleq_reference
from vm.routines.base import matrix_literal
from vm.machines.fleq.machine import exact_move_temperature, fleq_machine
from vm.cli import main
from vm.tools.bench import fleq_workload

ROOT = Path(__file__).resolve().parents[1]
A = np.array([[0.1, -0.7], [1.3, 2.9]])
B = np.array([[0.3, 0.2], [-1e-3, 7.1]])


def loop_source(k: int, a: np.ndarray = A, b: np.ndarray = B) -> str:
    """k passes of S = S + a - b: 5 variables, 6 instructions."""
    return f""".d 2
.data
n: {k}
one: 1
A: {matrix_literal(a)}
B: {matrix_literal(b)}
S: .zeros 2x2
.code
loop: S = add(S, A)
      S = sub(S, B)
      n = sub(n, one)
      if n <= 0 goto done
      goto loop
done: halt
"""


OTHER = """.d 2
.data
x: 1.5
y: -2.0
z: 0.0
k: {k}
v: .vector [1.0, 2.0]
.code
z = mul(x, y)
z = add(z, x) if k <= 0 goto end
v = add(v, v)
halt
halt
end: halt
"""
"""Another program of the loop's geometry once both carry add, sub and mul(scale=1e-4)."""

SHARED = {"functions": ["add", "sub", "mul"], "parameters": {"mul": {"scale": 1e-4}}}


@pytest.fixture(scope="module")
def loop():
    program = FLEQ.assemble_text(loop_source(3), "loop.fleq")
    return program, fleq_geometry_for(program)


@pytest.fixture(scope="module")
def calculator():
    program = FLEQ.assemble_file(ROOT / "programs" / "fleq" / "calculator.fleq")
    return program, fleq_geometry_for(program)


def all_arrays(machine):
    for layer in machine.weights.layers:
        for head in layer.heads:
            yield from (head.Q, head.K, head.V, np.array(head.lam))
        yield from (layer.ffn.W1, layer.ffn.b1, layer.ffn.W2, layer.ffn.b2)


def test_layer_count_is_four_plus_the_deepest_block(loop, calculator):
    shared = fleq_geometry_for(FLEQ.assemble_text(loop_source(3), **SHARED))
    for geometry, expected in ((loop[1], 5), (shared, 8), (calculator[1], 17)):
        deepest = max(block.depth(geometry.d) for block in geometry.blocks)
        assert len(fleq_machine(geometry).weights.layers) == 4 + deepest == expected


def test_every_layer_is_eq1_shaped_with_column_independent_biases(calculator):
    machine = fleq_machine(calculator[1])
    rows = machine.layout.rows
    for layer in machine.weights.layers:
        assert layer.ffn.b1.ndim == 1 and layer.ffn.b2.shape == (rows,)
        assert layer.ffn.W1.shape[1] == rows and layer.ffn.W2.shape[0] == rows
        for head in layer.heads:
            assert head.Q.shape[1] == head.K.shape[1] == rows and head.V.shape == (rows, rows)


def test_the_checkpoint_sees_each_block_and_block_layer_and_stops_the_build_there():
    """The weights of a 20-sample `ltvm train --hidden 16` took 1 to 2.5 s without a
    checkpoint, past --max-seconds in one piece; they must not change for having one."""
    geometry = fleq_geometry_for(fleq_workload("inverse-d8"))
    parts: list[str] = []
    built = fleq_machine.__wrapped__(geometry, None, checkpoint=parts.append)
    blocks, depth = len(geometry.blocks), len(built.weights.layers) - 4
    assert parts == ([f"block {i} of {blocks}" for i in range(1, blocks + 1)]
                     + [f"block layer {i} of {depth}" for i in range(1, depth + 1)])
    plain = fleq_machine.__wrapped__(geometry, None)
    for x, y in zip(all_arrays(built), all_arrays(plain), strict=True):
        assert x.tobytes() == y.tobytes()

    class Stop(Exception):
        pass

    for stop in (2, len(parts)):
        seen: list[str] = []

        def stop_there(part: str) -> None:
            seen.append(part)
            if len(seen) == stop:
                raise Stop

        with pytest.raises(Stop):  # uncached: the cache keeps nothing of it (test_cache.py)
            fleq_machine.__wrapped__(geometry, None, checkpoint=stop_there)
        assert seen == parts[:stop]


def test_two_programs_of_one_geometry_run_on_byte_identical_weights():
    first = FLEQ.assemble_text(loop_source(3), "loop.fleq", **SHARED)
    second = FLEQ.assemble_text(OTHER.format(k=1), "other.fleq", **SHARED)
    assert first.instructions != second.instructions
    geometry = fleq_geometry_for(first)
    assert fleq_geometry_for(second) == geometry
    a = fleq_machine.__wrapped__(fleq_geometry_for(first))
    b = fleq_machine.__wrapped__(fleq_geometry_for(second))
    assert a is not b
    for x, y in zip(all_arrays(a), all_arrays(b), strict=True):
        assert x.tobytes() == y.tobytes()
    other_scale = FLEQ.assemble_text(OTHER.format(k=1), functions=SHARED["functions"],
                                parameters={"mul": {"scale": 1e-3}})
    assert fleq_geometry_for(other_scale) != geometry, "parameters are part of the geometry"


def test_add_and_sub_loop_is_bit_exact_in_float64(loop):
    program, geometry = loop
    result = run_transformer(program, geometry, 1000, EngineConfig(dtype="float64"))
    expected = run_fleq_reference(program, 1000)
    assert result.halted and (result.steps, result.pc) == (expected.steps, expected.pc) == (15, 6)
    for got, want in zip(result.memory, expected.cells, strict=True):
        np.testing.assert_array_equal(got, want)


def test_add_and_sub_loop_is_float32_arithmetic_exactly_in_float32(loop):
    """Moves are exact and each add/sub rounds once: the same as numpy in float32."""
    program, geometry = loop
    result = run_transformer(program, geometry, 1000, EngineConfig(dtype="float32"))
    S = np.zeros((2, 2), dtype=np.float32)
    for _ in range(3):
        S = S + A.astype(np.float32)
        S = S - B.astype(np.float32)
    memory = program.named_memory(result.memory)
    assert result.halted and result.steps == 15 and memory["n"] == 0
    np.testing.assert_array_equal(np.asarray(memory["S"]), S.astype(np.float64))
    assert not np.array_equal(S.astype(np.float64), 3 * (A - B)), "float32 rounding is visible"


def test_branches_taken_and_not_taken_follow_the_reference_trace(loop):
    program, geometry = loop
    traced = run_traced(program, geometry, 1000)
    expected = run_fleq_reference(program, 1000, trace=True)
    assert [(t.pc, t.written, t.jumped, t.next_pc) for t in traced.trace] == \
        [(t.pc, t.written, t.jumped, t.next_pc) for t in expected.trace]
    for got, want in zip(traced.trace, expected.trace):
        if want.written is not None:
            np.testing.assert_array_equal(got.new, want.new)
    conditional = [t.jumped for t in traced.trace if t.pc == 3]
    assert conditional == [False, False, True]


@pytest.mark.parametrize("k, jumps", [(0, True), (-1, True), (1, False)])
def test_a_write_and_a_branch_in_one_instruction(k, jumps):
    program = FLEQ.assemble_text(OTHER.format(k=k), "other.fleq", **SHARED)
    traced = run_traced(program, fleq_geometry_for(program), 100)
    expected = run_fleq_reference(program, 100, trace=True)
    assert traced.trace[1].jumped is jumps is expected.trace[1].jumped
    assert [t.pc for t in traced.trace] == [t.pc for t in expected.trace]
    assert traced.halted


def test_a_batch_runs_each_program_as_if_alone():
    programs = [FLEQ.assemble_text(loop_source(1), **SHARED),
                FLEQ.assemble_text(loop_source(4, B, -A), **SHARED),
                FLEQ.assemble_text(OTHER.format(k=1), **SHARED),
                FLEQ.assemble_text(OTHER.format(k=-3), **SHARED)]
    geometry = fleq_geometry_for(programs[0])
    executor = TransformerExecutor(geometry, EngineConfig(check_every=3))
    batch = executor.results(executor.run(executor.load(programs), 1000))
    for program, together in zip(programs, batch, strict=True):
        alone = run_transformer(program, geometry, 1000)
        reference = run_fleq_reference(program, 1000)
        assert together.halted and together.steps == alone.steps == reference.steps
        for x, y in zip(together.memory, alone.memory, strict=True):
            np.testing.assert_array_equal(x, y)
    for program, together in zip(programs[:2], batch):
        cells = run_fleq_reference(program, 1000).cells
        for x, y in zip(together.memory, cells, strict=True):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_calculator_steps_are_within_the_blocks_documented_bounds(dtype):
    """Assembled with the dtype's own block parameters, as the commands assemble it
    (float64's leave inv no bound in float32, which the domain check flags)."""
    program = FLEQ.assemble_file(ROOT / "programs" / "fleq" / "calculator.fleq",
                                 defaults=dtype_parameters(dtype))
    geometry = fleq_geometry_for(program)
    result = compare_fleq(program, geometry, 100, EngineConfig(dtype=dtype))
    assert result.ok and result.halted and result.steps == 7
    blocks = {block.name: block for block in geometry.blocks}
    assert [e.pc for e in result.errors] == list(range(6))
    for error in result.errors:
        block = blocks[program.instructions[error.pc].function]
        own_exact = np.abs(error.transformer) - error.local_absolute
        bound = float(np.max(block.bound_at(dtype, np.maximum(own_exact, 0.0))))
        assert error.local_absolute <= bound, (error.instruction, error.local_absolute, bound)


def test_a_temperature_too_low_for_exact_moves_is_refused_before_running(loop):
    program, geometry = loop
    for checked in (None, True):
        with pytest.raises(InexactMovesError, match="not exact in float64.*>= 746"):
            run_transformer(program, geometry, 1000, EngineConfig(checked=checked,
                                                                  temperature=5.0))
    with pytest.raises(InexactMovesError, match="not exact in float32.*>= 104"):
        TransformerExecutor(geometry, EngineConfig(temperature=103.0, dtype="float32"))
    assert not TransformerExecutor(geometry).checked


def test_unchecked_runs_below_the_exact_temperature_show_the_leakage_it_guards_against(loop):
    program, geometry = loop
    result = run_transformer(program, geometry, 1000, EngineConfig(temperature=5.0,
                                                                   checked=False))
    reference = run_fleq_reference(program, 1000).cells
    assert any(not np.array_equal(got, want) for got, want in zip(result.memory, reference))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_at_the_exact_move_temperature_moves_are_bit_exact(loop, dtype):
    program, geometry = loop
    temperature = exact_move_temperature(dtype)
    executor = TransformerExecutor(geometry, EngineConfig(temperature=temperature, dtype=dtype))
    assert not executor.checked
    transformer = run_transformer(program, geometry, 1000, EngineConfig(dtype=dtype))
    result = run_transformer(program, geometry, 1000, EngineConfig(temperature=temperature,
                                                                   dtype=dtype))
    for got, want in zip(result.memory, transformer.memory, strict=True):
        np.testing.assert_array_equal(got, want)


def test_checked_mode_passes_a_correct_run(loop):
    program, geometry = loop
    result = run_transformer(program, geometry, 1000, EngineConfig(checked=True))
    for got, want in zip(result.memory, run_fleq_reference(program, 1000).cells, strict=True):
        np.testing.assert_array_equal(got, want)


def test_checked_mode_names_step_layer_column_and_field_of_a_bad_state(loop):
    """With reads exact at any allowed temperature, the checked mode still catches a state
    off its ±1 pattern: a pc code with its top bit zeroed comes back ±1 after the pass."""
    program, geometry = loop
    executor = TransformerExecutor(geometry, EngineConfig(checked=True))
    X = executor.load([program])
    X[:, executor.layout["pc"].start, 0] = 0.0
    with pytest.raises(PrecisionError) as caught:
        executor.run(X, 1000)
    error, last = caught.value, len(executor.model.layers) - 1
    assert (error.step, error.layer, error.column, error.field) == (0, last, 0, "pc")
    assert str(error).startswith(f"precision error at step 0, layer {last}, column 0")


def test_a_counter_beyond_the_dtypes_exact_integers_is_refused_at_load():
    source = ".data\nn: 16777217\none: 1\n.code\nn = sub(n, one)\nhalt\n"
    program = FLEQ.assemble_text(source, "big.fleq")
    geometry = fleq_geometry_for(program)
    with pytest.raises(InputError, match=r"big.fleq:2:1: counter 'n' = 16777217 is beyond "
                                         r"16777216, the largest integer float32 counts"):
        run_transformer(program, geometry, 10, EngineConfig(dtype="float32"))
    result = run_transformer(program, geometry, 10, EngineConfig(dtype="float64"))
    assert result.memory[program.variables["n"].cell][0, 0] == 16777216


def test_a_counter_beyond_float32_in_a_file_is_shown_with_its_line_and_a_caret(tmp_path, capsys):
    path = tmp_path / "big.fleq"
    path.write_text(".data\none: 1\n  n: 16777217\n.code\nn = sub(n, one)\nhalt\n")
    assert main(["run", str(path), "--dtype", "float32"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"{path}:3:3: error: counter 'n' = 16777217 is beyond 16777216, the "
                      f"largest integer float32 counts exactly")
    assert err[1:] == ["      n: 16777217", "      ^"]


DOUBLING = """.data
x: 1.0
n: 60
one: 1
.code
loop: x = add(x, x)
      n = sub(n, one)
      if n <= 0 goto done
      goto loop
done: halt
"""
"""Doubles x sixty times: past 2^50, the machine's magnitude domain, after 51 doublings."""


def test_checked_mode_stops_a_real_leaving_the_magnitude_domain_on_the_transformer():
    program = FLEQ.assemble_text(DOUBLING, "doubling.fleq")
    geometry = fleq_geometry_for(program)
    reference = run_fleq_reference(program, 1000, trace=True)
    first_outside = next(record.step for record in reference.trace
                         if record.new is not None and abs(record.new[0, 0]) > 2.0 ** 50)
    with pytest.raises(MagnitudeError) as caught:
        run_transformer(program, geometry, 1000, EngineConfig(checked=True))
    assert caught.value.step == first_outside
    assert caught.value.value == 2.0 ** 51
    assert "outside the machine's domain (|x| <= 2^50, finite)" in str(caught.value)


def test_a_subleq_program_on_the_fleq_machine_is_an_input_error():
    """It failed encoding with "'Program' object has no attribute 'check_counters'"."""
    from assembler.subleq import assemble
    program = FLEQ.assemble_text(".data\na: 1.0\n.code\n halt\n")
    executor = TransformerExecutor(fleq_geometry_for(program))
    with pytest.raises(InputError, match="the FLEQ machine runs FLEQ programs, got Program"):
        executor.load([assemble(".data\nx: 1\n.code\nhalt\n", "x.sq")])
