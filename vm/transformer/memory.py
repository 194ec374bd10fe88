"""How much memory a device has free now: runs that would not fit are refused up front,
before their first allocation fails (or the machine swaps)."""

from __future__ import annotations

import torch


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
