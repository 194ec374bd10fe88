"""Runs punchcards through the looped transformer: X <- TF(X) until EOF.

A batch of punchcards of one geometry runs at once. Each pass counts, on the
device, which programs had not yet reached EOF (EOF jumps to itself and
changes nothing, so finished programs can keep looping); the host looks at
that only every `check_every` passes, so the loop does not sync each step.

The checked mode observes every sublayer (it never changes X) and raises a
`PrecisionError` as soon as a read lands outside its tolerance band around its exact
levels, or a pass leaves a state field off its ±1/0 pattern: a temperature
or dtype that is not enough is reported, never returned as a wrong number.
"""

from __future__ import annotations

import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from assembler.program import Program
from assembler.fleq_program import FleqProgram
from vm.common.cache import BuildCache, Checkpoint, no_checkpoint
from vm.common.encoding import pm1_code
from vm.common.errors import (NOT_COMPILED, InputError, MagnitudeError, NotCompiledWarning,
                              PrecisionError)
from vm.common.limits import check_callback, is_whole_number
from vm.common.geometry import Geometry
from vm.common.signatures import MAGNITUDE, MAGNITUDE_BITS
from vm.transformer.layers import (LayerTrace, LoopedTransformer, flush_denormals,
                                   from_internal, to_internal, trace_pass)
from vm.transformer.layout import Layout
from vm.transformer.sampling import ReadNoise
from vm.transformer import memory as device_memory
from vm.transformer.threads import TRY_PASSES, MeasuredThreads, cpu_threads
from vm.transformer.weights import MachineWeights
from vm.machines import BUILDERS, machine_for
from vm.machines.subleq.machine import STATE_TOLERANCE
from vm.machines.subleq.reference import RunResult
from vm.machines.stepping import DEFAULT_MAX_STEPS, check_max_steps, check_progress
from vm.machines.fleq.layout import FleqGeometry
from vm.machines.vsubleq.layout import VGeometry
from vm.runtime.active import ActiveEvaluator
from vm.runtime.active_fleq import FleqActiveEvaluator
from vm.runtime.config import (AUTO_ACTIVE_CELLS, FUSED_CHECK_EVERY, FUSED_SOLO_WINDOW,
                               EngineConfig, check_config)
from vm.runtime.fused import FusedPass
from vm.runtime.fused import thread_count as fused_thread_count
from vm.runtime.graphed import FleqGraphedPasses, GraphedPasses

DTYPES = {"float32": torch.float32, "float64": torch.float64}
"""The torch dtype of each of `vm.runtime.config.DTYPE_NAMES`."""


@BuildCache
def _model(geometry: Geometry, temperature: float | None, dtype: str, device: str,
           attention: str, checkpoint: Checkpoint | None = None) -> LoopedTransformer:
    machine = machine_for(geometry, temperature)
    gates = (tuple(machine.layout.row(f"gblock{i}") for i in range(len(geometry.blocks)))
             if isinstance(geometry, FleqGeometry) else ())
    return LoopedTransformer(machine.weights, DTYPES[dtype], device, attention, geometry.scratch,
                             gates, checkpoint)


@BuildCache
def _active(geometry: Geometry, temperature: float | None, dtype: str, device: str,
            attention: str, compiles: bool, checkpoint: Checkpoint | None = None
            ) -> ActiveEvaluator | FleqActiveEvaluator:
    """The machine's active evaluation; `compiles`: whether its fused form may compile
    its kernels on first use (`--evaluation fused`) or only use them once compiled
    (the default); `checkpoint`: called during the FLEQ evaluator's checks."""
    machine = machine_for(geometry, temperature)
    if isinstance(geometry, FleqGeometry):
        fleq = FleqActiveEvaluator(_model(geometry, temperature, dtype, device, attention),
                                   machine.weights, machine.layout, geometry, dtype,
                                   machine.moves_are_exact(dtype), checkpoint)
        if fleq.unsupported is None and torch.device(device).type == "cuda":
            fleq.fused = FleqGraphedPasses(fleq)
        return fleq
    evaluator = ActiveEvaluator(_model(geometry, temperature, dtype, device, attention),
                                machine.weights, machine.layout, geometry.scratch,
                                machine.real_fields)
    evaluator.fused = _compiled(evaluator, machine.weights, compiles)
    return evaluator


