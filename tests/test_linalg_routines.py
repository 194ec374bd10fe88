"""inverse, power_iteration and rayleigh on the FLEQ transformer: against numpy.linalg and the
same algorithm run exactly (the reference interpreter), within the documented bounds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from assembler.diagnostics import SourceError
from vm.isa import FLEQ
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.runtime.executor import EngineConfig, run_transformer
from vm.machines.fleq.reference import run_fleq_reference
from vm.machines.fleq.domains import first_domain_violation
from vm.runtime.compare import compare_fleq
from vm.functions import REGISTRY, make_block
from vm.routines.base import matrix_literal
from vm.routines import ROUTINES
from vm.routines.linalg import (eigenvector_error_bound, inverse_error_bound,
                                rayleigh_error_bound)

torch.set_num_threads(1)

PROGRAMS = Path(__file__).resolve().parents[1] / "programs" / "fleq"

FLOAT32 = {name: {"scale": 1e-3} for name in ("matmul_tn", "scale")}
"""Product parameters for float32 (docs/linalg.md)."""


def well_conditioned(n: int, seed: int, low: float = 1.0, high: float = 2.0) -> np.ndarray:
    """U diag(singular values in [low, high]) V^T with random orthogonal U, V."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.normal(size=(n, n)))
    v, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return u @ np.diag(np.linspace(high, low, n)) @ v.T


