"""Running the large transformer with attention computed only by oracle calls.

Layer by layer (Corollary 3.2), every head of the layer is planned by the variant that
matches the mask, the parts of all heads go through one oracle of length M with H' heads
and L' layers (Lemma 3.3), and the heads' combined outputs are concatenated into the next
layer's input. The oracle counts the calls.

Total oracle calls: L * ceil(H * S / (H' L')), S the variant's steps per head and layer:

    exact    2 T^2,  T = ceil(N / (M - 1))
    causal   2 T^2
    window   2 + 4 ceil((N - r) / (M - r))
    sink     2 + 4 ceil((N - r - s) / (M - r)) + 2 ceil((N - r - s) / (M - s - 1))
    sampled  2 T
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import ceil
from types import ModuleType

import torch
from torch import Tensor

from vm.attention.chunked import MODES, causal, exact, sampled, window
from vm.attention.chunked.model import LargeTransformer, Mask
from vm.attention.chunked.oracle import AttentionOracle
from vm.attention.chunked.scheduler import LayerScheduler
from vm.common.errors import InputError

_VARIANTS: dict[str, ModuleType] = {
    "exact": exact, "causal": causal, "window": window, "sink": window, "sampled": sampled,
}
_MASK_KINDS = {"exact": "none", "sampled": "none", "causal": "causal", "window": "window",
               "sink": "sink"}
SCORE_BUDGET_BYTES = 8 * 2 ** 20
"""Bytes of score matrices per oracle batch: how many calls are evaluated together."""


def _known_mode(mode: str) -> None:
    if mode not in MODES:
        raise InputError(f"unknown attention mode '{mode}' (choose from {', '.join(MODES)})")


def mode_mask(mode: str, window_size: int = 0, sinks: int = 0) -> Mask:
    """The mask of the large transformer that a mode simulates."""
    _known_mode(mode)
    if mode in ("window", "sink"):
        return Mask(_MASK_KINDS[mode], window=window_size, sinks=sinks if mode == "sink" else 0)
    return Mask(_MASK_KINDS[mode])


def check_sizes(mode: str, n: int, max_length: int, mask: Mask, oracle_heads: int = 1,
                oracle_layers: int = 1) -> None:
    """Raise InputError unless the variant can run with these sizes."""
    _known_mode(mode)
    for name, value in (("the sequence length N", n), ("the oracle length M", max_length),
                        ("the oracle heads", oracle_heads), ("the oracle layers", oracle_layers)):
        if not isinstance(value, int):  # M = 8.5 failed as a tensor index, H' = 1.5 in a reshape
            raise InputError(f"{name} must be a whole number, got {value!r}")
    if n < 1 or max_length < 1:
        raise InputError(f"sizes must be positive: N={n}, M={max_length}")
    if max_length > n:
        raise InputError(f"oracle length M={max_length} exceeds the sequence length N={n}")
    if max_length < 2:
        raise InputError("oracle length M must be at least 2 (a block and the synthetic token)")
    if oracle_heads < 1 or oracle_layers < 1:
        raise InputError("oracle heads and layers must be positive")
    if mode in ("window", "sink") and mask.window < 1:
        raise InputError(f"window size must be positive, got {mask.window}")
    if mode == "sink" and mask.sinks < 1:
        raise InputError(f"number of sinks must be positive, got {mask.sinks}")
    if mode in ("window", "sink") and max_length < mask.window + mask.sinks + 1:
        raise InputError(f"oracle length M={max_length} must exceed window + sinks = "
                         f"{mask.window + mask.sinks}")


def expected_calls(mode: str, n: int, max_length: int, heads: int, layers: int,
                   oracle_heads: int = 1, oracle_layers: int = 1, window_size: int = 0,
                   sinks: int = 0) -> int:
    """The exact number of oracle calls of `simulate` (module docstring)."""
    mask = mode_mask(mode, window_size, sinks)
    check_sizes(mode, n, max_length, mask, oracle_heads, oracle_layers)
    steps = _VARIANTS[mode].steps_per_head(n, max_length, mask)
    return layers * ceil(heads * steps / (oracle_heads * oracle_layers))


@dataclass(frozen=True)
class SimulationResult:
    """The simulated output, the log normalizers (layers x heads x N) and the cost."""

    output: Tensor
    log_normalizers: Tensor
    calls: int
    expected_calls: int
    amplification: float


def simulate(model: LargeTransformer, x: Tensor, mode: str, max_length: int,
             oracle_heads: int = 1, oracle_layers: int = 1, seed: int = 0,
             progress: Callable[[int], None] | None = None) -> SimulationResult:
    """Evaluate `model` on `x` (N x H*m) with attention only from an oracle of length M.

    `mode` must match the model's mask ("exact" and "sampled" for no mask); "sampled" is
    the randomized estimator of Theorem 4.1, seeded by `seed`. `progress` is told the
    oracle calls made after each call.
    """
    dtype = model.layers[0][0].query.dtype
    if x.ndim != 2 or x.dtype != dtype:  # a float32 x for float64 weights failed in a matmul
        raise InputError(f"x must be a matrix of the model's dtype {dtype}, got "
                         f"{x.ndim} dimensions of {x.dtype}")
    if not bool(torch.isfinite(x).all()):  # NaN was reported as scores too far from 0
        raise InputError("x has entries that are not finite")
    n = x.shape[0]
    mask = model.mask
    if mode_mask(mode, mask.window, mask.sinks) != mask:
        raise InputError(f"mode '{mode}' does not simulate a '{mask.kind}' mask")
    check_sizes(mode, n, max_length, mask, oracle_heads, oracle_layers)
    if x.shape[1] != model.dim:
        raise InputError(f"input has {x.shape[1]} columns, the model expects {model.dim}")
    variant = _VARIANTS[mode]
    oracle = AttentionOracle(max_length, heads=oracle_heads, layers=oracle_layers,
                             causal=variant.CAUSAL_ORACLE)
    oracle.progress = progress
    generator = torch.Generator().manual_seed(seed)
    itemsize = torch.finfo(x.dtype).bits // 8
    calls_per_run = max(1, min(4096, SCORE_BUDGET_BYTES // (itemsize * max_length ** 2)))
    amplification = 1.0
    log_normalizers = []
    for layer in model.layers:
        x_heads = torch.stack([model.head_input(x, h) for h in range(len(layer))])
        scheduler = LayerScheduler(x_heads, layer, oracle, calls_per_run)
        scheduler.run(batch for h in range(len(layer))
                      for batch in variant.plan_head(n, max_length, mask, generator, h))
        amplification = max(amplification, scheduler.amplification)
        results = [combiner.result() for combiner in scheduler.combiners]
        x = torch.cat([out for out, _ in results], dim=1)
        log_normalizers.append(torch.stack([lse for _, lse in results]))
    expected = expected_calls(mode, n, max_length, model.heads, len(model.layers),
                              oracle_heads, oracle_layers, mask.window, mask.sinks)
    return SimulationResult(output=x, log_normalizers=torch.stack(log_normalizers),
                            calls=oracle.calls, expected_calls=expected,
                            amplification=amplification)