def _compiled(evaluator: ActiveEvaluator, weights: MachineWeights,
              compiles: bool) -> FusedPass | GraphedPasses | None:
    """The compiled form of the evaluator's pass: CUDA graphs on a GPU, numba on the CPU
    (compiling its kernels on first use only where `compiles`); None where it has none
    (numba missing, a machine the form declines)."""
    if evaluator.device.type == "cuda":
        form: FusedPass | GraphedPasses = GraphedPasses(evaluator)
    else:
        form = FusedPass(evaluator, weights, compiles)
    return form if form.unsupported is None else None


def evaluator_for(model: LoopedTransformer, weights: MachineWeights, layout: Layout,
                  scratch: int, evaluation: str) -> ActiveEvaluator | None:
    """The active evaluation (fused where numba runs, CUDA graphs on a GPU) of a machine run
    outside the executor (standard SUBLEQ images), or None for the full pass: `full`, or a
    machine the evaluator declines."""
    if evaluation == "full":
        return None
    evaluator = ActiveEvaluator(model, weights, layout, scratch)
    if evaluator.unsupported is not None:
        return None
    if evaluation in ("auto", "fused"):
        evaluator.fused = _compiled(evaluator, weights, evaluation == "fused")
    return evaluator


def check_pass_number(step: int) -> int:
    """`step` as an int when it is a whole number, 0 or more: the number a pass has in its
    run, which the checked mode's errors name (1.5, True or -3 were taken and printed)."""
    if not is_whole_number(step) or step < 0:
        raise InputError(f"step must be the pass's number in its run, a whole number 0 or "
                         f"more, got {step!r:.40}")
    return int(step)


@dataclass
class BatchRun:
    """The state after a batched run: X, steps executed and halted flags per program."""

    X: torch.Tensor
    steps: np.ndarray
    halted: np.ndarray


