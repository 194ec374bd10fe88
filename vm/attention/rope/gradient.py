"""The closed-form gradient of the RoPE attention loss (Lemmas 5.1-5.3, Theorem 5.7).

The paper's problem (Definition 3.2): given n x d inputs A1, A2, A3, a target E, Y (d x d)
and the offsets W_delta, the parameter is X = X1 (x) X2, a d^2 x d^2 matrix (x = vec(X) has
d^4 entries), and

    Loss(X) = 0.5 || D(X)^-1 A(X) A3 Y - E ||_F^2,
    A(X)[i, j] = exp((A1[i] (x) A2[j]) X vec(W_{i-j}) / d).

vec is row-major (torch's reshape), which makes the tensor trick
(A1[i] (x) A2[j]) (X1 (x) X2) vec(W) = A1[i] X1 W X2^T A2[j]^T hold with torch.kron, so for
X = X1 (x) X2 the scores are Q[i] W_{i-j} K[j]^T / d with Q = A1 X1, K = A2 X2.

Written out (not autograd), the gradient is dLoss/dX = (1/d) sum_ij gamma[i, j]
(A1[i] (x) A2[j])^T vec(W_{i-j})^T, i.e. the paper's A~^T vec(gamma), with
s = D^-1 A, l = s V - E, beta = l V^T, gamma = s o beta - diag(rowsum(s o beta)) s
(gamma's row j0 is the paper's (diag(s_j0) - s_j0 s_j0^T) beta_j0). Grouped by the support
entry (r, s) of W, block [., ., r, s] of the gradient is A1^T (gamma o T_rs) A2 / d with T_rs
the n x n Toeplitz matrix of W_delta[r, s]: O(|S| n^2 d) time, one n x n matrix at a time.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass

import torch

from vm.attention.rope.forward import check_rotary, rotate, rotation_blocks, support


@dataclass(frozen=True)
class Instance:
    """One RoPE training-loss instance in the paper's notation (all float64)."""

    a1: torch.Tensor
    a2: torch.Tensor
    a3: torch.Tensor
    e: torch.Tensor
    x1: torch.Tensor
    x2: torch.Tensor
    y: torch.Tensor
    offsets: torch.Tensor
    """(2n-1, d, d): W_delta at index delta + n - 1."""

    def __post_init__(self) -> None:
        """ValueError unless the shapes agree, in finite float64: offsets of another n gave
        the general fast route a silently different gradient, and NaN a NaN one."""
        if self.a1.ndim != 2 or 0 in self.a1.shape:
            raise ValueError(f"a1 must be an n x d matrix with n, d >= 1, got shape "
                             f"{tuple(self.a1.shape)}")
        n, d = self.a1.shape
        shapes = {"a1": (n, d), "a2": (n, d), "a3": (n, d), "e": (n, d), "x1": (d, d),
                  "x2": (d, d), "y": (d, d), "offsets": (2 * n - 1, d, d)}
        for name, shape in shapes.items():
            tensor = getattr(self, name)
            if tuple(tensor.shape) != shape or tensor.dtype != torch.float64:
                raise ValueError(f"{name} must be a {' x '.join(map(str, shape))} float64 "
                                 f"tensor (n x d = {n} x {d} from a1), got "
                                 f"{tuple(tensor.shape)} of {tensor.dtype}")
            if not bool(torch.isfinite(tensor).all()):
                raise ValueError(f"{name} has entries that are not finite")

    @property
    def x(self) -> torch.Tensor:
        """The paper's parameter X = X1 (x) X2 (d^2 x d^2)."""
        return torch.kron(self.x1, self.x2)


