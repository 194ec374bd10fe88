"""RoPE attention forward: the rotary form is the general form with W_delta = R_{-delta}."""

from __future__ import annotations

import math

import pytest
import torch

from vm.attention.rope.forward import (check_rotary, general_attention, rotary_attention,
                                       rotary_offsets, rotate, rotation_blocks, support)
from vm.attention.rope.instance import random_instance


def test_rotary_form_is_the_general_form_with_rotation_offsets():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(9, 6, dtype=torch.float64, generator=gen) for _ in range(3))
    assert torch.allclose(rotary_attention(q, k, v),
                          general_attention(q, k, v, rotary_offsets(9, 6)), atol=1e-13)


def test_rotation_of_a_pair_by_its_position_angle():
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    expected = torch.tensor([[1.0, 0.0], [math.cos(1), math.sin(1)],
                             [-math.sin(2), math.cos(2)]], dtype=torch.float64)
    assert torch.allclose(rotate(x), expected)


def test_general_attention_matches_a_loop_over_i_and_j():
    gen = torch.Generator().manual_seed(1)
    n, d = 5, 3
    q, k, v = (torch.randn(n, d, dtype=torch.float64, generator=gen) for _ in range(3))
    offsets = torch.randn(2 * n - 1, d, d, dtype=torch.float64, generator=gen)
    a = torch.tensor([[math.exp(float(q[i] @ offsets[i - j + n - 1] @ k[j]) / d)
                       for j in range(n)] for i in range(n)], dtype=torch.float64)
    expected = (a @ v) / a.sum(1, keepdim=True)
    assert torch.allclose(general_attention(q, k, v, offsets), expected, atol=1e-12)


def test_rotary_support_is_the_two_by_two_diagonal_blocks():
    assert support(rotary_offsets(4, 4)) == [(0, 0), (0, 1), (1, 0), (1, 1),
                                             (2, 2), (2, 3), (3, 2), (3, 3)]


def test_odd_dimension_has_no_rotary_form():
    with pytest.raises(ValueError, match="needs an even dimension, got d = 3"):
        rotate(torch.zeros(2, 3, dtype=torch.float64))


def test_rotary_offsets_formed_as_products_of_rotations_pass_the_rotary_check():
    # W_{i-j} = R_i^T R_j rounds differently from R_{-delta} at large positions
    n, d = 3000, 4
    rotations = rotation_blocks(torch.arange(n), d)
    offsets = rotary_offsets(n, d)
    for b in range(d // 2):  # delta = i - j for i = n - 1 and every j
        offsets[n - 1:, 2 * b:2 * b + 2, 2 * b:2 * b + 2] = (
            rotations[n - 1, b].T @ rotations[:, b].flip(0))
    check_rotary(offsets)


@pytest.mark.parametrize("change", ["general", "off-block entry", "one angle"])
def test_offsets_that_are_not_rotary_fail_the_rotary_check(change):
    offsets = rotary_offsets(9, 4)
    if change == "general":
        offsets = random_instance(9, 4, 1.0, "general", seed=0).offsets
    elif change == "off-block entry":
        offsets[3, 0, 2] = 0.1
    else:
        offsets[5, 2:4, 2:4] = torch.eye(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="not the rotary form"):
        check_rotary(offsets)


@pytest.mark.parametrize("offsets_n", [6, 3])
def test_general_attention_refuses_offsets_of_another_length(offsets_n):
    """n = 6's offsets for 4 queries were read off-centre (W_{delta-2} as W_delta), no error."""
    q = torch.rand(4, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"offsets must be \(2n-1, d, d\) = \(7, 2, 2\)"):
        general_attention(q, q, q, rotary_offsets(offsets_n, 2))