class TransformerExecutor:
    """One geometry's looped transformer, ready to run batches of programs."""

    def __init__(self, geometry: Geometry, config: EngineConfig = EngineConfig(),
                 checkpoint: Checkpoint | None = None) -> None:
        """`checkpoint` is called with the name of each part of the build before it begins
        (weights, and FLEQ's function blocks and block layers; each layer; each step of the
        active evaluation's checks): together they take tens of seconds on a wide FLEQ
        program, and `ltvm train --max-seconds 3` stopped only after all of them, then 5 s
        past its limit after the longest."""
        check_callback(checkpoint, "checkpoint", "the name of the build's next part")
        checkpoint = checkpoint or no_checkpoint
        check_config(config)
        if type(geometry) not in BUILDERS and not isinstance(geometry, VGeometry):
            # a program or None was told "this command runs SUBLEQ (.sq) and FLEQ programs"
            raise InputError(f"geometry must be a program's geometry (its instruction set's "
                             f"geometry_for(program)), got {type(geometry).__name__}")
        self.geometry, self.config = geometry, config
        checkpoint("building the transformer's weights")
        self.machine = machine_for(geometry, config.temperature, lambda part: checkpoint(
            f"building the transformer's weights ({part})"))
        self.layout = self.machine.layout
        self.dtype_name = config.dtype or self.machine.default_dtype
        checkpoint("building the transformer's layers")
        self.model = _model(geometry, config.temperature, self.dtype_name, config.device,
                            config.attention, checkpoint=lambda part: checkpoint(
                                f"building the transformer's layers ({part})"))
        self.checked = (not self.machine.temperature_is_safe(self.dtype_name)
                        if config.checked is None else config.checked)
        if self.checked:
            self.machine.check_exact_moves(self.dtype_name)
        self.active: ActiveEvaluator | FleqActiveEvaluator | None = None
        if config.evaluation != "full" and not self.checked:
            # FLEQ has no numba form (its GPU graphs capture in moments): one evaluator
            compiles = config.evaluation == "fused" and not isinstance(geometry, FleqGeometry)
            checkpoint("preparing the transformer's active evaluation")
            active = _active(geometry, config.temperature, self.dtype_name, config.device,
                             config.attention, compiles, checkpoint=lambda part: checkpoint(
                                 f"preparing the transformer's active evaluation ({part})"))
            self.active = active if active.unsupported is None else None
        self.fallbacks = 0
        """Passes of the last `run` that the active evaluation ran in full."""
        device = torch.device(config.device)
        self.device = torch.device("cpu") if device.type == "cpu" else device  # cpu:0 is cpu
        self.dtype = DTYPES[self.dtype_name]
        self._pc_rows = self.layout["pc"]
        eof = pm1_code(geometry.eof_column, geometry.pos_bits)
        self._eof = torch.as_tensor(eof, dtype=self.dtype, device=self.device)[:, None]

    def load(self, programs: list[Program]) -> torch.Tensor:
        """Punchcards of programs of this geometry as one (batch, rows, n) tensor."""
        if not isinstance(programs, (list, tuple)) or not programs:
            raise InputError(f"load takes a non-empty list of programs, got {programs!r:.80}")
        self.check_memory(len(programs))
        for program in programs:
            self.machine.check_program(program, self.dtype_name)
        cards = np.empty((len(programs), self.layout.rows, self.layout.columns))
        for card, program in zip(cards, programs):  # np.stack of a list held them twice
            card[...] = self.machine.encode(program)
        return self.load_punchcards(cards)

    def check_memory(self, batch: int) -> None:
        """Refuse, before any work, a batch whose run cannot fit in the memory free now: it
        would otherwise swap for minutes or end in the allocator's traceback."""
        needs = self.memory_needed(batch)  # checks the batch
        n = self.layout.columns
        if self.config.attention == "dense":
            device_memory.check_dense_memory(n, self.dtype, self.device)
        else:
            device_memory.check_masked_memory(n, self.model.scratch, self.dtype, self.device)
        for needed, where in needs:
            free = device_memory.free_memory(where)
            if free is not None and needed > free:
                raise InputError(f"a batch of {batch} programs at n = {n} needs about "
                                 f"{needed / 2**30:.1f} GiB on {where.type}, more than the "
                                 f"{free / 2**30:.1f} GiB free there: run fewer programs at "
                                 "once")

    @staticmethod
    def _check_batch(batch: int) -> None:
        """-5 needed negative bytes and passed check_memory; 1.5 was half a program's bytes
        and None a TypeError in memory_needed."""
        if not is_whole_number(batch) or batch < 1:
            raise InputError(f"batch must be a whole number of programs, 1 or more, got "
                             f"{batch!r:.40}")

    def memory_needed(self, batch: int) -> list[tuple[int, torch.device]]:
        """Bytes a run of `batch` programs keeps, by device: the host's float64 punchcards,
        X, its internal copy and the initial state the checks compare with, the active
        evaluation's projection cache (twice on a GPU, whose graphs copy it aside), and the
        fused pass's undo log, 8-bit score mirror and workspace (a batch of 60,000 at n = 64
        was estimated at 8.2 GiB without them and peaked at 12.7 GB)."""
        self._check_batch(batch)
        rows, n = self.layout.rows, self.layout.columns
        size = self.dtype.itemsize
        device = rows * n * 3 * size
        if isinstance(self.active, ActiveEvaluator):
            width = self.active.width
            device += width * n * size * (2 if self.device.type == "cuda" else 1)
            if isinstance(self.active.fused, FusedPass):
                device += self.active.fused.program_bytes(rows, n, size)
        cards = rows * n * 8
        if self.device.type == "cuda":
            return [(cards * batch, torch.device("cpu")), (device * batch, self.device)]
        return [((cards + device) * batch, self.device)]

    def load_punchcards(self, cards: np.ndarray) -> torch.Tensor:
        """Punchcards (rows, n) or (batch, rows, n) as X. Refused: complex cards (float64
        dropped their imaginary part), bool ones (True and False ran as 1 and 0: no card
        holds truth values) and NaN or inf, on which every read is NaN and the run "halted"
        with made-up memory."""
        if np.iscomplexobj(cards):
            raise InputError("punchcards must be real, got complex values")
        if getattr(cards, "dtype", None) in (np.bool_, torch.bool):
            raise InputError("punchcards must be real numbers, got a bool array")
        try:  # None became NaN, an object a TypeError
            cards = np.asarray(cards, dtype=np.float64) if cards is not None else None
        except (TypeError, ValueError):
            cards = None
        if cards is None:
            raise InputError("punchcards must be an array of numbers (rows, n) or "
                             "(batch, rows, n)")
        if not np.isfinite(cards).all():
            raise InputError("punchcards must be finite: they hold NaN or inf")
        expected = (self.layout.rows, self.layout.columns)
        if cards.ndim not in (2, 3) or cards.shape[-2:] != expected:  # a 1-D one was "shape ()"
            raise InputError(f"punchcards have shape {cards.shape}, this geometry needs "
                             f"{expected} or (batch, {expected[0]}, {expected[1]})")
        if cards.ndim == 2:
            cards = cards[None]
        if len(cards) == 0:  # a batch of none ran no program and "finished"
            raise InputError("punchcards: the batch is empty (0 cards)")
        if (np.abs(cards[:, self._pc_rows, 0]) < 0.5).any():  # all-zero cards "halted" at pc -5
            raise InputError("punchcards must hold a program counter (±1 in column 0 of the pc "
                             "rows): load() or the machine's encode makes them")
        X = torch.as_tensor(cards, dtype=self.dtype, device=self.device)
        if not bool(torch.isfinite(X).all()):  # 1e308 became inf in float32 and ran
            raise InputError(f"punchcards hold values past {self.dtype}'s range (its largest "
                             f"is {torch.finfo(self.dtype).max:.4g})")
        return X

    def check_state(self, X: torch.Tensor, name: str = "X") -> None:
        """Refuse at the boundary a state this executor cannot run as given: not a tensor,
        another geometry's shape, another dtype or device (they failed deep in torch, or a
        restart rounded float64 to float16 silently), or NaN or inf in it."""
        if not isinstance(X, torch.Tensor):
            raise InputError(f"{name} must be a torch tensor (batch, rows, n), got "
                             f"{type(X).__name__}: load() or load_punchcards() makes one")
        self._check_shape(X, name)
        if X.dtype != self.dtype:
            raise InputError(f"{name} has dtype {X.dtype}, this executor runs {self.dtype}")
        if X.device.type != self.device.type or (self.device.index is not None
                                                 and X.device.index != self.device.index):
            raise InputError(f"{name} is on {X.device}, this executor runs on {self.device}")
        if not bool(torch.isfinite(X).all()):
            raise InputError(f"{name} must be finite: it holds NaN or inf")

    def _check_shape(self, X: torch.Tensor, name: str) -> None:
        expected = (self.layout.rows, self.layout.columns)
        if not isinstance(X, torch.Tensor):  # decode(numpy array) failed on `.double`
            raise InputError(f"{name} must be a torch tensor (batch, {expected[0]}, "
                             f"{expected[1]}), got {type(X).__name__}")
        if X.ndim != 3 or tuple(X.shape[1:]) != expected:
            raise InputError(f"{name} has shape {tuple(X.shape)}, this geometry needs "
                             f"(batch, {expected[0]}, {expected[1]})")
        if X.shape[0] == 0:  # run() of X[:0] ran no program and "finished", as load refuses
            raise InputError(f"{name}: the batch is empty (0 punchcards)")

    def _numpy(self, X: torch.Tensor) -> np.ndarray:
        with self._threads(X):
            return X.double().cpu().numpy()

    def _threads(self, X: torch.Tensor):
        if self.device.type != "cpu":
            return nullcontext()
        return cpu_threads(self.model.multiply_adds(X.shape[0]), self.config.threads)

    def running(self, pcs: torch.Tensor) -> torch.Tensor:
        """For program-counter codes (..., B, batch): not yet at EOF? (on device) Anything
        but a tensor is refused by name (None failed in torch's multiplication); only this
        check, as the run loop calls it."""
        if not isinstance(pcs, torch.Tensor):
            raise InputError(f"running takes the program-counter codes as a torch tensor, got "
                             f"{type(pcs).__name__}")
        return (pcs * self._eof < 0).any(dim=-2)

    def step(self, X: torch.Tensor, step: int = 0) -> torch.Tensor:
        """One pass of TF on (batch, rows, n); returns the new X. Checked if configured.
        Exact only: a sampling config is refused (it was ignored, so run_traced and
        compare_fleq of a sampling config reported an exact run as a sampled one)."""
        if self.config.sampling is not None:
            raise InputError("sampling runs go through run() or runner(); step() (run_traced, "
                             "compare_fleq, the REPL) makes exact passes only")
        step = check_pass_number(step)
        self.check_state(X)
        with torch.inference_mode(), flush_denormals(), self._threads(X):
            internal = to_internal(X)
            self._step_(internal, step)
        return _ordinary(from_internal(internal))

    def trace(self, X: torch.Tensor, step: int = 0) -> list[LayerTrace]:
        """One exact pass on a single punchcard X (rows, n), every layer recorded for
        pictures, and checked as pass `step` if this executor checks: its pictures are not
        drawn when the checked mode refuses the pass, which is not run twice for that."""
        step = check_pass_number(step)
        if isinstance(X, torch.Tensor) and X.ndim != 2:  # a batch was named "(1, 1, rows, n)"
            raise InputError(f"trace takes one punchcard X (rows, n), got shape "
                             f"{tuple(X.shape)}: X[0] of a batch")
        self.check_state(X[None] if isinstance(X, torch.Tensor) else X)
        observer = ((lambda layer, stage, Y: self._observe(step, layer, stage, Y))
                    if self.checked else None)
        with flush_denormals(), self._threads(X[None]):
            traces = trace_pass(self.model, X, observer)
            if self.checked:
                self._check_state(step, traces[-1].after[None], X[None])
        return traces

    def _step_(self, X: torch.Tensor, step: int, noise: ReadNoise | None = None,
               initial: torch.Tensor | None = None) -> None:
        """One pass on the internal X, in place; checked against `initial`, the (batch, rows,
        n) state its run started from, or the pass's own input when None. (The executor kept
        the last punchcards it loaded instead: an X it had not loaded failed the checked mode
        with "'NoneType' object is not subscriptable", and one loaded before another batch
        was checked against that batch's instructions.)"""
        if not self.checked:
            self.model.step_(X, noise=noise)
            return
        if initial is None:
            initial = from_internal(X).clone()
        self.model.step_(X, observer=lambda layer, stage, Y: self._observe(step, layer, stage, Y),
                         noise=noise)
        self._check_state(step, from_internal(X), initial)

    def run(self, X: torch.Tensor, max_steps: int,
            progress: Callable[[int], None] | None = None) -> BatchRun:
        """Loop until every program reached EOF or `max_steps` passes were made."""
        runner = self.runner(X)
        runner.advance(max_steps, progress)
        return runner.result()

    def runner(self, X: torch.Tensor) -> "Runner":
        """A run of X (batch, rows, n) that can be advanced in parts, keeping the active
        evaluation's cache between them (`run` is one `advance`)."""
        return Runner(self, X)

    def results(self, run: BatchRun) -> list[RunResult]:
        if not isinstance(run, BatchRun):
            raise InputError(f"results() takes the BatchRun that run() returned, got "
                             f"{type(run).__name__}")
        self._check_shape(run.X, "run.X")
        steps, halted = np.asarray(run.steps), np.asarray(run.halted)
        if (steps.ndim != 1 or not np.issubdtype(steps.dtype, np.integer) or (steps < 0).any()
                or halted.ndim != 1 or halted.dtype != bool):  # None: a TypeError in len()
            raise InputError("run.steps must be a list of step counts (whole numbers, 0 or "
                             "more) and run.halted one of flags (bool), one each a program, "
                             f"got {run.steps!r:.40} and {run.halted!r:.40}")  # 1.5 became 1
        X = self._numpy(run.X)
        if not len(X) == len(steps) == len(halted):  # zip dropped programs in silence
            raise InputError(f"run.X holds {len(X)} programs but run.steps {len(steps)} "
                             f"and run.halted {len(halted)}")
        return [RunResult(*self.machine.decode(card), int(count), bool(flag))
                for card, count, flag in zip(X, steps, halted)]

    def decode(self, X: torch.Tensor) -> list[tuple[list[int], int]]:
        """(memory, pc) of every program in the batch; NaN or inf is refused (it decoded as
        a made-up program counter, e.g. -11)."""
        self._check_shape(X, "X")
        if not bool(torch.isfinite(X).all()):
            raise InputError("X must be finite to decode: it holds NaN or inf")
        cards = self._numpy(X)
        return [self.machine.decode(card) for card in cards]

    # -- checked mode -------------------------------------------------------------
    def _observe(self, step: int, layer: int, stage: str, X: torch.Tensor) -> None:
        for check in self.machine.checks:
            if (check.layer, check.stage) != (layer, stage):
                continue
            columns = self._columns(check.columns)
            values = X[:, self.layout[check.field], columns.start:columns.stop]
            levels = torch.as_tensor(check.levels, dtype=X.dtype, device=X.device)
            distance = (values[..., None] - levels).abs().min(dim=-1).values
            self._raise_if_off(step, layer, check.field, distance, values, columns.start,
                               check.tolerance, f"within {check.tolerance} of "
                               f"{sorted(set(check.levels))}")

    def _check_state(self, step: int, X: torch.Tensor, initial: torch.Tensor) -> None:
        """After a pass: the program counter (and SUBLEQ memory) ±1 on the support it has in
        `initial`, 0 off it; every other state field as in `initial`; every working field 0.
        Real-valued
        fields (FLEQ memory) must be finite and within the machine's magnitude domain."""
        last = len(self.model.layers) - 1
        changing = ("mem", "pc")
        for name in self.machine.real_fields:
            self._raise_if_outside_magnitude(step, name, X[:, self.layout[name]])
        for name in (*self.layout.persistent, *self.layout.working()):
            if name in self.layout.groups or name in self.machine.real_fields:
                continue
            rows = self.layout[name]
            values = X[:, rows]
            if name in changing:
                expected = (initial[:, rows].abs() > 0.5).to(X.dtype)  # ±1 on, ~0 off
                distance = (values.abs() - expected).abs()
                shown = "±1 or 0 (its punchcard pattern)"
            elif name in self.layout.persistent:
                distance = (values - initial[:, rows]).abs()
                shown = "its value on the punchcard"
            else:
                distance, shown = values.abs(), "0 between passes"
            self._raise_if_off(step, last, name, distance, values, 0, STATE_TOLERANCE, shown)

    def _raise_if_outside_magnitude(self, step: int, field: str, values: torch.Tensor) -> None:
        outside = ~torch.isfinite(values) | (values.abs() > MAGNITUDE)
        if not bool(outside.any()):
            return
        index = int(outside.flatten().nonzero()[0])
        batch, _, column = np.unravel_index(index, tuple(values.shape))
        raise MagnitudeError(step, int(column), field, float(values.flatten()[index]),
                             f"|x| <= 2^{MAGNITUDE_BITS}, finite",
                             program=int(batch) if values.shape[0] > 1 else None)

    def _raise_if_off(self, step: int, layer: int, field: str, distance: torch.Tensor,
                      values: torch.Tensor, first_column: int, tolerance: float,
                      expected: str) -> None:
        if float(distance.max()) <= tolerance:
            return
        batch, _, column = np.unravel_index(int(distance.argmax()), tuple(distance.shape))
        value = float(values.flatten()[int(distance.argmax())])
        raise PrecisionError(step, layer, first_column + int(column), field, value, expected,
                             program=int(batch) if distance.shape[0] > 1 else None)

    def _columns(self, name: str) -> range:
        if name == "cpu":
            return range(0, 1)
        return self.layout.regions[name]


