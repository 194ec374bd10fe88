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

import math
import numbers
import zipfile
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Callable

import numpy as np

from vm.isa import FLEQ
from assembler.fleq import SMALLEST_NORMAL
from assembler.fleq_program import FleqProgram
from vm.machines.fleq.layout import MAX_COLUMNS
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.common.cache import Checkpoint, no_checkpoint
from vm.common.errors import InputError, RunFailure, shown_path
from vm.common.files import NPY_FORMAT_ERRORS, require_regular_file
from vm.common.limits import MAX_EPOCHS, check_flag, is_whole_number
from vm.common.signatures import MAGNITUDE, MAGNITUDE_BITS
from vm.runtime.config import check_dtype_name
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
        """Checked here, not where numpy or the assembler meets them: hidden = 10^12 asked
        numpy for 21.8 TiB of weights, lr = inf or epochs = True reached the generated
        program as words it cannot parse, and 2.5 units were a TypeError."""
        if not isinstance(self.lr, numbers.Real) or isinstance(self.lr, (bool, np.bool_)):
            raise InputError(f"the learning rate must be a real number, got {self.lr!r}")
        # plain numbers: the program is written with repr(lr), and numpy's repr of
        # np.float64(0.1) is that text, which the assembler refused at a generated line
        object.__setattr__(self, "lr", _float(self.lr))
        if not is_whole_number(self.hidden) or not 0 <= self.hidden <= MAX_BLOCK:
            raise InputError(f"hidden must be a whole number from 0 (linear), at most "
                             f"{MAX_BLOCK} (the largest block size), got {self.hidden!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise InputError(f"the learning rate must be positive and finite, got {self.lr:g}")
        if not SMALLEST_NORMAL <= self.lr <= MAGNITUDE:  # else the generated program's error
            raise InputError(f"the learning rate must lie between {SMALLEST_NORMAL:.3g} (the "
                             f"smallest normal double) and 2^{MAGNITUDE_BITS} (about "
                             f"{MAGNITUDE:.3g}, the magnitudes the machine keeps exact), got "
                             f"{self.lr:g}")
        if not is_whole_number(self.epochs) or not 1 <= self.epochs <= MAX_EPOCHS:  # checked here,
            # not on the command line alone: 10^9 in Python ran on with no end in sight
            raise InputError(f"epochs must be a whole number from 1 to {MAX_EPOCHS:,}, got "
                             f"{self.epochs!r}")
        if not is_whole_number(self.seed) or self.seed < 0:
            raise InputError(f"seed must be a whole number, at least 0, got {self.seed!r}")
        for name in ("hidden", "epochs", "seed"):
            object.__setattr__(self, name, int(getattr(self, name)))
        if self.activation not in ACTIVATIONS:
            raise InputError(f"unknown activation {self.activation!r} (choose from "
                             f"{', '.join(ACTIVATIONS)})")
        check_flag(self.bias, "bias")  # bias='no' is truthy: a bias
        check_dtype_name(self.dtype)


def _float(value: numbers.Real) -> float:
    """`value` as a float; inf past float's range (10**400 raised OverflowError)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


@dataclass
class Trajectory:
    """Mean per-sample loss of every epoch and the weights after it."""

    losses: list[float] = field(default_factory=list)
    weights: list[tuple[np.ndarray, ...]] = field(default_factory=list)


# -- data -------------------------------------------------------------------------------
def load_dataset(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """x (n x d_in) and y (n x d_out) from an .npz file, checked. The arrays' headers are
    checked before their data is read: a (compressed) archive of millions of samples is
    refused at once, not decompressed into memory, and nothing is unpickled."""
    not_npz = f"{shown_path(path)} is not an .npz file (a zip archive of arrays x and y)"
    require_regular_file(path, "an .npz archive of arrays x and y")
    try:
        with open(path, "rb") as stream:
            try:
                archive = zipfile.ZipFile(stream)
            except zipfile.BadZipFile:
                raise InputError(not_npz) from None
            with archive:
                x, y = _read_xy(archive, shown_path(path))
    except InputError:
        raise
    except OSError as error:
        raise InputError(f"cannot read {shown_path(path)}: {error.strerror or error}") from None
    except (zipfile.BadZipFile, EOFError, ValueError, RuntimeError, NotImplementedError,
            zlib.error) as error:
        raise InputError(f"{shown_path(path)} is not a valid .npz of numeric arrays x and y "
                         f"({error})") from None
    return check_dataset(x, y, shown_path(path))


def _read_xy(archive: zipfile.ZipFile, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Arrays x and y of an .npz archive, their dtypes and shapes checked first."""
    members = {name.removesuffix(".npy"): name for name in archive.namelist()
               if name.endswith(".npy")}
    missing = {"x", "y"} - set(members)
    if missing:
        raise InputError(f"{where}: no array {' or '.join(sorted(missing))!r} "
                         f"(it has: {', '.join(members) or 'none'})")
    shapes = {}
    for name in ("x", "y"):
        with archive.open(members[name]) as member:
            shapes[name], dtype = _array_header(member)
        _check_dtype(name, dtype, where)
    _check_shapes(shapes["x"], shapes["y"], where)
    arrays = []
    for name in ("x", "y"):
        with archive.open(members[name]) as member:
            arrays.append(np.lib.format.read_array(member, allow_pickle=False))
    return arrays[0], arrays[1]


def _array_header(member: IO[bytes]) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype an .npy member declares, read without its data; ValueError when
    the header cannot be read (an unclosed '{' raised tokenize.TokenError, a traceback)."""
    version = np.lib.format.read_magic(member)
    if version == (1, 0):
        read = np.lib.format.read_array_header_1_0
    elif version == (2, 0):
        read = np.lib.format.read_array_header_2_0
    else:
        raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
    try:
        shape, _, dtype = read(member)
    except NPY_FORMAT_ERRORS:
        raise ValueError(f"the header of {member.name} cannot be read") from None
    return shape, dtype


def _check_dtype(name: str, dtype: np.dtype, where: str) -> None:
    """Integers and reals only, as `ltvm linalg` takes: complex values would lose their
    imaginary part, booleans, strings and objects are no data to fit."""
    if dtype.kind not in "iuf":
        raise InputError(f"{where}: {name} must be a real numeric array (integers or floats), "
                         f"got dtype {dtype}")


def _check_shapes(x_shape: tuple[int, ...], y_shape: tuple[int, ...], where: str) -> None:
    """n x d (or n) arrays with the same n >= 1, within what any network's program can hold:
    block size d <= MAX_BLOCK, and at most MAX_COLUMNS samples (each takes columns)."""
    if not (1 <= len(x_shape) <= 2 and 1 <= len(y_shape) <= 2 and x_shape[0] == y_shape[0]
            and x_shape[0] >= 1):
        raise InputError(f"{where}: x must be n x d_in and y n x d_out with the same n >= 1, "
                         f"got {x_shape} and {y_shape}")
    for name, shape in (("x", x_shape), ("y", y_shape)):
        width = shape[1] if len(shape) == 2 else 1
        if not 1 <= width <= MAX_BLOCK:
            raise InputError(f"{where}: {name} has {width} columns; 1 to {MAX_BLOCK} fit the "
                             f"largest block size d = {MAX_BLOCK}")
    if x_shape[0] > MAX_COLUMNS:
        raise InputError(f"{where}: {x_shape[0]:,} samples; the transformer's "
                         f"{MAX_COLUMNS:,} columns hold fewer (each sample takes several)")


def check_dataset(x: np.ndarray, y: np.ndarray, where: str = "data") -> tuple[np.ndarray,
                                                                              np.ndarray]:
    """x and y as n x d float arrays, or InputError: real, finite, the same n, sizes that
    `_check_shapes` allows."""
    try:
        x, y = np.asarray(x), np.asarray(y)
    except ValueError as error:  # rows of different lengths: numpy's 'inhomogeneous shape'
        raise InputError(f"{where}: x and y must be n x d arrays of numbers ({error})"
                         ) from None
    _check_dtype("x", x.dtype, where)
    _check_dtype("y", y.dtype, where)
    _check_shapes(x.shape, y.shape, where)
    if x.ndim == 1:
        x = x[:, None]
    if y.ndim == 1:
        y = y[:, None]
    with np.errstate(over="ignore"):  # a float128 1e400 becomes inf, refused below
        x, y = x.astype(float), y.astype(float)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise InputError(f"{where}: x and y must be finite in float64")
    # what the machine holds (assembler.fleq): checked here, the assembler named a line of
    # the generated program ('<ltvm train>:5:5', 'write 0') instead of the data
    for name, values in (("x", x), ("y", y)):
        magnitudes = np.abs(values)
        for bad, why in ((magnitudes > MAGNITUDE,
                          f"beyond 2^{MAGNITUDE_BITS} (about {MAGNITUDE:.3g}), the magnitudes "
                          "the machine keeps exact"),
                         ((magnitudes > 0) & (magnitudes < SMALLEST_NORMAL),
                          f"below {SMALLEST_NORMAL:.3g}, the smallest normal double (the "
                          "machine flushes it to 0)")):
            if bad.any():
                index = tuple(int(i) for i in np.argwhere(bad)[0])
                raise InputError(f"{where}: {name}[{', '.join(map(str, index))}] = "
                                 f"{values[index]:g} is {why}; scale the data")
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
    # SGD diverges on data of a large scale: inf and NaN are results here (the comparison's
    # `overflow` reports them), not warnings for stderr
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(setup.epochs):
            losses = []
            for sample, target in zip(x, y):
                loss, weights = sgd_sample(weights, sample[:, None], target[:, None],
                                           setup.lr, setup.activation)
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


def check_columns(inputs: np.ndarray, y: np.ndarray, setup: TrainingSetup,
                  weights: tuple[np.ndarray, ...]) -> None:
    """Refuse data whose program would not fit the transformer's MAX_COLUMNS before it is
    built (20,000 samples took 54 s to be refused). Every sample adds the same cells and
    instructions, so programs of one and of two samples give the count for n."""
    one, two = (fleq_geometry_for(assemble_training(np.zeros((k, inputs.shape[1])),
                                                    np.zeros((k, y.shape[1])), setup,
                                                    weights)).columns for k in (1, 2))
    n = len(inputs)
    columns = one + (n - 1) * (two - one)
    if columns > MAX_COLUMNS:
        most = 1 + (MAX_COLUMNS - one) // (two - one)
        raise InputError(f"{n:,} samples need {columns:,} columns, more than the transformer's "
                         f"{MAX_COLUMNS:,}: at most {most:,} fit this network (d_in "
                         f"{inputs.shape[1] - setup.bias}{' + 1 bias' if setup.bias else ''}, "
                         f"hidden {setup.hidden}, d_out {y.shape[1]})")


# -- running it -----------------------------------------------------------------------------
def epoch_length(program: FleqProgram) -> int:
    """Instructions in one pass through the epoch loop (each runs exactly once)."""
    return program.labels["done"] - program.labels["epoch"]


def run_config(config: EngineConfig | None, setup: TrainingSetup) -> EngineConfig:
    """`config` in the setup's dtype, the one the program's blocks are built for: a config
    of no dtype ran a float32 setup in float64, and one of float32 ran blocks built for
    float64 in float32 (weights 150 times further from exact SGD than a float32 setup's)."""
    config = config or EngineConfig()
    if config.dtype not in (None, setup.dtype):
        raise InputError(f"the engine's dtype {config.dtype} differs from the training "
                         f"setup's {setup.dtype}; give the dtype in TrainingSetup")
    return replace(config, dtype=setup.dtype)


def run_on_transformer(program: FleqProgram, setup: TrainingSetup,
                       config: EngineConfig | None = None,
                       progress: Callable[[int], None] | None = None,
                       checkpoint: Checkpoint | None = None) -> Trajectory:
    """Run the training program one epoch at a time; read `mean` and the weights after each.
    `checkpoint` is called with the set-up stage about to begin (see `train`)."""
    config = run_config(config, setup)
    checkpoint = checkpoint or no_checkpoint
    executor = TransformerExecutor(fleq_geometry_for(program), config, checkpoint)
    checkpoint("loading the program")
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
        with np.errstate(invalid="ignore"):  # inf - inf after an overflow: NaN, reported
            return [max(float(np.abs(a - b).max()) for a, b in zip(mine, theirs))
                    for mine, theirs in zip(self.transformer.weights, self.exact.weights)]

    @property
    def loss_differences(self) -> list[float]:
        return [abs(a - b) for a, b in zip(self.transformer.losses, self.exact.losses)]

    @property
    def overflow(self) -> str | None:
        """Why some loss or weight is not a finite number (SGD diverged past float's range),
        naming the first epoch where it happened; None when every value is finite."""
        for engine, trajectory in (("exact SGD", self.exact), ("transformer", self.transformer)):
            for epoch, (loss, weights) in enumerate(zip(trajectory.losses, trajectory.weights)):
                if not (np.isfinite(loss) and all(np.isfinite(w).all() for w in weights)):
                    return (f"the {engine}'s loss or weights overflowed (infinite or not a "
                            f"number) in epoch {epoch + 1}: SGD diverges at lr "
                            f"{self.setup.lr:g} on data of this scale (a smaller --lr or "
                            "scaled data)")
        return None


def starting_point(x: np.ndarray, y: np.ndarray, setup: TrainingSetup
                   ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """(inputs with their bias column, targets, initial weights): what the program and exact
    SGD both start from, so a shown program is the one `train` runs; InputError for data
    the program could not hold."""
    x, y = check_dataset(x, y)
    inputs = features(x, setup.bias)
    weights = initial_weights(inputs.shape[1], setup.hidden, y.shape[1], setup.seed)
    check_columns(inputs, y, setup, weights)
    return inputs, y, weights


def train(x: np.ndarray, y: np.ndarray, setup: TrainingSetup,
          config: EngineConfig | None = None,
          progress: Callable[[int], None] | None = None,
          checkpoint: Checkpoint | None = None) -> TrainingComparison:
    """Build the program from the data, run it on the transformer and run exact SGD.
    `checkpoint` is called with the name of each set-up stage before it begins (assembling,
    building the transformer's weights, layers and active evaluation, loading), so a time
    limit can stop a set-up that takes seconds to minutes for thousands of samples;
    `progress` is called during the run."""
    checkpoint = checkpoint or no_checkpoint
    config = run_config(config, setup)
    inputs, y, weights = starting_point(x, y, setup)
    checkpoint("assembling the program")
    program = assemble_training(inputs, y, setup, weights)
    transformer = run_on_transformer(program, setup, config, progress, checkpoint)
    exact = exact_sgd(inputs, y, setup, weights)
    steps = epoch_length(program) * setup.epochs
    return TrainingComparison(setup, transformer, exact, steps, len(program.instructions),
                              first_domain_violation(program, steps, setup.dtype))
