"""FFT Toeplitz products against the dense Toeplitz matrix."""

from __future__ import annotations

import pytest
import torch

from vm.attention.rope.toeplitz import dense_toeplitz, fft_size, toeplitz_matvec


@pytest.mark.parametrize("n", [1, 2, 3, 8, 33, 100])
def test_fft_product_matches_the_dense_product(n):
    gen = torch.Generator().manual_seed(n)
    diagonals = torch.randn(4, 2 * n - 1, dtype=torch.float64, generator=gen)
    x = torch.randn(4, n, dtype=torch.float64, generator=gen)
    dense = (dense_toeplitz(diagonals) @ x[..., None])[..., 0]
    assert torch.allclose(toeplitz_matvec(diagonals, x), dense, atol=1e-12)


def test_dense_toeplitz_puts_t_of_i_minus_j_at_i_j():
    diagonals = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])       # t(delta) = delta
    assert dense_toeplitz(diagonals).tolist() == [[0, -1, -2], [1, 0, -1], [2, 1, 0]]


def test_fft_size_holds_the_whole_linear_convolution():
    assert [fft_size(n) for n in (1, 2, 3, 5, 1024)] == [1, 4, 8, 16, 2048]