SOLO_WINDOW_SECONDS = 0.05
"""A single program's fused window grows only while a window takes less than this: its host
work is then below 1 % of it already, and a wider machine keeps windows short enough for
progress lines and time limits."""


class Runner:
    """One batch's run on one executor, advanced pass by pass.

    Each pass copies the program counters into a small on-device record; every
    `check_every` passes the record is turned into step counts and the host learns
    whether everything halted: one sync per window.
    """

    def __init__(self, executor: TransformerExecutor, X: torch.Tensor) -> None:
        executor.check_state(X)
        self.executor = executor
        self.evaluation = self._evaluation(executor, X.shape[0] * X.shape[2])
        """What this run uses: fused, active or full."""
        self.window = executor.config.check_every
        subleq_fused = (self.evaluation == "fused"
                        and not isinstance(executor.active, FleqActiveEvaluator))
        if subleq_fused:
            self.window = max(self.window, FUSED_CHECK_EVERY)  # FLEQ's graphs sync every pass
        self._first_window = self.window
        self._solo = subleq_fused and X.shape[0] == 1 and executor.device.type == "cpu"
        """A fused run of one program on the CPU, whose window grows (`_grow_window`)."""
        longest = max(self.window, FUSED_SOLO_WINDOW if self._solo else FUSED_CHECK_EVERY)
        with torch.inference_mode():
            self.X = to_internal(X)
            self.record = torch.empty((longest, executor.geometry.pos_bits, self.X.shape[1]),
                                      dtype=executor.dtype, device=executor.device)
            self.steps = torch.zeros(self.X.shape[1], dtype=torch.long, device=executor.device)
        self.initial = X.clone() if executor.checked else None
        """The state the run started from, which checked passes are held to."""
        self.done = 0
        self._pc_rows = np.arange(executor._pc_rows.start, executor._pc_rows.stop)
        config = executor.config
        self.noise = (ReadNoise(config.sampling, config.seed, executor.device)
                      if config.sampling is not None else None)
        """Stochastic reads, for sampling runs (always evaluated in full)."""
        self.active = (executor.active.start(self.X, fused=self.evaluation == "fused")
                       if self.evaluation != "full" else None)
        on_cpu = executor.device.type == "cpu"
        self.torch_threads = MeasuredThreads.for_torch(executor.model.multiply_adds(X.shape[0]),
                                                       config.threads, on_cpu)
        """Torch's thread count for each pass not fused, measured (vm/transformer/threads.py)."""
        self.fused_threads = self._fused_threads(on_cpu and self.evaluation == "fused")
        """The fused pass's thread count for each call, measured likewise."""
        self._passes_differ = (isinstance(executor.active, FleqActiveEvaluator)
                               and self.active is not None and on_cpu)
        """Whether a torch pass's cost depends on the instructions it runs (a FLEQ active
        pass runs only the blocks they select), so that thread tries compare passes of the
        same program counters (`MeasuredThreads.learn`'s kind)."""

    @staticmethod
    def _evaluation(executor: TransformerExecutor, cells: int, fused: bool = True) -> str:
        """The evaluation of a run of `cells` (batch x n), with the fused form if `fused`."""
        wanted, active = executor.config.evaluation, executor.active
        if active is None or executor.config.sampling is not None:
            return "full"
        if wanted in ("fused", "auto") and active.fused is not None and fused:
            return "fused"
        if isinstance(active, FleqActiveEvaluator):
            return "active"
        if wanted == "auto" and cells < AUTO_ACTIVE_CELLS:
            return "full"
        return "active"

    def _without_fused(self) -> None:
        """The default evaluation found the fused pass not compiled (numba's cache is cold):
        the run goes on as it would without numba, and says so (NotCompiledWarning)."""
        self.evaluation = self._evaluation(self.executor, self.X.shape[1] * self.X.shape[2],
                                           fused=False)
        self.window = self.executor.config.check_every  # a halt is seen as soon as before
        if self.evaluation == "full":
            self.active = None
        warnings.warn(NOT_COMPILED, NotCompiledWarning)

    def _fused_threads(self, fused_on_cpu: bool) -> MeasuredThreads:
        """One thread and the fused pass's pool (a thread a core) when a batch could use
        both and no count was asked for, else the one count the fused pass uses (none off
        the CPU)."""
        if not fused_on_cpu:
            return MeasuredThreads(())
        requested, pool = self.executor.config.threads, fused_thread_count(None)
        if requested is None and self.X.shape[1] > 1 and pool > 1:
            return MeasuredThreads((1, pool))
        return MeasuredThreads((min(self.X.shape[1], fused_thread_count(requested)),))

    @property
    def threads(self) -> int:
        """The CPU thread count most of the run's passes used so far, in the part of the
        run (fused calls or torch passes) that made most of them; 0 on a GPU."""
        return max((self.torch_threads, self.fused_threads),
                   key=lambda measured: sum(measured.passes.values())).most_used

    @property
    def fallbacks(self) -> int:
        """Passes so far that the active evaluation had to run in full."""
        return self.active.fallbacks if self.active is not None else 0

    @torch.inference_mode()
    def advance(self, max_steps: int, progress: Callable[[int], None] | None = None) -> None:
        """Up to `max_steps` more passes, fewer when every program reaches EOF first."""
        max_steps = check_max_steps(max_steps)
        check_progress(progress)
        executor, X = self.executor, self.X
        pc, end = executor._pc_rows, self.done + max_steps
        with flush_denormals(), executor._threads(from_internal(X)):
            while self.done < end and bool(executor.running(X[pc, :, 0]).any()):
                started = time.perf_counter()
                passes = min(self.window, end - self.done)
                offset = 0
                while offset < passes:
                    if self.active is not None:
                        offset += self._fused(passes - offset, self.record[offset:passes])
                        if offset == passes:
                            break
                    self.record[offset].copy_(X[pc, :, 0])
                    kind = self.record[offset].numpy().tobytes() if self._passes_differ else None
                    with self.torch_threads.torch_pass(kind):
                        if self.active is not None:
                            self.active.step(self.done + offset)
                        else:
                            if self.noise is not None:
                                self.noise.running = executor.running(X[pc, :, 0])
                            executor._step_(X, self.done + offset, self.noise, self.initial)
                    offset += 1
                    if progress is not None and offset < passes:  # the window's end: below
                        progress(self.done + offset)  # a wide FLEQ pass may take a minute
                self.steps += executor.running(self.record[:passes]).sum(dim=0)
                self.done += passes
                self._grow_window(passes, time.perf_counter() - started)
                if progress is not None:
                    progress(self.done)
        executor.fallbacks = self.fallbacks

    def _grow_window(self, passes: int, seconds: float) -> None:
        """A fused run of one program on the CPU widens its window to a quarter of the passes
        made so far, in whole FUSED_CHECK_EVERY, up to FUSED_SOLO_WINDOW, while a full window
        takes less than SOLO_WINDOW_SECONDS: a window's host work (the halting test, step
        counts, the call) took about 0.3 ms, a fifth of a window of 128 passes at n = 64; a
        run that halts early wastes at most a quarter of its passes on no-op passes at EOF
        (with the first window's 128 as before); and progress and time limits, seen at a
        window's end, still come at least every 2 x SOLO_WINDOW_SECONDS."""
        if (self._solo and self.evaluation == "fused" and passes == self.window
                and seconds < SOLO_WINDOW_SECONDS):
            quarter = self.done // 4 // FUSED_CHECK_EVERY * FUSED_CHECK_EVERY
            self.window = max(self.window, min(FUSED_SOLO_WINDOW, quarter))

    def _fused(self, count: int, record: torch.Tensor) -> int:
        """Up to `count` fused passes, each call at the thread count chosen then and timed (a
        call that tries the other count makes at most TRY_PASSES): the passes made."""
        made = 0
        if not any(self.fused_threads.passes.values()):
            self.fused_threads.try_next()
        while made < count:
            part = min(count - made, TRY_PASSES) if self.fused_threads.trying else count - made
            threads = self.fused_threads.next() or self.executor.config.threads
            start = time.perf_counter()
            done = self.active.fused_steps(part, record[made:made + part], self._pc_rows,
                                           threads)
            if self.active.fused is None and self.evaluation == "fused":
                self._without_fused()
                break
            self.fused_threads.learn(threads, time.perf_counter() - start, done)
            made += done
            if done < part:
                break
        return made

    @torch.inference_mode()
    def restart(self, X: torch.Tensor) -> None:
        """Start the run again from X (batch, rows, n), of the shape it started with, keeping
        what its evaluation compiled for it (a GPU run's CUDA graphs), so that timing
        repeated short runs does not time compiling them again."""
        self.executor.check_state(X)
        if X.shape != from_internal(self.X).shape:
            raise InputError(f"a restart needs X of shape {tuple(from_internal(self.X).shape)}, "
                             f"got {tuple(X.shape)}")
        self.X.copy_(to_internal(X))
        self.initial = X.clone() if self.executor.checked else None
        self.steps.zero_()
        self.done = 0
        if self._solo and self.evaluation == "fused":
            self.window = self._first_window
        if self.active is not None:
            self.active.restart()

    def state(self) -> torch.Tensor:
        """X now, as (batch, rows, n): a copy, which later passes leave as it is (for a batch
        of 1, `.contiguous()` returned a view of the running state)."""
        return _ordinary(from_internal(self.X))

    def result(self) -> BatchRun:
        """The run so far, as copies: an earlier result's X (batch of 1) and step counts
        (every batch on the CPU, where `.numpy()` shared the counters) changed as the run
        went on, and `restart` zeroed them."""
        executor = self.executor
        with torch.inference_mode():
            halted = ~executor.running(self.X[executor._pc_rows, :, 0])
        return BatchRun(self.state(), self.steps.cpu().numpy().copy(), halted.cpu().numpy())


