"""sgd_step / sgd_step_linear: the expansion (forward, loss, backpropagation, update) calls
only registered blocks, in an order that reads W2 before updating it; bad calls are located
errors; one step on the transformer matches torch autograd's gradient."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from assembler.diagnostics import SourceError
from vm.isa import FLEQ
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.cli import main
from vm.runtime.compare import compare_fleq
from vm.runtime.executor import EngineConfig, run_transformer
from vm.machines.fleq.reference import FleqReference, run_fleq_reference
from vm.functions import REGISTRY, make_block
from vm.routines.base import Operand, RoutineCall, matrix_literal
from vm.routines import ROUTINES
from vm.routines.sgd import ACTIVATION_CODES, activation_code
from vm.apps.training import TrainingSetup, epoch_length, exact_sgd

PROGRAMS = Path(__file__).resolve().parents[1] / "programs" / "fleq"

torch.set_num_threads(1)
GRADIENT_BOUND = 2e-8
"""Documented float64 bound on |gradient - torch autograd| for one step on these operands:
the derivative block's bound (tanh_prime 5.9e-9, sigmoid_prime 9.2e-11; relu_prime exact)
times |W2^T e| |x| (below 2 here) dominates; every product adds ~1e-10 (measured: 3.4e-10
tanh, 8.0e-11 sigmoid, 5.4e-11 relu)."""

CALL = re.compile(r"^(?:\w+:\s*)?(\w+) = (\w+)\(([^)]*)\)$")


def operand(name: str, rows: int, columns: int, integer: bool = False) -> Operand:
    return Operand(name, (rows, columns), integer)


def two_layer_call(activation: float = 0.0, lr: float = 0.1) -> RoutineCall:
    return RoutineCall(operand("loss", 1, 1),
                       (operand("W1", 3, 2), operand("W2", 1, 3), operand("x", 2, 1),
                        operand("y", 1, 1)), {"lr": lr, "activation": activation}, "_sgd_step1")


def calls(code: list[str]) -> list[tuple[str, str, list[str]]]:
    parsed = []
    for line in code:
        match = CALL.match(line.strip())
        assert match, line
        destination, function, arguments = match.groups()
        parsed.append((destination, function, [a.strip() for a in arguments.split(",")]))
    return parsed


@pytest.mark.parametrize("code, name", list(ACTIVATION_CODES.items()))
def test_two_layer_expansion_is_forward_loss_backprop_update(code, name):
    expansion = ROUTINES["sgd_step"].expand(two_layer_call(code))
    steps = calls(expansion.code)
    functions = [function for _, function, _ in steps]
    assert all(function in REGISTRY for function in functions)
    assert functions == ["matmul", name, "matmul", "sub", "matmul_tn", "scale", "scale",
                         "matmul_tn", "matmul_nt", "sub", f"{name}_prime", "hadamard",
                         "matmul_nt", "sub"]
    written = [destination for destination, _, _ in steps]
    assert written.index("W2") < written.index("W1")
    backprop = next(i for i, (_, f, args) in enumerate(steps)
                    if f == "matmul_tn" and args[0] == "W2")
    assert backprop < written.index("W2"), "the backward pass must read W2 before its update"
    assert written.count("loss") == 2 and "W1" in written and "W2" in written
    generated = {name for line in expansion.data for name in [line.split(":")[0]]}
    assert all(g.startswith("_sgd_step1_") for g in generated)
    assert "_sgd_step1_lr: 0.1" in expansion.data


def test_linear_expansion():
    call = RoutineCall(operand("loss", 1, 1), (operand("W", 2, 3), operand("x", 3, 1),
                                               operand("y", 2, 1)), {"lr": 0.05}, "_sl1")
    steps = calls(ROUTINES["sgd_step_linear"].expand(call).code)
    assert [f for _, f, _ in steps] == ["matmul", "sub", "matmul_tn", "scale", "scale",
                                        "matmul_nt", "sub"]
    assert steps[-1][0] == "W"


@pytest.mark.parametrize("change, message", [
    ({"activation": 7.0}, "activation must be one of"),
    ({"lr": -0.1}, "lr must be positive"),
])
def test_bad_keywords_are_refused(change, message):
    keywords = {"lr": 0.1, "activation": 0.0, **change}
    call = two_layer_call(keywords["activation"], keywords["lr"])
    with pytest.raises(ValueError, match=message):
        ROUTINES["sgd_step"].expand(call)


def test_shapes_and_destination_are_checked():
    bad_x = RoutineCall(operand("loss", 1, 1), (operand("W1", 3, 2), operand("W2", 1, 3),
                                                operand("x", 3, 1), operand("y", 1, 1)),
                        {"lr": 0.1, "activation": 0.0}, "_p")
    with pytest.raises(ValueError, match="the input 'x' must be 2x1"):
        ROUTINES["sgd_step"].expand(bad_x)
    counter = RoutineCall(operand("n", 1, 1, integer=True), two_layer_call().arguments,
                          {"lr": 0.1, "activation": 0.0}, "_p")
    with pytest.raises(ValueError, match="real scalar"):
        ROUTINES["sgd_step"].expand(counter)


def test_bad_activation_in_a_file_is_located_at_the_keyword():
    source = (".data\nW1: .zeros 3x2\nW2: .zeros 1x3\nx: .vector [1.0, 2.0]\ny: 0.5\n"
              "loss: 0.0\n.code\n    loss = sgd_step(W1, W2, x, y, activation=4)\nhalt\n")
    with pytest.raises(SourceError, match="activation must be one of") as caught:
        FLEQ.assemble_text(source, "bad.fleq")
    assert "bad.fleq:8:35" in str(caught.value)


@pytest.mark.parametrize("lr, message", [("1e400", "sgd_step_linear: lr must lie within "
                                                   "|x| <= 2^50 (about 1.13e+15), the "
                                                   "magnitudes the machine keeps exact, got inf"),
                                         ("1e300", "sgd_step_linear: lr must lie within "
                                                   "|x| <= 2^50 (about 1.13e+15), the "
                                                   "magnitudes the machine keeps exact, "
                                                   "got 1e+300"),
                                         ("-1", "lr must be positive, got -1")])
def test_bad_learning_rate_is_located_at_the_keyword(lr, message):
    """Checked where given, not an `unexpected 'inf'` inside the expansion."""
    source = (".data\nW: .zeros 1x2\nx: .vector [1.0, 2.0]\ny: 0.5\nloss: 0.0\n.code\n"
              f"    loss = sgd_step_linear(W, x, y, lr={lr})\nhalt\n")
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(source, "bad.fleq")
    assert message in str(caught.value) and "bad.fleq:7:37:" in str(caught.value)


def test_activation_codes_round_trip():
    for code, name in ACTIVATION_CODES.items():
        assert activation_code(name) == code
    with pytest.raises(ValueError, match="unknown activation 'softplus'"):
        activation_code("softplus")


@pytest.mark.parametrize("activation", ["tanh", "sigmoid", "relu"])
def test_one_step_on_the_transformer_is_torch_autograds_gradient(activation):
    rng = np.random.default_rng(1)
    w1, w2 = rng.normal(size=(3, 3)), rng.normal(size=(2, 3))
    x, y, lr = rng.normal(size=3), rng.normal(size=2), 0.5
    source = (f".data\nW1: {matrix_literal(w1)}\nW2: {matrix_literal(w2)}\n"
              f"x: {matrix_literal(x[:, None])}\ny: {matrix_literal(y[:, None])}\n"
              f"loss: 0.0\n.code\nloss = sgd_step(W1, W2, x, y, lr={lr}, "
              f"activation={activation_code(activation)})\nhalt\n")
    program = FLEQ.assemble_text(source, "step.fleq")
    result = run_transformer(program, fleq_geometry_for(program), 100,
                             EngineConfig(dtype="float64"))
    memory = program.named_memory(result.memory)
    weights = [torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)]
    function = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu}[activation]
    prediction = weights[1] @ function(weights[0] @ torch.tensor(x))
    loss = 0.5 * ((prediction - torch.tensor(y)) ** 2).sum()
    loss.backward()
    assert abs(memory["loss"] - loss.item()) < GRADIENT_BOUND
    for name, before, tensor in (("W1", w1, weights[0]), ("W2", w2, weights[1])):
        gradient = (before - np.array(memory[name])) / lr
        assert np.abs(gradient - tensor.grad.numpy()).max() < GRADIENT_BOUND, name
    derivative = make_block(f"{activation}_prime")
    assert derivative.error_bound("float64") <= GRADIENT_BOUND / 2


def program_weights(program, cells, names):
    memory = program.named_memory(cells)
    return tuple(np.array(memory[name]) for name in names)


def samples(program):
    """The (x, y) pairs of a program file, in the order of its data."""
    memory = program.named_memory(program.cells)
    count = sum(1 for name in program.variables if re.fullmatch(r"x\d+", name))
    x = np.array([np.array(memory[f"x{i}"]).reshape(-1) for i in range(count)])
    y = np.array([np.array(memory[f"y{i}"], ndmin=1).reshape(-1) for i in range(count)])
    return x, y


@pytest.mark.parametrize("file, names, hidden", [
    ("sgd_linear_regression.fleq", ("W",), 0), ("sgd_two_layer.fleq", ("W1", "W2"), 3)])
def test_program_files_run_exact_sgd_on_the_reference(file, names, hidden):
    program = FLEQ.assemble_file(PROGRAMS / file)
    x, y = samples(program)
    memory = program.named_memory(program.cells)
    setup = TrainingSetup(hidden, 0.3 if hidden == 0 else 0.2, int(memory["epochs"]), "tanh")
    exact = exact_sgd(x, y, setup, program_weights(program, program.cells, names))
    result = run_fleq_reference(program, 10_000)
    assert result.halted
    for got, expected in zip(program_weights(program, result.cells, names), exact.weights[-1],
                             strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-13)
    final = program.named_memory(result.cells)["mean"]
    assert final == pytest.approx(exact.losses[-1], rel=1e-12)
    assert final < exact.losses[0] / 3


def test_linear_regression_file_on_the_transformer_stays_on_the_reference():
    program = FLEQ.assemble_file(PROGRAMS / "sgd_linear_regression.fleq")
    comparison = compare_fleq(program, fleq_geometry_for(program), 10_000)
    assert comparison.ok and comparison.halted
    assert comparison.max_absolute < 1e-8
    assert program.named_memory(program.cells)["epochs"] > 1


def test_two_layer_file_first_epoch_on_the_transformer():
    """One epoch (62 passes) on the transformer, against the reference at the same step."""
    program = FLEQ.assemble_file(PROGRAMS / "sgd_two_layer.fleq")
    length = epoch_length(program)
    reference = FleqReference(program)
    for _ in range(length):
        reference.step()
    result = run_transformer(program, fleq_geometry_for(program), length)
    assert result.pc == reference.pc == program.labels["epoch"]
    for got, expected in zip(program_weights(program, result.memory, ("W1", "W2")),
                             program_weights(program, reference.cells, ("W1", "W2")), strict=True):
        assert np.abs(got - expected).max() < 1e-8


def test_inspect_puts_the_sgd_program_beside_the_paper(capsys):
    assert main(["inspect", str(PROGRAMS / "sgd_two_layer.fleq")]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "Section 9" in line)
    assert "13 layers, 1 head" in line and "sgd_step" in line
    layers = int(re.search(r"total: (\d+) layers", out).group(1))
    assert f"here {layers} layers" in line
    assert main(["inspect", str(PROGRAMS / "calculator.fleq")]) == 0
    assert "Section 9" not in capsys.readouterr().out


@pytest.mark.parametrize("line", ["loss = sgd_step_linear(k, s, t)", "loss = sgd_step(k, s, s1, t)",
                                  "loss = sgd_step(s, k, s1, t)"])
def test_an_integer_counter_as_weights_is_refused_at_the_call(line):
    """The weights are updated in place: an integer counter there failed inside the
    expansion, at a line of a generated program, not at the user's call."""
    source = (".data\nk: 1\ns: 0.5\ns1: 0.5\nt: 0.25\nloss: 0.0\n.code\n"
              f"{line}\nhalt\n")
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(source, "bad.fleq")
    assert str(caught.value).startswith(f"bad.fleq:8:{line.index('k,') + 1}: error: ")  # at k
    assert "the weight matrix 'k' is an integer counter" in caught.value.message
