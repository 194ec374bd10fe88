"""vm/transformer/devices.py: a device the machine cannot run on is named as typed, with
what this machine has, before any work."""

from __future__ import annotations

import pytest
import torch

from vm.common.errors import InputError
from vm.transformer.devices import check_device


@pytest.mark.parametrize("count, message", [
    (1, "device 'cuda:1': there is 1 CUDA device (cuda:0)"),
    (2, "device 'cuda:2': there are 2 CUDA devices (cuda:0 to cuda:1)"),
])
def test_a_cuda_index_past_the_devices_present_names_them(monkeypatch, count, message):
    """On a one-GPU machine it said 'there are 1 CUDA devices'."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    with pytest.raises(InputError) as refused:
        check_device(f"cuda:{count}")
    assert str(refused.value) == message


@pytest.mark.parametrize("name, message", [
    ("mps", "cannot run the machine"),
    ("cpu:1", "there is one CPU device"),
    ("bogus", "unknown device 'bogus'"),
])
def test_other_devices_are_refused(name, message):
    with pytest.raises(InputError, match=message):
        check_device(name)
