"""Activation blocks: the references agree with torch, the transformer stays within each
block's documented bound in both dtypes, and the relu derivative's step is exact off its
ramp."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vm.common.errors import InputError
from vm.isa import FLEQ
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.runtime.executor import EngineConfig, run_transformer
from vm.functions import REGISTRY, make_block
from vm.machines.fleq.domains import first_domain_violation
from vm.runtime.compare import compare_fleq
from vm.routines.base import matrix_literal
from vm.machines.fleq.machine import fleq_machine

torch.set_num_threads(1)
D = 3
NAMES = ("sigmoid", "tanh", "sigmoid_prime", "tanh_prime", "relu", "relu_prime")
RNG = np.random.default_rng(7)
OPERANDS = {name: RNG.normal(scale=4.0, size=(D, D)) for name in NAMES}
OPERANDS["sigmoid"][0, 0] = 35.0
OPERANDS["tanh_prime"][0, 0] = -25.0
OPERANDS["relu"][0, 0] = 0.0
STEP = make_block("relu_prime")
OPERANDS["relu_prime"] = np.array([[0.0, -1e-12, STEP.ramp], [1e-12, -3.0, 2e-9],
                                   [1e3, -1e3, 1e-10]])


def torch_reference(name: str, a: np.ndarray) -> np.ndarray:
    """The functions and their autograd derivatives, independently of the blocks."""
    x = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    function = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu}
    base = name.removesuffix("_prime")
    y = function[base](x)
    if name == base:
        return y.detach().numpy()
    (gradient,) = torch.autograd.grad(y.sum(), x)
    return gradient.numpy()


@pytest.fixture(scope="module")
def program():
    data = "\n".join(f"A{i}: {matrix_literal(OPERANDS[n])}\nC{i}: .zeros {D}x{D}"
                     for i, n in enumerate(NAMES))
    code = "\n".join(f"C{i} = {n}(A{i})" for i, n in enumerate(NAMES))
    return FLEQ.assemble_text(f".d {D}\n.data\n{data}\n.code\n{code}\nhalt\n", "act.fleq")


@pytest.mark.parametrize("name", NAMES)
def test_reference_is_torch(name):
    a = OPERANDS[name]
    expected = torch_reference(name, a)
    if name == "relu_prime":
        inside = (a > 0) & (a < STEP.ramp)
        np.testing.assert_array_equal(make_block(name).reference(a, None)[~inside],
                                      expected[~inside])
        assert make_block(name).reference(np.zeros((1, 1)), None)[0, 0] == expected[0, 0] == 0.0
        return
    np.testing.assert_allclose(make_block(name).reference(a, None), expected, rtol=1e-12,
                               atol=1e-15)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_transformer_within_documented_bound(program, dtype):
    result = run_transformer(program, fleq_geometry_for(program), 20, EngineConfig(dtype=dtype))
    assert result.halted
    for i, name in enumerate(NAMES):
        a = OPERANDS[name]
        block = make_block(name)
        got = result.memory[program.variables[f"C{i}"].cell]
        exact = torch_reference(name, a)
        if name == "relu_prime":
            inside = (a > 0) & (a < block.ramp)
            np.testing.assert_array_equal(got[~inside], exact[~inside])
            assert ((got[inside] >= 0) & (got[inside] <= 1)).all()
            assert not block.domain().contains(a[inside])
            continue
        bound = block.bound_at(dtype, exact)
        assert (np.abs(got - exact) <= bound).all(), (name, np.abs(got - exact).max())


def test_error_is_small_not_just_bounded():
    """The float64 bounds are tight enough to train with: the function itself to 1e-14,
    derivatives to 1e-8."""
    for name, limit in (("sigmoid", 1e-14), ("tanh", 1e-14), ("sigmoid_prime", 1e-10),
                        ("tanh_prime", 1e-8)):
        assert make_block(name).error_bound("float64") < limit, name


def test_heads_per_block(program):
    machine = fleq_machine(fleq_geometry_for(program))
    roles = [h.role for layer in machine.weights.layers for h in layer.heads]
    terms = {name: sum(role.startswith(f"{name}: sigmoid term") for role in roles)
             for name in NAMES}
    assert terms == {"sigmoid": 1, "tanh": 1, "sigmoid_prime": 4, "tanh_prime": 4, "relu": 0,
                     "relu_prime": 1}


def test_parameters_are_checked():
    """An InputError naming the parameter and its range, not any exception whose text
    holds the parameter's name (a TypeError or a traceback's ValueError)."""
    with pytest.raises(InputError, match=r"sigmoid_prime\.step must be in"):
        make_block("sigmoid_prime", step=0.0)
    with pytest.raises(InputError, match=r"relu_prime\.slope must be in"):
        make_block("relu_prime", slope=0.5)


NEWTON = Path(__file__).resolve().parents[1] / "programs" / "fleq" / "newton_reciprocal.fleq"


def test_relu_prime_may_write_a_counter_and_relu_may_not():
    assert REGISTRY["relu_prime"]().integer_result and not REGISTRY["relu"]().integer_result
    FLEQ.assemble_text(".data\nx: 0.5\nn: 1\n.code\nn = relu_prime(x)\nhalt\n", "ok.fleq")
    with pytest.raises(InputError, match="'n' is an integer counter"):
        FLEQ.assemble_text(".data\nx: 0.5\nn: 1\n.code\nn = relu(x)\nhalt\n", "bad.fleq")


def test_a_loop_stops_on_a_real_tolerance_on_both_engines():
    """Newton's iteration for 1/3 from 0.1 stops when its step is at most 1e-6: the number
    of iterations an exact float computation of the same recurrence takes."""
    x, iterations = 0.1, 0
    while True:
        iterations += 1
        step = x * (2 - 3.0 * x) - x
        x += step
        if step <= 1e-6:
            break
    program = FLEQ.assemble_file(NEWTON)
    comparison = compare_fleq(program, fleq_geometry_for(program), 1000)
    assert comparison.ok and comparison.halted
    result = run_transformer(program, fleq_geometry_for(program), 1000)
    memory = program.named_memory(result.memory)
    assert memory["steps"] == iterations
    assert abs(memory["x"] - 1 / 3) < 1e-9
    assert first_domain_violation(program, 1000) is None


def test_a_decision_inside_the_ramp_is_flagged():
    source = ".data\ng: 1e-12\nn: 1\n.code\nn = relu_prime(g)\nhalt\n"
    violation = first_domain_violation(FLEQ.assemble_text(source, "ramp.fleq"), 10)
    assert violation is not None and violation.function == "relu_prime"


def test_newton_schulz_stops_on_its_residual_like_numpy():
    """inverse_to_tolerance.fleq updates X until ||I - A X||_F^2 <= 1e-8: as many updates as
    the same rule in numpy, and the transformer's X meets the tolerance."""
    program = FLEQ.assemble_file(NEWTON.with_name("inverse_to_tolerance.fleq"))
    A = np.array(program.named_memory([np.asarray(c) for c in program.cells])["A"])
    X, updates = A.T / np.sum(A * A), 0
    while np.sum((np.eye(3) - A @ X) ** 2) > 1e-8:
        X, updates = X @ (2 * np.eye(3) - A @ X), updates + 1
    comparison = compare_fleq(program, fleq_geometry_for(program), 1000)
    assert comparison.ok and comparison.halted
    result = run_transformer(program, fleq_geometry_for(program), 1000)
    memory = program.named_memory(result.memory)
    assert memory["iters"] == updates
    assert np.sum((np.eye(3) - A @ np.array(memory["X"])) ** 2) <= 1e-8
    assert first_domain_violation(program, result.steps) is None