def _ordinary(X: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of X made outside inference mode, so the caller may edit it in
    place (memory between passes): the inference tensors step(), state() and result()
    returned refused that with "Inplace update to inference tensor outside InferenceMode"."""
    with torch.inference_mode(False):
        return X.clone(memory_format=torch.contiguous_format)


def run_transformer(program: Program, geometry: Geometry, max_steps: int = DEFAULT_MAX_STEPS,
                    config: EngineConfig = EngineConfig(),
                    progress: Callable[[int], None] | None = None) -> RunResult:
    """Run one program on the transformer and decode its final memory and pc."""
    executor = TransformerExecutor(geometry, config)
    return executor.results(executor.run(executor.load([program]), max_steps, progress))[0]


def run_traced(program: Program | FleqProgram, geometry: Geometry,
               max_steps: int = DEFAULT_MAX_STEPS, config: EngineConfig = EngineConfig(),
               progress: Callable[[int], None] | None = None) -> RunResult:
    """Run on the transformer decoding every pass, to report what each step did; `progress`
    hears of every step (and may stop the run: --max-seconds)."""
    max_steps = check_max_steps(max_steps)
    check_progress(progress)
    executor = TransformerExecutor(geometry, config)
    X = executor.load([program])
    memory, pc = executor.decode(X)[0]
    trace = []
    while pc != program.eof and len(trace) < max_steps:
        X = executor.step(X, len(trace))
        new_memory, next_pc = executor.decode(X)[0]
        trace.append(executor.machine.step_record(program, len(trace), pc, memory, new_memory,
                                                  next_pc))
        memory, pc = new_memory, next_pc
        if progress is not None:
            progress(len(trace))
    return RunResult(memory, pc, len(trace), pc == program.eof, trace)
