"""The torch devices a machine may run on, checked before any work; apart from `layers` so
that checking a command line's device (`EngineConfig`) does not import torch for the CPU."""

from __future__ import annotations

from vm.common.errors import InputError


def check_device(name: str) -> None:
    """Refuse, before any work, a device torch does not know or that cannot run the machine:
    only the CPU and present CUDA devices hold real tensors. Imports torch only for a device
    other than "cpu"."""
    if name == "cpu":
        return
    import torch
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise InputError(f"unknown device {name!r} (expected cpu, cuda or cuda:N)") from None
    if device.type not in ("cpu", "cuda"):
        raise InputError(f"device {name!r} cannot run the machine (expected cpu, cuda or "
                         f"cuda:N)")
    if device.type == "cpu" and device.index not in (None, 0):
        raise InputError(f"device {name!r}: there is one CPU device (expected cpu, cuda or "
                         f"cuda:N)")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"device {name!r} requested but no CUDA device is available")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            present = ("is 1 CUDA device (cuda:0)" if count == 1 else
                       f"are {count} CUDA devices (cuda:0 to cuda:{count - 1})")
            raise InputError(f"device {name!r}: there {present}")
