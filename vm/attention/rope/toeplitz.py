"""Toeplitz products by FFT: the route the general form W_{i-j} needs (Section 6 via [AS24a]).

A Toeplitz matrix T[i, j] = t(i - j) is given by its 2n-1 diagonals, t at index
delta + n - 1 (the layout of the offsets tensor). Embedded in a circulant of size N >= 2n-1,
T x is a circular convolution: O(N log N) instead of O(n^2), and the n x n matrix is never
formed. The bilinear form x^T T y = sum_delta t(delta) sum_i x_i y_{i-delta} is a
correlation, so by Parseval it is (1/N) sum_w conj(t^(w)) x^(w) conj(y^(w)).
"""

from __future__ import annotations

import torch


def fft_size(n: int) -> int:
    """The power of two N >= 2n - 1 used for the circulant embedding."""
    return 1 << (2 * n - 2).bit_length()


def order(diagonals: torch.Tensor) -> int:
    """n for 2n-1 diagonals on the trailing axis; ValueError for an even count, which held
    no n x n matrix and was read as a shorter one."""
    count = diagonals.shape[-1]
    if count % 2 == 0:
        raise ValueError(f"an n x n Toeplitz matrix has 2n-1 diagonals, got {count}")
    return (count + 1) // 2


def circulant_column(diagonals: torch.Tensor, size: int) -> torch.Tensor:
    """t(delta) at circular index delta mod N, for the trailing (2n-1) axis of `diagonals`."""
    n = order(diagonals)
    column = diagonals.new_zeros(*diagonals.shape[:-1], size)
    column[..., :n] = diagonals[..., n - 1:]          # delta = 0 .. n-1
    column[..., size - n + 1:] = diagonals[..., :n - 1]  # delta = -(n-1) .. -1
    return column


def toeplitz_spectrum(diagonals: torch.Tensor, size: int,
                      out: torch.Tensor | None = None) -> torch.Tensor:
    """The rfft of the circulant embedding: what the general route multiplies spectra by."""
    return torch.fft.rfft(circulant_column(diagonals, size), out=out)


def toeplitz_matvec(diagonals: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """T x for T[i, j] = t(i - j), batched: diagonals (..., 2n-1), x (..., n) -> (..., n).
    The general route's convention (`toeplitz_spectrum`, irfft, first n entries) in one
    product, so tests/test_rope_toeplitz.py checks it against the dense matrix."""
    n = x.shape[-1]
    if order(diagonals) != n:  # fewer diagonals were padded with zeros: a silent wrong product
        raise ValueError(f"x has {n} entries, the matrix's {diagonals.shape[-1]} diagonals "
                         f"make it {order(diagonals)} x {order(diagonals)}")
    size = fft_size(n)
    spectrum = toeplitz_spectrum(diagonals, size) * torch.fft.rfft(x, size)
    return torch.fft.irfft(spectrum, size)[..., :n]


def dense_toeplitz(diagonals: torch.Tensor) -> torch.Tensor:
    """The n x n matrix T[i, j] = t(i - j) (for checks and the exact path)."""
    n = order(diagonals)
    index = torch.arange(n)[:, None] - torch.arange(n)[None, :] + n - 1
    return diagonals[..., index]
