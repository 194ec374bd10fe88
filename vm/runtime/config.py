"""How the transformer runs (`EngineConfig`) and the names the command line offers for it.

Kept apart from the executor so that whatever only describes a run (the command line's
options, the instruction sets, reference-engine runs) does not import torch or numba,
which cost seconds at start; the executor re-exports everything here.
"""

from __future__ import annotations

from dataclasses import dataclass

from vm.common.errors import InputError
from vm.common.limits import is_whole_number
from vm.common.limits import check_temperature, check_threads
from vm.transformer.devices import check_device
from vm.transformer.modes import ATTENTION_MODES

DTYPE_NAMES = ("float32", "float64")


def check_dtype_name(dtype: object) -> str:
    """`dtype` when it is one of DTYPE_NAMES, else InputError naming them (each caller had
    written the same check: None was a KeyError deep in a block's set-up, 'float16' cast
    operands to inf, 'Float32' assembled float64's block parameters)."""
    if dtype not in DTYPE_NAMES:
        raise InputError(f"dtype must be one of {', '.join(DTYPE_NAMES)}, got {dtype!r:.40}")
    return dtype


DEFAULT_CHECK_EVERY = 16
FUSED_CHECK_EVERY = 128
"""Fused runs learn whether everything halted every this many passes: a fused pass costs
microseconds, so the window's own host work (step counts, the halting test) would
otherwise cost a quarter of it. Passes after a halt are no-ops at EOF and not counted."""
FUSED_SOLO_WINDOW = 2048
"""The longest window of a fused run of one program on the CPU (`Runner._grow_window`)."""
MAX_CHECK_EVERY = 1 << 16
"""The longest window between halting tests: each run allocates a record of this many
passes' program counters up front (check_every = 10**12 asked for terabytes)."""
EVALUATIONS = ("auto", "fused", "active", "full")
AUTO_ACTIVE_CELLS = 512
"""Without numba, `auto` evaluates a run on the active columns (torch) when batch x n
reaches this: below it the full pass's few large operations beat the active pass's many
small ones (`ltvm bench --evaluation active|full`: on 2 CPU cores at batch 1, n = 256 ran
1,385 steps/s in full against 1,183 active; n = 1024 ran 544 against 1,256; n = 64 at
batch 16, 9,885 against 16,700). With numba, `auto` is `fused` at every size."""


@dataclass(frozen=True)
class EngineConfig:
    """How the transformer runs: none of this changes the weights except temperature.

    `checked`: None (default) turns the checked mode on exactly when the
    temperature is below the provably safe one (`temperature_is_safe`), so no
    default run can return a wrong number silently; True always checks; False
    never does, an explicit opt-out for studying how runs fail.
    """

    dtype: str | None = None
    """None: the machine's default (float32 for SUBLEQ, float64 for FLEQ)."""
    device: str = "cpu"
    attention: str = "masked"
    temperature: float | None = None
    checked: bool | None = None
    check_every: int = DEFAULT_CHECK_EVERY
    threads: int | None = None
    sampling: float | None = None
    """Temperature of stochastic reads (vm/transformer/sampling.py); None: exact runs."""
    seed: int = 0
    """Seed of the stochastic reads' noise: the same seed gives the same samples."""
    evaluation: str = "auto"
    """"active": runs compute only the columns a pass can change (vm/runtime/active.py),
    bit-identical to "full", the definition, which they fall back to pass by pass when the
    guard fails and which checked runs, single steps and machines the active evaluator does
    not support use; "fused": the active pass compiled into one call, falling back to
    "active" pass by pass: with numba on the CPU (vm/runtime/fused.py), as CUDA graphs on a
    GPU (vm/runtime/graphed.py); "auto": fused where it is available (a GPU, or numba
    installed), else active from AUTO_ACTIVE_CELLS batch x columns on (on the CPU)."""

    def __post_init__(self) -> None:
        self._check_types()
        if self.dtype is not None:
            check_dtype_name(self.dtype)
        if self.attention not in ATTENTION_MODES:
            raise InputError(f"attention must be one of {', '.join(ATTENTION_MODES)}")
        if self.evaluation not in EVALUATIONS:
            raise InputError(f"evaluation must be one of {', '.join(EVALUATIONS)}")
        if (self.evaluation == "fused" and not self.device.startswith("cuda")
                and not _fused_available()):
            raise InputError("evaluation 'fused' needs numba: pip install 'ltvm[fast]'")
        if self.temperature is not None:  # a Python float, as threads and seed are ints
            object.__setattr__(self, "temperature", float(check_temperature(self.temperature)))
        if not 1 <= self.check_every <= MAX_CHECK_EVERY:
            raise InputError(f"check_every must be between 1 and {MAX_CHECK_EVERY}, got "
                             f"{self.check_every}")
        if self.sampling is not None:  # lam * 1e40 overflowed float32: NaN reads, answer 0
            sampling = check_temperature(self.sampling, "sampling temperature")
            # a Fraction failed in torch: "unsupported operand type(s) for *: 'Tensor'"
            object.__setattr__(self, "sampling", float(sampling))
        if self.threads is not None:
            check_threads(self.threads)
        check_device(self.device)

    def _check_types(self) -> None:
        """Refuse a field of the wrong type here, naming it: a string temperature or thread
        count failed deep in math or torch, and 2.5 threads or a float seed only once a run
        started (temperature and sampling: `check_temperature`)."""
        for name in ("check_every", "seed", "threads"):
            value = getattr(self, name)
            if not (is_whole_number(value) or value is None and name == "threads"):
                raise InputError(f"{name} must be an integer, got {value!r}")
            if value is not None:  # torch's manual_seed refused a numpy seed: a TypeError
                object.__setattr__(self, name, int(value))
        for name in ("dtype", "device", "attention", "evaluation"):
            value = getattr(self, name)
            if not (isinstance(value, str) or value is None and name == "dtype"):
                raise InputError(f"{name} must be a string, got {value!r}")
        if self.checked is not None and not isinstance(self.checked, bool):  # 1 == True
            raise InputError(f"checked must be None, True or False, got {self.checked!r}")
        if not -2**63 <= self.seed < 2**64:  # torch's generators take no other seed
            raise InputError(f"seed must be between -2^63 and 2^64 - 1, got {self.seed}")


def _fused_available() -> bool:
    """Whether numba is installed; imported only when a run asks for fused passes."""
    from vm.runtime.fused import available
    return available()


def check_config(config: object) -> EngineConfig:
    """`config` if it is an EngineConfig, else InputError naming what it is: every entry point
    that takes one checks it here, where a dict or None failed on its first attribute
    (`.dtype`, `.sampling`, `.temperature`) deep in a run."""
    if not isinstance(config, EngineConfig):
        raise InputError(f"config must be an EngineConfig, got {type(config).__name__}")
    return config
