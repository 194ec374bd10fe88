"""The direct attention reference (vm/attention/chunked/reference.py): scoring only the keys
a block of queries can see gives full masked attention, for every mask and block size."""

from __future__ import annotations

import math

import pytest
import torch

from vm.attention.chunked.model import Mask, random_instance
from vm.attention.chunked.reference import head_attention, relative_error, visible_keys

MASKS = [Mask("none"), Mask("causal"), Mask("window", window=5),
         Mask("sink", window=4, sinks=3), Mask("window", window=1)]


def dense(x_head, head, mask):
    """Every query against every key, masked, then softmax: the definition."""
    q, k, v = x_head @ head.query, x_head @ head.key, x_head @ head.value
    n = x_head.shape[0]
    scores = q @ k.T
    scores[~mask.visible(torch.arange(n), torch.arange(n))] = float("-inf")
    return torch.softmax(scores, dim=1) @ v, torch.logsumexp(scores, dim=1)


@pytest.mark.parametrize("mask", MASKS, ids=lambda m: f"{m.kind}{m.window}")
@pytest.mark.parametrize("row_chunk", [None, 1, 3, 7, 64])
def test_banded_reference_equals_dense_masked_attention(mask, row_chunk):
    x, model = random_instance(37, 1, 1, 8, mask, torch.float64, seed=3)
    head = model.layers[0][0]
    x_head = model.head_input(x, 0)
    out, lse = head_attention(x_head, head, mask, row_chunk)
    expected_out, expected_lse = dense(x_head, head, mask)
    torch.testing.assert_close(out, expected_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, expected_lse, rtol=1e-12, atol=1e-12)


def test_a_window_block_scores_only_its_band_and_the_sinks():
    keys = visible_keys(Mask("sink", window=4, sinks=2), 100, 110, 4096)
    assert keys.tolist() == [0, 1] + list(range(97, 110))
    assert len(visible_keys(Mask("causal"), 100, 110, 4096)) == 110
    assert len(visible_keys(Mask("none"), 100, 110, 4096)) == 4096


def test_a_zero_row_matched_exactly_has_no_error_and_one_missed_has_infinite_error():
    """0 / 0 on an all-zero output row (zero value weights) made the whole error NaN."""
    exact = torch.tensor([[0.0, 0.0], [3.0, 4.0]])
    assert relative_error(exact, exact) == 0.0
    assert relative_error(exact + torch.tensor([[0.0, 0.0], [0.0, 0.5]]), exact) == 0.1
    assert relative_error(exact + torch.tensor([[1e-9, 0.0], [0.0, 0.0]]), exact) == math.inf


@pytest.mark.parametrize("row_chunk", [0, -1, 2.5])
def test_direct_attention_refuses_a_chunk_of_no_rows(row_chunk):
    x, model = random_instance(8, 1, 1, 2, Mask(), torch.float64, seed=0)
    with pytest.raises(ValueError, match="row_chunk must be None or a whole number"):
        head_attention(x, model.layers[0][0], Mask(), row_chunk=row_chunk)
