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


@pytest.mark.parametrize("diagonals, n, message", [
    (3, 4, "x has 4 entries, the matrix's 3 diagonals make it 2 x 2"),  # padded with zeros
    (9, 4, "x has 4 entries"),                                          # a broadcast error
    (4, 2, "2n-1 diagonals, got 4"),                                    # read as 2 x 2
])
def test_a_product_whose_sizes_disagree_is_refused(diagonals, n, message):
    with pytest.raises(ValueError, match=message):
        toeplitz_matvec(torch.ones(diagonals, dtype=torch.float64),
                        torch.ones(n, dtype=torch.float64))


def test_an_even_number_of_diagonals_is_no_matrix():
    with pytest.raises(ValueError, match="2n-1 diagonals, got 6"):
        dense_toeplitz(torch.arange(6.0))
