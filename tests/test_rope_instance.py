"""Random RoPE instances (vm/attention/rope/instance.py): sizes and bounds are checked."""

from __future__ import annotations

import math

import pytest
import torch

from vm.attention.rope.instance import random_instance


@pytest.mark.parametrize("n, d, bound, message", [
    (0, 4, 1.0, "n and d must be whole numbers, at least 1"),   # torch's arange error
    (-3, 4, 1.0, "n and d must be whole numbers, at least 1"),
    (8, 0, 1.0, "n and d must be whole numbers, at least 1"),
    (8, 4, -1.0, "positive and finite"),                       # complex rows
    (8, 4, math.nan, "positive and finite"),                   # NaN rows
])
def test_an_instance_outside_what_is_defined_is_refused(n, d, bound, message):
    with pytest.raises(ValueError, match=message):
        random_instance(n, d, bound, "general", seed=0)


def test_the_scores_lie_within_the_bound():
    inst = random_instance(16, 4, 2.0, "rotary", seed=1)
    norms = torch.linalg.norm(inst.a1, dim=1) * torch.linalg.norm(inst.a2, dim=1)
    assert inst.a1.dtype == torch.float64 and float(norms.max()) / 4 <= 2.0 + 1e-12
