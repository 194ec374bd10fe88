"""Chunked attention on the FLEQ machine: the attention_oracle block and the
chunked_attention routine, against attention computed directly."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from vm.isa import FLEQ
from assembler.diagnostics import SourceError
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.tools.block_errors import measure
from vm.attention.chunked.model import HeadWeights, Mask
from vm.attention.chunked.reference import head_attention, relative_error
from vm.runtime.compare import compare_fleq
from vm.common.errors import InputError
from vm.runtime.executor import EngineConfig, run_transformer
from vm.machines.fleq.reference import run_fleq_reference
from vm.functions import REGISTRY, make_block
from vm.functions.attention_oracle import SPAN
from vm.routines.base import matrix_literal
from vm.routines import ROUTINES
from vm.routines.chunked import newton_iterations

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
H, M, D = 4, 4, 8


def softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray,
                                                                             np.ndarray]:
    """Rows of softmax(Q K^T) V and the normalizers sum_j e^(q.k), for token-row matrices,
    by torch (an implementation independent of the block's reference)."""
    scores = torch.as_tensor(q) @ torch.as_tensor(k).T
    return (torch.softmax(scores, dim=1) @ torch.as_tensor(v)).numpy(), \
        torch.logsumexp(scores, dim=1).exp().numpy()


def oracle_operands(rng: np.random.Generator, scale: float = SPAN) -> tuple[np.ndarray,
                                                                            np.ndarray]:
    return rng.uniform(-scale, scale, (H, M)), rng.uniform(-scale, scale, (2 * H, M))


def test_oracle_reference_is_unnormalized_attention_and_its_normalizer():
    rng = np.random.default_rng(1)
    block = make_block("attention_oracle", dim=H, length=M)
    a, b = oracle_operands(rng)
    out = block.reference(a, b)
    assert out.shape == (H + M, M)
    normalized, normalizers = softmax_attention(a.T, b[:H].T, b[H:].T)
    np.testing.assert_allclose(np.diag(out[H:]), normalizers, rtol=1e-12)
    assert np.count_nonzero(out[H:] - np.diag(np.diag(out[H:]))) == 0
    np.testing.assert_allclose(out[:H] / normalizers, normalized.T, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_oracle_on_the_transformer_is_within_its_bound_against_direct_attention(dtype):
    rng = np.random.default_rng(2)
    operands = [oracle_operands(rng, scale) for scale in (SPAN, SPAN, 1.0, 0.3)]
    errors = measure("attention_oracle", dtype=dtype, d=D, operands=operands, dim=H, length=M)
    assert errors.within_bound, errors.worst_ratio
    for sample in errors.samples:
        normalized, normalizers = softmax_attention(sample.a.T, sample.b[:H].T, sample.b[H:].T)
        got = sample.computed
        relative = 1e-9 if dtype == "float64" else 2e-3
        np.testing.assert_allclose(np.diag(got[H:]), normalizers, rtol=relative)
        np.testing.assert_allclose(got[:H] / np.diag(got[H:]), normalized.T,
                                   atol=relative * np.abs(sample.b[H:]).max())


def test_oracle_bound_is_tight_enough_to_catch_a_wrong_normalizer():
    """The per-column bound is far below the effect of dropping the synthetic-token factor
    or of counting one padded key (e^0 = 1) in the normalizer."""
    block = make_block("attention_oracle", dim=H, length=M)
    a, b = oracle_operands(np.random.default_rng(3), 0.5)
    exact = block.reference(a, b)
    bound = block.bound_at("float64", exact)
    wrong = exact.copy()
    wrong[H:] += np.eye(M)
    assert (np.abs(wrong - exact) > bound).any()
    assert bound.max() < 1e-10


def test_oracle_metadata_and_shape_errors():
    block = make_block("attention_oracle", dim=H, length=M)
    assert (block.arity, block.depth(D), block.extra_columns(D)) == (2, 2, 1)
    assert block.output_shape((H, M), (2 * H, M)) == (H + M, M)
    with pytest.raises(ValueError, match="key/value chunk 8x4"):
        block.output_shape((H, M), (H, M))
    with pytest.raises(InputError, match="needs a block size d >= 8"):
        block.constant_fields(4)
    with pytest.raises(InputError, match="dim must be an integer"):
        make_block("attention_oracle", dim=0)


# -- the routine ------------------------------------------------------------------------------
PROGRAM = ROOT / "programs" / "fleq" / "chunked_attention.fleq"
RELATIVE_BOUND = {"float64": 1e-7}
"""Documented bound on max_i ||y_i - t_i|| / ||t_i|| for the program (docs/chunked_attention.md:
projections and Newton steps by matmul_tn at ~1e-9 each, the oracle at ~1e-14)."""


def instance_source(n: int, m: int, width: int, h: int, seed: int, score: float = 2.0,
                    scale: float = 0.5) -> tuple[str, np.ndarray, list[np.ndarray]]:
    """A program calling chunked_attention on a random instance: (source, X, [Wq, Wk, Wv])."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, width))
    weights = [rng.uniform(-scale, scale, (width, h)) for _ in range(3)]
    lines = [f".d {max(2 * h, h + m, width)}",
             f".function attention_oracle dim={h} length={m}", ".data"]
    lines += [f"X{t}: {matrix_literal(x[t * m:(t + 1) * m].T)}" for t in range(n // m)]
    lines += [f"{name}: {matrix_literal(w)}" for name, w in zip(("Wq", "Wk", "Wv"), weights)]
    lines += [f"Y{t}: .zeros {h}x{m}" for t in range(n // m)]
    lines += [".code", f"Y0 = chunked_attention(X0, Wq, Wk, Wv, n={n}, m={m}, score={score})",
              "halt"]
    return "\n".join(lines) + "\n", x, weights


def chunks(memory: dict, stem: str) -> np.ndarray:
    """Token-row matrix from the chunk cells stem0, stem1, ... (one column per token)."""
    count = sum(1 for name in memory if name[:-1] == stem and name[-1].isdigit())
    return np.hstack([np.asarray(memory[f"{stem}{t}"]) for t in range(count)]).T


def direct_attention(x: np.ndarray, wq: np.ndarray, wk: np.ndarray, wv: np.ndarray) -> np.ndarray:
    """softmax(X Wq (X Wk)^T) X Wv by the simulation library's yardstick (vm/attention/chunked)."""
    head = HeadWeights(torch.as_tensor(wq), torch.as_tensor(wk), torch.as_tensor(wv))
    out, _ = head_attention(torch.as_tensor(x), head, Mask("none"))
    return out.numpy()


def oracle_calls(program) -> int:
    return sum(1 for i in program.instructions if i.function == "attention_oracle")


@pytest.mark.parametrize("n, m, width, h, seed", [(16, 4, 4, 4, 0), (6, 2, 3, 2, 1),
                                                   (12, 3, 2, 3, 2), (8, 8, 4, 4, 3)])
def test_expansion_calls_only_blocks_and_the_oracle_exactly_squared_chunks_times(n, m, width,
                                                                                 h, seed):
    source, x, weights = instance_source(n, m, width, h, seed)
    program = FLEQ.assemble_text(source, "instance.fleq")
    assert all(i.function is None or i.function in REGISTRY for i in program.instructions)
    assert not {i.function for i in program.instructions} & set(ROUTINES)
    assert oracle_calls(program) == (n // m) ** 2
    result = run_fleq_reference(program, 10_000, trace=True)
    assert result.halted
    executed = [program.instructions[step.pc].function for step in result.trace
                if step.pc != program.eof]
    assert executed.count("attention_oracle") == (n // m) ** 2
    got = chunks(program.named_memory(result.cells), "Y")
    want = direct_attention(x, *weights)
    assert relative_error(torch.as_tensor(got), torch.as_tensor(want)) < 1e-12


@pytest.fixture(scope="module")
def program_run():
    """The shipped instance on the looped transformer, in lockstep with the FLEQ reference."""
    program = FLEQ.assemble_file(PROGRAM)
    comparison = compare_fleq(program, fleq_geometry_for(program), 1000,
                              EngineConfig(dtype="float64"))
    return program, comparison


def test_program_on_the_transformer_matches_full_attention_within_the_bound(program_run):
    program, comparison = program_run
    assert comparison.ok and comparison.halted
    memory = program.named_memory(program.cells)
    want = direct_attention(chunks(memory, "X"), *(np.asarray(memory[w])
                                                   for w in ("Wq", "Wk", "Wv")))
    last = {error.cell: error for error in comparison.errors}
    got = np.hstack([last[f"Y{t}"].transformer for t in range(4)]).T
    reference = np.hstack([last[f"Y{t}"].reference for t in range(4)]).T
    error = relative_error(torch.as_tensor(got), torch.as_tensor(want))
    assert 0 < error <= RELATIVE_BOUND["float64"]
    assert relative_error(torch.as_tensor(reference), torch.as_tensor(want)) < 1e-12


def test_program_runs_the_oracle_sixteen_times_each_within_its_bound(program_run):
    program, comparison = program_run
    oracle = make_block("attention_oracle", dim=H, length=M)
    calls = [e for e in comparison.errors
             if program.instructions[e.pc].function == "attention_oracle"]
    assert len(calls) == (16 // M) ** 2 == oracle_calls(program)
    for call in calls:
        assert 0 < call.local_absolute <= np.min(oracle.bound_at("float64", call.transformer))


@pytest.mark.parametrize("line, message", [
    ("Y0 = chunked_attention(X1, Wq, Wk, Wv)", "must name chunk 0"),
    ("Y0 = chunked_attention(X0, Wq, Wk, Wv, n=10)", "multiple of m=4"),
    ("Y0 = chunked_attention(X0, Wq, Wk, Wv, m=2)", "has 4 tokens"),
    ("Y0 = chunked_attention(X0, Wq, Wk, Wq2)", "must be 4x4"),
    ("Y0 = chunked_attention(X0, Wq, Wk, Wv, score=0)", "score must be positive"),
    ("Y0 = chunked_attention(X0, Wq, Wk, Wv, score=20)", "at most 16, got 20"),
    ("Y0 = chunked_attention(X0, Wq, Wk, Wv, score=1e400)",
     "at most 16, got a number past float64's range"),
    ("Y0 = chunked_attention(X0, Wq, Wk, Wv, n=1e400)",
     "n must be a positive multiple of m=4, got a number past float64's range"),
    ("Y0 = chunked_attention(X0, Wq, Wk, Wv, m=1e400)",
     "m must be a positive integer, got a number past float64's range"),
    ("Y0 = chunked_attention(X0, Wq, Wk, Wv, m=0)", "m must be a positive integer"),
    ("Y0 = chunked_attention(X0, Wq, Wk, Wv, n=4000000000000)", "more than the machine's"),
    # past 2^50: the keyword's own message, not the machine's magnitudes (nor a 300-digit one)
    ("Y0 = chunked_attention(X0, Wq, Wk, Wv, n=1e300)",
     r"n/m = 2\.5e\+299 chunks, more than the machine's 65536 columns"),
    ("Y0 = chunked_attention(X0, Wq, Wk, Wv, m=1e300)", "multiple of m=1e\\+300"),
    ("Y0 = chunked_attention(X0, Wq, Wk, Wv, score=1e300)", "at most 16, got 1e\\+300"),
    ("Y0 = chunked_attention(X0, Wq, Wk, Wv, rope=-1e300)", "rope must be 0 or 1, got -1e"),
])
def test_bad_calls_are_located_errors(line, message):
    source = PROGRAM.read_text().replace(
        "    Y0 = chunked_attention(X0, Wq, Wk, Wv, n=16, m=4, score=2)", line)
    source = source.replace(".data\n", ".data\nWq2: .zeros 4x3\n", 1)
    with pytest.raises(SourceError, match=message) as caught:
        FLEQ.assemble_text(source, "bad.fleq")
    line_number = source.splitlines().index(line) + 1
    assert f"bad.fleq:{line_number}:" in str(caught.value)


@pytest.mark.parametrize("line, column", [
    ("Y0 = chunked_attention(X1, Wq, Wk, Wv)", 24), ("Y1 = chunked_attention(X0, Wq, Wk, Wv)", 1),
    ("Y0 = chunked_attention(X0, Wq, Wk, Wq2)", 36),
])
def test_a_bad_operand_is_marked_at_the_operand(line, column):
    """The caret ran under the whole call, though the message names one operand."""
    source = PROGRAM.read_text().replace(
        "    Y0 = chunked_attention(X0, Wq, Wk, Wv, n=16, m=4, score=2)", line)
    source = source.replace(".data\n", ".data\nWq2: .zeros 4x3\n", 1)
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(source, "bad.fleq")
    assert caught.value.column == column


@pytest.mark.parametrize("score", [0.5, 1.0, 2.0, 3.0])
def test_newton_steps_reach_the_unit_roundoff_for_the_worst_diagonal(score):
    """From X_0 = I / cosh(score), d in [e^-score, e^score] has error tanh(score)^(2^k):
    the count is the smallest that takes it below 2^-53 (iterated in exact scalars)."""
    steps = newton_iterations(score)
    for d in (math.exp(-score), math.exp(score)):
        x = 1 / math.cosh(score)
        for _ in range(steps):
            x = x * (2 - d * x)
        assert abs(1 - d * x) <= 2.0 ** -52
    assert math.tanh(score) ** (2 ** (steps - 1)) > 2.0 ** -53


def test_weights_do_not_depend_on_the_data_of_the_instance():
    """Two instances of one size (other X, Wq, Wk, Wv) share the geometry, so the looped
    transformer's weights are the same: the large transformer's weights are data."""
    first = FLEQ.assemble_text(instance_source(16, 4, 4, 4, 0)[0])
    second = FLEQ.assemble_text(instance_source(16, 4, 4, 4, 5)[0])
    assert any((a != b).any() for a, b in zip(first.cells, second.cells))
    assert fleq_geometry_for(first) == fleq_geometry_for(second)


def test_a_second_geometry_on_the_transformer_matches_full_attention():
    """N = 6, M = 2, d_model = 3, h = 2 at d = 4: another packing of the same block."""
    source, x, weights = instance_source(6, 2, 3, 2, 1)
    program = FLEQ.assemble_text(source, "small.fleq")
    result = run_transformer(program, fleq_geometry_for(program), 1000,
                             EngineConfig(dtype="float64"))
    assert result.halted
    got = chunks(program.named_memory(result.memory), "Y")
    error = relative_error(torch.as_tensor(got), torch.as_tensor(direct_attention(x, *weights)))
    assert 0 < error <= RELATIVE_BOUND["float64"]


def rope_attention(x: np.ndarray, wq: np.ndarray, wk: np.ndarray, wv: np.ndarray) -> np.ndarray:
    """softmax((R_i q_i) . (R_j k_j)) v by vm/attention/rope (rows rotated by their position)."""
    from vm.attention.rope.forward import rotate
    q, k, v = (torch.as_tensor(x @ w) for w in (wq, wk, wv))
    return (torch.softmax(rotate(q) @ rotate(k).T, dim=1) @ v).numpy()


def test_rope_chunked_attention_is_rotary_attention_on_both_engines():
    # two chunks: the rotations of a query and key in different chunks meet (16 tokens, four
    # chunks, took 214 transformer steps instead of 102 for the same check)
    source, x, weights = instance_source(8, 4, 4, 4, 5)
    program = FLEQ.assemble_text(source.replace("score=2.0)", "score=2.0, rope=1)"), "r.fleq")
    want = torch.as_tensor(rope_attention(x, *weights))
    exact = chunks(program.named_memory(run_fleq_reference(program, 10_000).cells), "Y")
    assert relative_error(torch.as_tensor(exact), want) < 1e-12
    assert relative_error(torch.as_tensor(direct_attention(x, *weights)), want) > 1e-3
    run = run_transformer(program, fleq_geometry_for(program), 10_000,
                          EngineConfig(dtype="float64"))
    got = chunks(program.named_memory(run.memory), "Y")
    assert 0 < relative_error(torch.as_tensor(got), want) <= RELATIVE_BOUND["float64"]


@pytest.mark.parametrize("h, rope, message", [(3, 1, "even head width"),
                                              (4, 2, "rope must be 0 or 1")])
def test_rope_option_errors(h, rope, message):
    source, _, _ = instance_source(6, 3, 4, h, 0)
    with pytest.raises(InputError, match=message):
        FLEQ.assemble_text(source.replace("score=2.0)", f"score=2.0, rope={rope})"), "r.fleq")


def test_an_integer_counter_as_the_output_chunk_is_refused_at_the_call():
    """It failed inside the expansion, at a line of a generated program."""
    source = (".data\nX0: .zeros 2x1\nWq: .zeros 2x1\nWk: .zeros 2x1\nWv: .zeros 2x1\nY0: 1\n"
              ".code\nY0 = chunked_attention(X0, Wq, Wk, Wv, n=1, m=1)\nhalt\n")
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(source, "bad.fleq")
    assert str(caught.value).startswith("bad.fleq:8:1: error: chunked_attention: the output "
                                        "chunk 'Y0' is an integer counter")
