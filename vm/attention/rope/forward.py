"""Exact RoPE attention, O(n^2 d), in float64 torch.

Conventions (the paper's, Definition 3.1): queries, keys and values are the rows of n x d
matrices Q = A1 X1, K = A2 X2, V = A3 Y; the attention matrix is
A[i, j] = exp(Q[i] W_{i-j} K[j]^T / d) with one d x d matrix W_delta per offset
delta = i - j in -(n-1)..n-1, D = diag(A 1) and the output is D^-1 A V. The 1/d inside exp
is the paper's normalisation (not the usual 1/sqrt(d)).

The standard rotary form is the special case W_delta = R_{-delta}: rotating query i and key
j by their position angles (R_m = block-diagonal 2 x 2 rotations by m * theta_b) gives the
score (R_i q_i) . (R_j k_j) = q_i^T R_i^T R_j k_j = q_i^T R_{j-i} k_j, because rotations
compose (R_i^T R_j = R_{j-i}). Its support is the 2 x 2 diagonal blocks, |S| = 2d, as the
paper asks (|S| = O(d)), and every entry is a cosine or sine, so ||W||_inf <= 1.
"""

from __future__ import annotations

import torch

ROPE_BASE = 10000.0
"""The usual RoPE frequency base: theta_b = base^(-2b/d)."""


def rotary_angles(d: int, base: float = ROPE_BASE) -> torch.Tensor:
    """The d/2 frequencies theta_b of the standard rotary embedding (d must be even)."""
    if d % 2:
        raise ValueError(f"the rotary form needs an even dimension, got d = {d}")
    return base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)


def rotation_blocks(positions: torch.Tensor, d: int) -> torch.Tensor:
    """R_m for every position m, as (len, d/2, 2, 2) blocks [[cos, -sin], [sin, cos]]."""
    phase = positions.to(torch.float64)[:, None] * rotary_angles(d)[None, :]
    cos, sin = phase.cos(), phase.sin()
    return torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)


def rotate(x: torch.Tensor, start: int = 0) -> torch.Tensor:
    """Row m of x rotated by R_{start+m} (the rotary embedding of rows at those positions)."""
    n, d = x.shape
    blocks = rotation_blocks(torch.arange(start, start + n), d)
    return torch.einsum("mbts,mbs->mbt", blocks, x.reshape(n, d // 2, 2)).reshape(n, d)


def rotary_offsets(n: int, d: int) -> torch.Tensor:
    """The general form's W_delta for delta = -(n-1)..n-1 that reproduces the rotary form.

    Returned as a (2n-1, d, d) tensor indexed by delta + n - 1; W_delta = R_{-delta}.
    """
    blocks = rotation_blocks(-torch.arange(-(n - 1), n), d)
    out = torch.zeros(2 * n - 1, d, d, dtype=torch.float64)
    for b in range(d // 2):
        out[:, 2 * b:2 * b + 2, 2 * b:2 * b + 2] = blocks[:, b]
    return out


ROTARY_TOLERANCE = 1e-9
"""How far offsets may stray from R_{-delta} and still count as rotary: the rotary routes
recompute the rotations from the positions, and cos and sin of angles up to 2^17 radians
round at about 3e-11 however they are formed; a general instance differs by O(1)."""


def check_rotary(offsets: torch.Tensor) -> None:
    """ValueError unless `offsets` are the rotary form's W_delta = R_{-delta}: the rotary
    routes never read the offsets, so a general instance got the gradient of another one."""
    count, d, _ = offsets.shape
    if d % 2:
        raise ValueError(f"the rotary form needs an even dimension, got d = {d}")
    n = (count + 1) // 2
    on_blocks = torch.block_diag(*[torch.ones(2, 2, dtype=torch.bool)] * (d // 2))
    diagonal = offsets.reshape(count, d // 2, 2, d // 2, 2).diagonal(dim1=1, dim2=3)
    expected = rotation_blocks(-torch.arange(-(n - 1), n), d).permute(0, 2, 3, 1)
    if not (torch.allclose(diagonal, expected, rtol=0, atol=ROTARY_TOLERANCE)
            and bool((offsets.abs().amax(0)[~on_blocks] <= ROTARY_TOLERANCE).all())):
        raise ValueError("the instance's offsets are not the rotary form's W_delta = "
                         "R_{-delta}: use the general route")


def rotary_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The n x n score matrix (R_i q_i) . (R_j k_j) / d of the rotary form."""
    return rotate(q) @ rotate(k).T / q.shape[1]


def general_scores(q: torch.Tensor, k: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The n x n score matrix Q[i] W_{i-j} K[j]^T / d of Definition 3.1.

    `offsets` is (2n-1, d, d), W_delta at index delta + n - 1. Only the support S (entries
    nonzero for some delta) is visited: O(|S| n^2) work, one n x n Toeplitz matrix at a time.
    """
    n, d = q.shape
    if tuple(offsets.shape) != (2 * n - 1, d, d):  # another n's were read off-centre
        raise ValueError(f"offsets must be (2n-1, d, d) = {(2 * n - 1, d, d)} for {n} queries "
                         f"of dimension {d}, got {tuple(offsets.shape)}")
    index = torch.arange(n)[:, None] - torch.arange(n)[None, :] + n - 1
    scores = torch.zeros(n, n, dtype=torch.float64)
    for r, s in support(offsets):
        scores += q[:, r, None] * offsets[:, r, s][index] * k[None, :, s]
    return scores / d


def support(offsets: torch.Tensor) -> list[tuple[int, int]]:
    """The entries (r, s) where some W_delta is nonzero: the paper's set S."""
    return [tuple(pair) for pair in (offsets != 0).any(0).nonzero().tolist()]


def attention(scores: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """D^-1 exp(scores) V, as a softmax: the same rows, and no overflow past the paper's
    bounded regime (scores of 710 made exp inf and the output NaN)."""
    return torch.softmax(scores, 1) @ v


def rotary_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Exact RoPE attention in the standard rotary form."""
    return attention(rotary_scores(q, k), v)


def general_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      offsets: torch.Tensor) -> torch.Tensor:
    """Exact RoPE attention in the general form of Definition 3.1."""
    return attention(general_scores(q, k, offsets), v)