def symmetric(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Q diag(lam) Q^T with lam = 3, 1.2, ... (a dominant eigenvalue, ratio 0.4)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    lam = np.concatenate([[3.0], np.linspace(1.2, -1.0, n - 1)])
    return q @ np.diag(lam) @ q.T, lam


def run_both(source: str | Path, dtype: str, parameters: dict | None = None):
    program = (FLEQ.assemble_file(source) if isinstance(source, Path) else
               FLEQ.assemble_text(source, "linalg.fleq", parameters=parameters))
    transformer = run_transformer(program, fleq_geometry_for(program), 10_000,
                                  EngineConfig(dtype=dtype))
    exact = run_fleq_reference(program, 10_000)
    assert transformer.halted and exact.halted and transformer.steps == exact.steps
    return program.named_memory(transformer.memory), program.named_memory(exact.cells)


def inverse_source(a: np.ndarray, iters: int) -> str:
    n = len(a)
    return (f".d {n}\n.data\nA: {matrix_literal(a)}\nX: .zeros {n}x{n}\n.code\n"
            f"X = inverse(A, iters={iters})\nhalt\n")


def eig_source(a: np.ndarray, iters: int) -> str:
    n = len(a)
    return (f".d {n}\n.data\nA: {matrix_literal(a)}\nv: .zeros {n}x1\nlam: 0.0\n.code\n"
            f"v = power_iteration(A, iters={iters})\nlam = rayleigh(A, v)\nhalt\n")


def test_expansions_call_only_registered_blocks():
    a, _ = symmetric(3, 0)
    source = (f".d 3\n.data\nA: {matrix_literal(a)}\nX: .zeros 3x3\nv: .zeros 3x1\nlam: 0.0\n.code\n"
              "X = inverse(A, iters=2)\nv = power_iteration(A, iters=2)\nlam = rayleigh(A, v)\n"
              "halt\n")
    program = FLEQ.assemble_text(source)
    called = {i.function for i in program.instructions if i.function is not None}
    assert called <= set(REGISTRY) and not called & set(ROUTINES)
    assert called == {"matmul_tn", "trace", "rsqrt", "scale", "sub", "add"}
    conditional = [i for i in program.instructions if i.target <= program.instructions.index(i)
                   and i.function is not None]
    assert len(conditional) == 2, "each loop ends in a write with a conditional jump back"


@pytest.mark.parametrize("n, iters", [(2, 8), (4, 10), (8, 10)])
def test_inverse_agrees_with_numpy_in_float64(n, iters):
    a = well_conditioned(n, seed=n)
    got, exact = run_both(inverse_source(a, iters), "float64")
    inverse = np.linalg.inv(a)
    algorithm_error = np.abs(np.asarray(exact["X"]) - inverse).max()
    assert algorithm_error < 1e-12, "the exact algorithm has converged"
    bound = inverse_error_bound(n, np.abs(a).max(), np.abs(inverse).max(), "float64",
                                make_block("matmul_tn"))
    assert bound < 1e-7
    transformer_error = np.abs(np.asarray(got["X"]) - np.asarray(exact["X"])).max()
    assert transformer_error <= bound
    assert np.abs(np.asarray(got["X"]) - inverse).max() <= bound + algorithm_error


def test_inverse_in_float32_is_within_the_float32_bound():
    a = well_conditioned(2, seed=5)
    got, exact = run_both(inverse_source(a, 8), "float32", FLOAT32)
    inverse = np.linalg.inv(a)
    bound = inverse_error_bound(2, np.abs(a).max(), np.abs(inverse).max(), "float32",
                                make_block("matmul_tn", **FLOAT32["matmul_tn"]))
    assert np.abs(np.asarray(got["X"]) - np.asarray(exact["X"])).max() <= bound < 0.1


@pytest.mark.parametrize("n, iters", [(2, 20), (4, 25)])
def test_power_iteration_and_rayleigh_agree_with_numpy(n, iters):
    a, lam = symmetric(n, seed=10 + n)
    got, exact = run_both(eig_source(a, iters), "float64")
    values, vectors = np.linalg.eigh(a)
    top = vectors[:, np.argmax(np.abs(values))]
    v, v_exact = (np.asarray(m["v"], dtype=float).reshape(-1) for m in (got, exact))
    v, v_exact = v * np.sign(v @ top), v_exact * np.sign(v_exact @ top)
    product = make_block("matmul_tn")
    bound = eigenvector_error_bound(n, np.abs(a).max(), lam[0], lam[1], "float64", product)
    algorithm_error = np.abs(v_exact - top).max()
    assert algorithm_error < 1e-6 and bound < 1e-7
    assert np.abs(v - v_exact).max() <= bound
    assert np.abs(v - top).max() <= bound + algorithm_error
    assert abs(np.linalg.norm(v) - 1) <= bound
    lam_bound = rayleigh_error_bound(n, np.abs(a).max(), lam[0], "float64", product)
    assert abs(got["lam"] - exact["lam"]) <= lam_bound
    assert abs(got["lam"] - lam[0]) <= lam_bound + abs(exact["lam"] - lam[0])


def call_source(line: str) -> str:
    """A program whose 8th line is `line`, a routine call on A (2x2), R (2x3), X (2x2),
    v (2x1) or s (a real)."""
    return (".data\nA: .matrix 2x2 [[1.0, 0.0], [0.0, 2.0]]\n"
            "R: .matrix 2x3 [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]\nX: .zeros 2x2\n"
            f"v: .zeros 2x1\ns: 0.0\n.code\n{line}\nhalt\n")


@pytest.mark.parametrize("line, message", [
    ("X = inverse(R, iters=3)", "'R' must be a square matrix, got 2x3"),
    ("v = inverse(A, iters=3)", "'v' must be the shape of A (2x2), got 2x1"),
    ("X = inverse(A, iters=0)", "iters must be an integer from 1 to 1000000, got 0"),
    ("X = power_iteration(A)", "'X' must be a vector as long as A (2x1), got 2x2"),
    ("s = rayleigh(A, X)", "'X' must be a vector as long as A (2x1), got 2x2"),
])
def test_bad_routine_calls_are_located(line, message):
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(call_source(line), "bad.fleq")
    assert message in str(caught.value) and "bad.fleq:8:" in str(caught.value)


@pytest.mark.parametrize("line, caret", [
    ("X = inverse(R, iters=3)", "            ^"), ("v = inverse(A, iters=3)", "^"),
    ("X = power_iteration(A)", "^"), ("s = rayleigh(A, X)", "                ^"),
    ("s = rayleigh(v, v)", "             ^"),
])
def test_a_bad_routine_operand_is_marked_at_the_operand(line, caret):
    """The caret ran under the whole call, though the message names one operand."""
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(call_source(line), "bad.fleq")
    assert str(caught.value).split("\n")[2] == "    " + caret


@pytest.mark.parametrize("line, message", [
    ("X = inverse(A, iters=1e400)",
     "inverse: iters must be an integer from 1 to 1000000, got a number past float64's range"),
    # the keyword's own range, not the machine's magnitudes, past 2^50 too
    ("X = inverse(A, iters=1e300)", "iters must be an integer from 1 to 1000000, got 1e+300"),
    ("v = power_iteration(A, iters=1000000000000000000000000000)",
     "power_iteration: iters must be an integer from 1 to 1000000, got 1e+27"),
    ("v = power_iteration(A, newton=-1e20)", "newton must be an integer from 1 to 64, got -1e+20"),
    ("s = rayleigh(A, v, newton=1e16)", "newton must be an integer from 1 to 64, got 1e+16"),
    ("X = inverse(A, iters=2.5)", "iters must be an integer from 1 to 1000000, got 2.5"),
    ("X = inverse(A, iters=1000001)", "iters must be an integer from 1 to 1000000, got 1000001"),
    ("v = power_iteration(A, iters=1e400)",
     "iters must be an integer from 1 to 1000000, got a number past float64's range"),
    ("v = power_iteration(A, newton=1e400)",
     "newton must be an integer from 1 to 64, got a number past float64's range"),
    ("v = power_iteration(A, newton=99999999)", "newton must be an integer from 1 to 64"),
    ("s = rayleigh(A, v, newton=-1e400)",
     "rayleigh: newton must be an integer from 1 to 64, got a number past float64's range"),
    ("s = rayleigh(A, v, newton=0)", "newton must be an integer from 1 to 64, got 0"),
])
def test_bad_keyword_values_are_located_at_the_keyword(line, message):
    """Checked where given (not an overflow inside the routine, an error inside its
    expansion, or an unrolled program that fills memory), the caret under `key=value`."""
    source = (".data\nA: .matrix 2x2 [[1.0, 0.0], [0.0, 2.0]]\nX: .zeros 2x2\n"
              f"v: .zeros 2x1\ns: 0.0\n.code\n{line}\nhalt\n")
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(source, "bad.fleq")
    text = str(caught.value)
    column = line.rindex(", ") + 3  # the keyword, the call's last argument
    assert message in text and f"bad.fleq:7:{column}:" in text and "expanded" not in text


def test_the_largest_newton_count_assembles():
    source = (".data\nA: .matrix 2x2 [[1.0, 0.0], [0.0, 2.0]]\nv: .zeros 2x1\n.code\n"
              "v = power_iteration(A, iters=1000000, newton=64)\nhalt\n")
    assert FLEQ.assemble_text(source, "ok.fleq").instructions


def test_hand_written_matrix_inverse_program_agrees_with_numpy():
    got, exact = run_both(PROGRAMS / "matrix_inverse.fleq", "float64")
    a = np.asarray(exact["A"])
    inverse = np.linalg.inv(a)
    algorithm_error = np.abs(np.asarray(exact["X"]) - inverse).max()
    assert algorithm_error < 1e-12
    bound = inverse_error_bound(3, np.abs(a).max(), np.abs(inverse).max(), "float64",
                                make_block("matmul_tn"))
    assert np.abs(np.asarray(got["X"]) - inverse).max() <= bound + algorithm_error


def test_hand_written_power_iteration_program_agrees_with_numpy():
    got, exact = run_both(PROGRAMS / "power_iteration.fleq", "float64")
    a = np.asarray(exact["A"])
    values, vectors = np.linalg.eigh(a)
    top = vectors[:, -1]
    v = np.asarray(got["v"], dtype=float).reshape(-1)
    product = make_block("matmul_tn")
    bound = eigenvector_error_bound(3, np.abs(a).max(), values[-1], values[-2], "float64",
                                    product)
    v_exact = np.asarray(exact["v"], dtype=float).reshape(-1)
    algorithm_error = np.abs(v_exact * np.sign(v_exact @ top) - top).max()
    assert algorithm_error < 1e-9
    assert np.abs(v * np.sign(v @ top) - top).max() <= bound + algorithm_error
    assert abs(got["lam"] - values[-1]) <= rayleigh_error_bound(3, np.abs(a).max(), values[-1],
                                                                "float64", product)


def test_power_iteration_stops_on_convergence_like_numpy():
    """power_to_convergence.fleq iterates until no component of v moves by more than 1e-7:
    as many iterations as the same rule in numpy, both engines agree after every step, and
    v and lam are numpy's dominant eigenpair."""
    program = FLEQ.assemble_file(PROGRAMS / "power_to_convergence.fleq")
    a = np.array(program.named_memory([np.asarray(c) for c in program.cells])["A"])
    v, iterations = np.full(3, 1 / np.sqrt(3)), 0
    while True:
        iterations += 1
        new = a @ v / np.linalg.norm(a @ v)
        moved, v = np.abs(new - v).max(), new
        if moved <= 1e-7:
            break
    comparison = compare_fleq(program, fleq_geometry_for(program), 2000)
    assert comparison.ok and comparison.halted
    result = run_transformer(program, fleq_geometry_for(program), 2000)
    memory = program.named_memory(result.memory)
    assert memory["iters"] == iterations
    values, vectors = np.linalg.eigh(a)
    top = vectors[:, -1] * np.sign(vectors[:, -1] @ v)
    assert np.abs(np.asarray(memory["v"], dtype=float).reshape(-1) - top).max() <= 1e-6
    assert abs(memory["lam"] - values[-1]) <= 1e-8
    assert first_domain_violation(program, result.steps) is None


def test_power_iteration_at_d8_tracks_the_exact_algorithm():
    """Few iterations (a d = 8 pass is slow): the bound holds at every T, converged or not."""
    a, lam = symmetric(8, seed=18)
    got, exact = run_both(eig_source(a, 4), "float64")
    values, vectors = np.linalg.eigh(a)
    top = vectors[:, np.argmax(np.abs(values))]
    v, v_exact = (np.asarray(m["v"], dtype=float).reshape(-1) for m in (got, exact))
    v, v_exact = v * np.sign(v @ top), v_exact * np.sign(v_exact @ top)
    product = make_block("matmul_tn")
    bound = eigenvector_error_bound(8, np.abs(a).max(), lam[0], lam[1], "float64", product)
    assert np.abs(v - v_exact).max() <= bound
    assert np.abs(v - top).max() <= bound + np.abs(v_exact - top).max()
    assert abs(got["lam"] - exact["lam"]) <= rayleigh_error_bound(8, np.abs(a).max(), lam[0],
                                                                  "float64", product)


@pytest.mark.parametrize("lam1, lam2", [(1.0, 2.0), (2.0, -2.0), (0.0, 0.0)])
def test_the_eigenvector_bound_needs_a_dominant_eigenvalue(lam1, lam2):
    """|lam2| > |lam1| gave a negative bound; equal moduli divided by zero."""
    with pytest.raises(ValueError, match=r"needs \|lam1\| > \|lam2\|"):
        eigenvector_error_bound(2, 1.0, lam1, lam2, "float64", make_block("matmul_tn"))


@pytest.mark.parametrize("values", [[1.0, 2.0], 3.0, [[1 + 2j]], np.zeros((0, 0)),
                                    np.zeros((2, 2, 2)), [[np.nan]], [[np.inf]]])
def test_a_matrix_literal_refuses_what_is_not_a_finite_real_matrix(values):
    """A vector or complex values raised a TypeError; NaN, inf and 0x0 became text the
    assembler cannot read."""
    with pytest.raises(ValueError, match="a matrix literal needs"):
        matrix_literal(values)


@pytest.mark.parametrize("line", ["k = inverse(B)", "k = power_iteration(B)", "k = rayleigh(A, v)"])
def test_an_integer_counter_as_the_destination_is_refused_at_the_call(line):
    """`k = rayleigh(A, v)` failed inside the expansion, at a line of a generated program
    ('<rayleigh expanded at ...>:32:1'), not at the user's call."""
    source = (".data\nA: .matrix 2x2 [[1.0, 0.0], [0.0, 2.0]]\nB: .matrix 1x1 [[2.0]]\n"
              f"v: .zeros 2x1\nk: 1\n.code\n{line}\nhalt\n")
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(source, "bad.fleq")
    assert str(caught.value).startswith("bad.fleq:7:1: error: ")
    assert ("the destination 'k' is an integer counter; the routine writes real values to it"
            in caught.value.message)
