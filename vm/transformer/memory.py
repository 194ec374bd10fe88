"""How much memory a device has free now: runs that would not fit are refused up front,
before their first allocation fails (or the machine swaps)."""

from __future__ import annotations

import torch

from vm.common.errors import InputError


def free_memory(device: torch.device) -> int | None:
    """Bytes that can be allocated on `device` now (a CPU: Linux's MemAvailable); None
    where that cannot be read."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def score_bytes(columns: int, itemsize: int, scratch: int | None = None) -> int:
    """Bytes one head's scores and their softmax take at once: n x n under dense attention
    (`scratch` None); under masked attention the scratch queries' over all n keys and the
    other columns' over the scratchpad and themselves (vm/transformer/layers.py `_masked`)."""
    if scratch is None:
        return 2 * columns * columns * itemsize
    return 2 * itemsize * (scratch * columns + (columns - scratch) * (scratch + 1))


def check_dense_memory(columns: int, dtype: torch.dtype, device: str | torch.device,
                       smaller: str = "program") -> None:
    """Dense attention holds a head's n x n scores and their softmax at once: at 65,536
    columns 32 GiB in float32, which the first pass allocated until the machine ran out.
    Refused up front when the memory free now cannot hold them."""
    _refuse_beyond_free(score_bytes(columns, dtype.itemsize), device,
                        f"--attention dense at n = {columns:,} columns holds {columns:,} x "
                        f"{columns:,} scores and their softmax",
                        f"use --attention masked (the default), or a smaller {smaller}")


def check_masked_memory(columns: int, scratch: int, dtype: torch.dtype,
                        device: str | torch.device) -> None:
    """Masked attention's scratch queries score all n keys: `ltvm run --scratch 65000`
    (16.9 GB of float32 scores a head) was killed by the kernel for want of memory, with no
    word. Refused up front when the memory free now cannot hold one head's scores."""
    _refuse_beyond_free(score_bytes(columns, dtype.itemsize, scratch), device,
                        f"{scratch:,} scratch columns at n = {columns:,} hold {scratch:,} x "
                        f"{columns:,} scores and their softmax",
                        "use fewer scratch columns (--scratch)")


def _refuse_beyond_free(needed: int, device: str | torch.device, holding: str,
                        advice: str) -> None:
    """InputError when `needed` bytes exceed the memory free on `device` now."""
    where = torch.device(device)
    free = free_memory(where)
    if free is not None and needed > free:
        raise InputError(f"{holding}, about {needed / 2 ** 30:.1f} GiB, more than the "
                         f"{free / 2 ** 30:.1f} GiB free on {where.type}: {advice}")
