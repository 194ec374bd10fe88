"""Training a small network by SGD on the looped transformer, beside the same SGD done exactly.

`program_source` writes the FLEQ program for a data set: the samples and the
initial weights are data cells, one `sgd_step` (or `sgd_step_linear`) call
per sample is unrolled inside an epoch loop driven by an integer counter
(FLEQ has no indirect addressing), and each epoch leaves the mean of the
per-sample losses in the cell `mean`. `run_on_transformer` runs it one epoch
at a time and reads that cell and the weights after every epoch;
`exact_sgd` runs the identical algorithm in float64 numpy: same initial
weights, same sample order, loss 1/2 |y^ - y|^2 measured before each step.

A bias is a weight on a constant input 1 appended to every x (`bias=True`).
`vm.machines.fleq.domains.first_domain_violation` names the first block call whose operands
leave the block's documented domain: there the transformer's number carries no
bound, and `ltvm train` says so (exit 1).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from vm.isa import FLEQ
from assembler.fleq_program import FleqProgram
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.common.errors import InputError, RunFailure
from vm.runtime.executor import EngineConfig, TransformerExecutor
from vm.machines.fleq.domains import DomainViolation, first_domain_violation
from vm.functions import dtype_parameters
from vm.functions.activations import ACTIVATIONS, sigmoid
from vm.routines.base import matrix_literal
from vm.routines.sgd import activation_code

MAX_BLOCK = 16


@dataclass(frozen=True)
class TrainingSetup:
    """What to train and how: hidden = 0 is the linear model y^ = W x."""

    hidden: int
    lr: float
    epochs: int
    activation: str = "tanh"
    bias: bool = True
    seed: int = 0
    dtype: str = "float64"

    def __post_init__(self) -> None:
        if self.hidden < 0:
            raise InputError(f"hidden must be 0 (linear) or positive, got {self.hidden}")
        if not self.lr > 0:
            raise InputError(f"the learning rate must be positive, got {self.lr:g}")
        if self.epochs < 1:
            raise InputError(f"epochs must be at least 1, got {self.epochs}")
        if self.activation not in ACTIVATIONS:
            raise InputError(f"unknown activation {self.activation!r} (choose from "
                             f"{', '.join(ACTIVATIONS)})")


@dataclass
class Trajectory:
    """Mean per-sample loss of every epoch and the weights after it."""

    losses: list[float] = field(default_factory=list)
    weights: list[tuple[np.ndarray, ...]] = field(default_factory=list)


# -- data -------------------------------------------------------------------------------
def load_dataset(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """x (n x d_in) and y (n x d_out) from an .npz file, checked."""
    if Path(path).is_file() and not zipfile.is_zipfile(path):
        raise InputError(f"{path} is not an .npz file (a zip archive of arrays x and y)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = {"x", "y"} - set(archive.files)
            if missing:
                raise InputError(f"{path}: no array {' or '.join(sorted(missing))!r} "
                                 f"(it has: {', '.join(archive.files) or 'none'})")
            x, y = archive["x"], archive["y"]
    except InputError:
        raise
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read {path} as .npz: {error}") from None
    return check_dataset(x, y, str(path))


def check_dataset(x: np.ndarray, y: np.ndarray, where: str = "data") -> tuple[np.ndarray,
                                                                              np.ndarray]:
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim == 1:
        x = x[:, None]
    if y.ndim == 1:
        y = y[:, None]
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y) or len(x) == 0:
        raise InputError(f"{where}: x must be n x d_in and y n x d_out with the same n >= 1, "
                         f"got {x.shape} and {y.shape}")
    if not (np.issubdtype(x.dtype, np.number) and np.issubdtype(y.dtype, np.number)):
        raise InputError(f"{where}: x and y must be numeric")
    x, y = x.astype(float), y.astype(float)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise InputError(f"{where}: x and y must be finite")
    return x, y


def synthetic_regression(n: int, d_in: int, d_out: int, seed: int = 0,
                         nonlinear: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Small regression data in [-1, 1]: a linear map plus an offset, optionally through
    tanh of a second linear map (a target a one-hidden-layer network can fit)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (n, d_in))
    if nonlinear:
        inner = rng.normal(0.0, 1.5, (d_in, d_out))
        y = np.tanh(x @ inner) + 0.1
    else:
        y = x @ rng.normal(0.0, 0.7, (d_in, d_out)) + 0.3
    return x, y


def features(x: np.ndarray, bias: bool) -> np.ndarray:
    return np.hstack([x, np.ones((len(x), 1))]) if bias else x


def initial_weights(d_in: int, hidden: int, d_out: int, seed: int) -> tuple[np.ndarray, ...]:
    """Small random weights (scaled by 1/sqrt(fan-in)), reproducible from the seed."""
    rng = np.random.default_rng(seed + 1)
    if hidden == 0:
        return (rng.normal(0.0, 0.5 / np.sqrt(d_in), (d_out, d_in)),)
    return (rng.normal(0.0, 1.0 / np.sqrt(d_in), (hidden, d_in)),
            rng.normal(0.0, 1.0 / np.sqrt(hidden), (d_out, hidden)))


# -- the exact algorithm -----------------------------------------------------------------
def activation_functions(name: str) -> tuple[Callable, Callable]:
    """The activation and its derivative in numpy (relu'(0) = 0, as in torch)."""
    if name == "tanh":
        return np.tanh, lambda z: 1.0 - np.tanh(z) ** 2
    if name == "sigmoid":
        return sigmoid, lambda z: sigmoid(z) * (1.0 - sigmoid(z))
    return (lambda z: np.maximum(z, 0.0)), (lambda z: (z > 0).astype(float))


def sgd_sample(weights: tuple[np.ndarray, ...], x: np.ndarray, y: np.ndarray, lr: float,
               activation: str) -> tuple[float, tuple[np.ndarray, ...]]:
    """One exact SGD step on one sample (column vectors): (loss before, new weights)."""
    if len(weights) == 1:
        (w,) = weights
        error = w @ x - y
        return 0.5 * float((error.T @ error)[0, 0]), (w - lr * error @ x.T,)
    w1, w2 = weights
    function, derivative = activation_functions(activation)
    z = w1 @ x
    h = function(z)
    error = w2 @ h - y
    delta = (w2.T @ error) * derivative(z)
    return 0.5 * float((error.T @ error)[0, 0]), (w1 - lr * delta @ x.T, w2 - lr * error @ h.T)


def exact_sgd(x: np.ndarray, y: np.ndarray, setup: TrainingSetup,
              weights: tuple[np.ndarray, ...]) -> Trajectory:
    """The same SGD as the program, in float64 numpy (x already carries its bias input)."""
    trajectory = Trajectory()
    for _ in range(setup.epochs):
        losses = []
        for sample, target in zip(x, y):
            loss, weights = sgd_sample(weights, sample[:, None], target[:, None], setup.lr,
                                       setup.activation)
            losses.append(loss)
        trajectory.losses.append(float(np.mean(losses)))
        trajectory.weights.append(tuple(w.copy() for w in weights))
    return trajectory


# -- the FLEQ program ---------------------------------------------------------------------
def _vector(values: np.ndarray) -> str:
    return ".vector [" + ", ".join(repr(float(v)) for v in values) + "]"


def weight_names(hidden: int) -> tuple[str, ...]:
    return ("W",) if hidden == 0 else ("W1", "W2")


def block_size(x: np.ndarray, y: np.ndarray, hidden: int) -> int:
    d = max(x.shape[1], y.shape[1], hidden)
    if d > MAX_BLOCK:
        raise InputError(f"the network needs block size {d}; at most {MAX_BLOCK} is supported "
                         "(fewer features, outputs or hidden units)")
    return d


def program_source(x: np.ndarray, y: np.ndarray, setup: TrainingSetup,
                   weights: tuple[np.ndarray, ...]) -> str:
    """The FLEQ program that runs `setup.epochs` epochs of SGD over the samples in order."""
    names = weight_names(setup.hidden)
    d = block_size(x, y, setup.hidden)
    n = len(x)
    lines = [f"; generated by ltvm train: {n} samples, d_in={x.shape[1]}, "
             f"hidden={setup.hidden}, d_out={y.shape[1]}, lr={setup.lr:g}, "
             f"epochs={setup.epochs}" + (f", activation={setup.activation}"
                                          if setup.hidden else ""),
             f".d {d}", ".data"]
    lines += [f"{name}: {matrix_literal(w)}" for name, w in zip(names, weights)]
    for i, (sample, target) in enumerate(zip(x, y)):
        lines += [f"x{i}: {_vector(sample)}", f"y{i}: {_vector(target)}"]
    lines += ["loss: 0.0", "total: 0.0", "mean: 0.0", f"inv_n: {1.0 / n!r}",
              f"epochs: {setup.epochs}", "one: 1", ".code", "epoch: total = sub(total, total)"]
    if setup.hidden:
        call = (f"sgd_step(W1, W2, x{{i}}, y{{i}}, lr={setup.lr!r}, "
                f"activation={activation_code(setup.activation)})")
    else:
        call = f"sgd_step_linear(W, x{{i}}, y{{i}}, lr={setup.lr!r})"
    for i in range(n):
        lines += [f"       loss = {call.format(i=i)}", "       total = add(total, loss)"]
    lines += ["       mean = scale(total, inv_n)", "       epochs = sub(epochs, one)",
              "       if epochs <= 0 goto done", "       goto epoch", "done:  halt"]
    return "\n".join(lines) + "\n"


def assemble_training(x: np.ndarray, y: np.ndarray, setup: TrainingSetup,
                      weights: tuple[np.ndarray, ...]) -> FleqProgram:
    return FLEQ.assemble_text(program_source(x, y, setup, weights), "<ltvm train>",
                         defaults=dtype_parameters(setup.dtype))


# -- running it -----------------------------------------------------------------------------
def epoch_length(program: FleqProgram) -> int:
    """Instructions in one pass through the epoch loop (each runs exactly once)."""
    return program.labels["done"] - program.labels["epoch"]


def run_on_transformer(program: FleqProgram, setup: TrainingSetup,
                       config: EngineConfig | None = None,
                       progress: Callable[[int], None] | None = None) -> Trajectory:
    """Run the training program one epoch at a time; read `mean` and the weights after each."""
    config = config or EngineConfig(dtype=setup.dtype)
    executor = TransformerExecutor(fleq_geometry_for(program), config)
    X = executor.load([program])
    length, trajectory = epoch_length(program), Trajectory()
    names = weight_names(setup.hidden)
    for epoch in range(setup.epochs):
        offset = epoch * length
        run = executor.run(X, length, (lambda done: progress(offset + done)) if progress
                           else None)
        X = run.X
        cells, pc = executor.decode(X)[0]
        expected = program.eof if epoch == setup.epochs - 1 else program.labels["epoch"]
        if pc != expected:
            raise RunFailure(f"epoch {epoch + 1}: the program counter is at {pc}, expected "
                             f"{expected}: the epoch loop did not run as generated")
        memory = program.named_memory(cells)
        trajectory.losses.append(float(np.asarray(memory["mean"]).reshape(-1)[0]))
        trajectory.weights.append(tuple(np.asarray(memory[name], dtype=float).copy()
                                        for name in names))
    return trajectory


@dataclass
class TrainingComparison:
    setup: TrainingSetup
    transformer: Trajectory
    exact: Trajectory
    steps: int
    instructions: int
    violation: DomainViolation | None = None

    @property
    def weight_distances(self) -> list[float]:
        """Largest |W_transformer - W_exact| entry after every epoch."""
        return [max(float(np.abs(a - b).max()) for a, b in zip(mine, theirs))
                for mine, theirs in zip(self.transformer.weights, self.exact.weights)]

    @property
    def loss_differences(self) -> list[float]:
        return [abs(a - b) for a, b in zip(self.transformer.losses, self.exact.losses)]


def starting_point(x: np.ndarray, y: np.ndarray, setup: TrainingSetup
                   ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """(inputs with their bias column, targets, initial weights): what the program and exact
    SGD both start from, so a shown program is the one `train` runs."""
    x, y = check_dataset(x, y)
    inputs = features(x, setup.bias)
    return inputs, y, initial_weights(inputs.shape[1], setup.hidden, y.shape[1], setup.seed)


def train(x: np.ndarray, y: np.ndarray, setup: TrainingSetup,
          config: EngineConfig | None = None,
          progress: Callable[[int], None] | None = None) -> TrainingComparison:
    """Build the program from the data, run it on the transformer and run exact SGD."""
    inputs, y, weights = starting_point(x, y, setup)
    program = assemble_training(inputs, y, setup, weights)
    transformer = run_on_transformer(program, setup, config, progress)
    exact = exact_sgd(inputs, y, setup, weights)
    steps = epoch_length(program) * setup.epochs
    return TrainingComparison(setup, transformer, exact, steps, len(program.instructions),
                              first_domain_violation(program, steps, setup.dtype))