def _check_parameter(x: torch.Tensor, d: int) -> None:
    """ValueError unless x is a finite d^2 x d^2 float64 matrix: another shape failed in a
    reshape, float32 in a matmul, and NaN returned a NaN gradient."""
    if tuple(x.shape) != (d * d, d * d) or x.dtype != torch.float64:
        raise ValueError(f"x must be a {d * d} x {d * d} float64 matrix (d^2 x d^2 for d = {d}), "
                         f"got {tuple(x.shape)} of {x.dtype}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("x has entries that are not finite")


def toeplitz_index(n: int, rows: slice | None = None) -> torch.Tensor:
    """i - j + n - 1 for the given rows i (default all) and every j: gathers W_{i-j}."""
    rows = rows or slice(0, n)
    return torch.arange(rows.start, rows.stop)[:, None] - torch.arange(n)[None, :] + n - 1


def scores(inst: Instance, x: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
    """The scores (A1[i] (x) A2[j]) X vec(W_{i-j}) / d for a free d^2 x d^2 X, rows i given
    (default all: n x n)."""
    n, d = inst.a1.shape
    _check_parameter(x, d)
    rows = rows or slice(0, n)
    blocks = x.reshape(d, d, d, d)
    index = toeplitz_index(n, rows)
    out = torch.zeros(rows.stop - rows.start, n, dtype=torch.float64)
    for r, s in support(inst.offsets):
        out = out + ((inst.a1[rows] @ blocks[:, :, r, s] @ inst.a2.T)
                     * inst.offsets[:, r, s][index])
    return out / d


def loss(inst: Instance, x: torch.Tensor) -> torch.Tensor:
    """Definition 3.2's Loss(X) = 0.5 ||D^-1 A A3 Y - E||_F^2 (differentiable in x)."""
    out = torch.softmax(scores(inst, x), 1) @ (inst.a3 @ inst.y)  # D^-1 A, exp never overflows
    return 0.5 * ((out - inst.e) ** 2).sum()


@dataclass(frozen=True)
class Gradient:
    """dLoss/dX (d^2 x d^2), the loss, and the gradient's n x n middle factor gamma."""

    dx: torch.Tensor
    loss: float
    gamma: torch.Tensor | None


def reversed_toeplitz(diagonals: torch.Tensor, rows: slice) -> torch.Tensor:
    """T[i, n-1-j] = t(i - j) for the rows i given: row i is the window t(i-n+1 .. i), read
    backwards, so the rows are windows of the diagonals, a strided view with no n x n
    gather. `diagonals` holds t at index delta + n - 1 (2n-1 entries, contiguous)."""
    n = (diagonals.shape[0] + 1) // 2
    return diagonals.unfold(0, n, 1)[rows]


def _shifted_exp(score: torch.Tensor) -> torch.Tensor:
    """exp of each row less its largest entry: u(x) up to a factor per row, which s = D^-1 A
    cancels; exp itself overflowed from scores of 710 on (B = 800 gave NaN gradients)."""
    return (score - score.amax(1, keepdim=True)).exp()


def _check_block(block: int | None) -> None:
    """None (all rows) or a whole number of rows >= 1: block = -1 looped over no rows and
    returned a gradient of zeros."""
    if block is not None and not (isinstance(block, numbers.Integral) and block >= 1):
        raise ValueError(f"block must be a whole number of rows, at least 1, got {block!r}")


def exact_gradient(inst: Instance, x: torch.Tensor | None = None, block: int | None = None,
                   progress: Callable[[float], None] | None = None) -> Gradient:
    """Lemma 5.3's closed form, exact (Theorem 5.7: O(|S| n^2 d) time).

    Every row j0 of s, l, beta and gamma depends on row j0's scores only, so `block` rows
    are done at a time (default all n: the n x n terms formed whole, as the paper writes
    them); memory O(block n). The columns j are taken in reverse order, which makes each
    Toeplitz factor W_{i-j}[r, s] a view of its diagonals (`reversed_toeplitz`); `gamma`
    (in the usual order) is returned only when it is formed whole. `progress` is told the
    fraction of rows done after each block.
    """
    x = inst.x if x is None else x
    n, d = inst.a1.shape
    _check_parameter(x, d)
    _check_block(block)
    blocks = x.reshape(d, d, d, d)
    pairs = support(inst.offsets)
    diagonals = {pair: inst.offsets[:, pair[0], pair[1]].contiguous() for pair in pairs}
    keys = inst.a2.flip(0)                                     # column j <-> key n-1-j
    v = (inst.a3 @ inst.y).flip(0)                             # v(y), reversed likewise
    dx = torch.zeros(d, d, d, d, dtype=torch.float64)
    total, gamma = 0.0, None
    for start in range(0, n, block or n):
        rows = slice(start, min(n, start + (block or n)))
        score = torch.zeros(rows.stop - start, n, dtype=torch.float64)
        for r, c in pairs:
            score += ((inst.a1[rows] @ blocks[:, :, r, c] @ keys.T)
                      * reversed_toeplitz(diagonals[r, c], rows))
        a = _shifted_exp(score / d)                            # u(x), row j0 = u(x)_j0
        s = a / a.sum(1, keepdim=True)                         # s(x) = D^-1 A
        ell = s @ v - inst.e[rows]                             # l(x)
        beta = ell @ v.T                                       # beta(x)_j0 = A3 Y l_j0
        gamma1 = s * beta                                      # diag(s_j0) beta_j0
        gamma = gamma1 - gamma1.sum(1, keepdim=True) * s       # - s_j0 <s_j0, beta_j0>
        for r, c in pairs:
            dx[:, :, r, c] += (inst.a1[rows].T @ (gamma * reversed_toeplitz(diagonals[r, c],
                                                                             rows))
                               @ keys) / d
        total += 0.5 * float((ell ** 2).sum())
        if progress is not None:
            progress(rows.stop / n)
    whole = block in (None, n)
    return Gradient(dx.reshape(d * d, d * d), total, gamma.flip(1) if whole else None)


def exact_rotary_gradient(inst: Instance, block: int | None = None,
                          progress: Callable[[float], None] | None = None) -> Gradient:
    """The same closed form for the standard rotary form (W_delta = R_{-delta}), at
    X = X1 (x) X2, with the n x n products done by matrix multiplication instead of |S|
    Toeplitz gathers: the scores are rotated rows' dot products, and
    W_{i-j}[r, s] = (R_i^T R_j)[r, s] = sum_t R_i[t, r] R_j[t, s] splits the gradient block
    into (A1 o R[t, r])^T gamma (A2 o R[t, s]). Still O(n^2 d^2) time: the exact baseline.
    `progress` is told the fraction of rows done after each block."""
    check_rotary(inst.offsets)
    n, d = inst.a1.shape
    _check_block(block)
    v = inst.a3 @ inst.y
    keys = rotate(inst.a2 @ inst.x2)
    positions = torch.arange(n)
    right = torch.einsum("jq,jbts->jqbts", inst.a2, rotation_blocks(positions, d))
    right = right.reshape(n, -1)
    per_block = torch.zeros(d, d, d // 2, 2, 2, dtype=torch.float64)
    total, gamma = 0.0, None
    for start in range(0, n, block or n):
        rows = slice(start, min(n, start + (block or n)))
        a = _shifted_exp(rotate(inst.a1[rows] @ inst.x1, start) @ keys.T / d)
        s = a / a.sum(1, keepdim=True)
        ell = s @ v - inst.e[rows]
        gamma1 = s * (ell @ v.T)
        gamma = gamma1 - gamma1.sum(1, keepdim=True) * s
        left = torch.einsum("ip,ibtr->ipbtr", inst.a1[rows], rotation_blocks(positions[rows], d))
        mixed = (gamma @ right).reshape(-1, d, d // 2, 2, 2)
        per_block += torch.einsum("ipbtr,iqbts->pqbrs", left, mixed) / d
        total += 0.5 * float((ell ** 2).sum())
        if progress is not None:
            progress(rows.stop / n)
    dx = torch.zeros(d, d, d, d, dtype=torch.float64)
    for b in range(d // 2):
        dx[:, :, 2 * b:2 * b + 2, 2 * b:2 * b + 2] = per_block[:, :, b]
    return Gradient(dx.reshape(d * d, d * d), total, gamma if block in (None, n) else None)


def factor_gradients(dx: torch.Tensor, x1: torch.Tensor,
                     x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """dLoss/dX1 and dLoss/dX2 from dLoss/dX by the chain rule through X = X1 (x) X2."""
    d = x1.shape[0]
    blocks = dx.reshape(d, d, d, d)                        # [p, q, r, s] = dX[(p,q), (r,s)]
    return (torch.einsum("pqrs,qs->pr", blocks, x2), torch.einsum("pqrs,pr->qs", blocks, x1))
