"""Chunked attention on the FLEQ machine: the attention_oracle block and the
chunked_attention routine, against attention computed directly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vm.block_errors import measure
from vm.errors import InputError
from vm.functions import make_block
from vm.functions.attention_oracle import SPAN

torch.set_num_threads(1)

H, M, D = 4, 4, 8


def softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray,
                                                                             np.ndarray]:
    """Rows of softmax(Q K^T) V and the normalizers sum_j e^(q.k), for token-row matrices,
    by torch (an implementation independent of the block's reference)."""
    scores = torch.as_tensor(q) @ torch.as_tensor(k).T
    return (torch.softmax(scores, dim=1) @ torch.as_tensor(v)).numpy(), \
        torch.logsumexp(scores, dim=1).exp().numpy()


def oracle_operands(rng: np.random.Generator, scale: float = SPAN) -> tuple[np.ndarray,
                                                                            np.ndarray]:
    return rng.uniform(-scale, scale, (H, M)), rng.uniform(-scale, scale, (2 * H, M))


def test_oracle_reference_is_unnormalized_attention_and_its_normalizer():
    rng = np.random.default_rng(1)
    block = make_block("attention_oracle", dim=H, length=M)
    a, b = oracle_operands(rng)
    out = block.reference(a, b)
    assert out.shape == (H + M, M)
    normalized, normalizers = softmax_attention(a.T, b[:H].T, b[H:].T)
    np.testing.assert_allclose(np.diag(out[H:]), normalizers, rtol=1e-12)
    assert np.count_nonzero(out[H:] - np.diag(np.diag(out[H:]))) == 0
    np.testing.assert_allclose(out[:H] / normalizers, normalized.T, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_oracle_on_the_transformer_is_within_its_bound_against_direct_attention(dtype):
    rng = np.random.default_rng(2)
    operands = [oracle_operands(rng, scale) for scale in (SPAN, SPAN, 1.0, 0.3)]
    errors = measure("attention_oracle", dtype=dtype, d=D, operands=operands, dim=H, length=M)
    assert errors.within_bound, errors.worst_ratio
    for sample in errors.samples:
        normalized, normalizers = softmax_attention(sample.a.T, sample.b[:H].T, sample.b[H:].T)
        got = sample.computed
        relative = 1e-9 if dtype == "float64" else 2e-3
        np.testing.assert_allclose(np.diag(got[H:]), normalizers, rtol=relative)
        np.testing.assert_allclose(got[:H] / np.diag(got[H:]), normalized.T,
                                   atol=relative * np.abs(sample.b[H:]).max())


def test_oracle_bound_is_tight_enough_to_catch_a_wrong_normalizer():
    """The per-column bound is far below the effect of dropping the synthetic-token factor
    or of counting one padded key (e^0 = 1) in the normalizer."""
    block = make_block("attention_oracle", dim=H, length=M)
    a, b = oracle_operands(np.random.default_rng(3), 0.5)
    exact = block.reference(a, b)
    bound = block.bound_at("float64", exact)
    wrong = exact.copy()
    wrong[H:] += np.eye(M)
    assert (np.abs(wrong - exact) > bound).any()
    assert bound.max() < 1e-10


def test_oracle_metadata_and_shape_errors():
    block = make_block("attention_oracle", dim=H, length=M)
    assert (block.arity, block.depth(D), block.extra_columns(D)) == (2, 2, 1)
    assert block.output_shape((H, M), (2 * H, M)) == (H + M, M)
    with pytest.raises(ValueError, match="key/value chunk 8x4"):
        block.output_shape((H, M), (H, M))
    with pytest.raises(InputError, match="needs a block size d >= 8"):
        block.constant_fields(4)
    with pytest.raises(InputError, match="dim must be an integer"):
        make_block("attention_oracle", dim=0)
