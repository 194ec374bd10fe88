"""The almost-linear gradient of Section 6 (Lemmas 6.2-6.6, Theorem 6.7): no n x n matrix.

The polynomial method (`polynomial`) replaces exp(score) by P(score) = phi(i) . psi(j), so
the attention matrix is U V^T with rank k, and every n x n term of Lemma 5.3 follows:

    s ~ diag(1/alpha) U V^T                  (Lemma 6.2, alpha = U (V^T 1))
    l ~ s A3 Y - E                           (Lemma 6.3: n x d, from U (V^T A3 Y))
    beta = l (A3 Y)^T                        (Lemma 6.4: rank d, never formed)
    gamma1 = s o beta = diag(1/alpha) (U o l)(V o A3 Y)^T           (Lemma 6.5, Fact 3.8)
    gamma2 = diag(rho) s, rho = rowsum(s o beta) = rowsum(l o s A3 Y)  (Lemma 6.6)

so gamma = sum_c diag(L_c) U V^T diag(R_c) over c = 1..d+1 (L_c = l_c / alpha, R_c = the
value column c, and L = -rho/alpha, R = 1 for gamma2), and the gradient block
sum_ij gamma_ij A1[i,p] A2[j,q] W_{i-j}[r,s] is a sum of products of n-long sums.

Standard rotary form (`rotary_gradient`): rotations compose, R_i^T R_j = R_{j-i}, so the
scores are plain dot products of rotated rows (the features are those of the rotated
rows: k = C(d+g, g)), and W_{i-j}[r,s] = sum_t R_i[t,r] R_j[t,s] splits into a factor
of i and a factor of j too. Every n x n sum becomes (features of i)^T (features of j): two
passes over row chunks, O(n k d^3) time and O(chunk k + d^3 k) memory.

General form (`general_gradient`): W_{i-j} is an arbitrary sequence, the score
sum_{(r,s) in S} Q[i,r] K[j,s] W_{i-j}[r,s] / d is not a dot product of i- and j-vectors.
Expanding P over the |S| products z_rs = Q[i,r] K[j,s] W_{i-j}[r,s] / d, each monomial
z^alpha is (a function of i)(a function of i-j)(a function of j): the attention matrix is a
sum of k = C(|S|+g, g) terms diag(.) T_alpha diag(.) with T_alpha Toeplitz, applied by FFT
(`toeplitz`), and each gradient block is a sum of Toeplitz bilinear forms, evaluated by
Parseval. The i- and j-factors depend on alpha's marginals only (C(d+g, g) of them), so
the FFTs number O(C(d+g, g) d^2 + C(|S|+g+1, g+1)), each O(n log n); what is left is
O(k d^2 (d + |S|)) pointwise products per frequency. Almost linear in n, but
k = C(2d+g, g) for |S| = 2d is large: at d = 4, g = 4 it beats the exact gradient from
n = 8192 on (docs/rope_attention.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from vm.attention.rope.forward import check_rotary, rotate, rotation_blocks, support
from vm.attention.rope.gradient import Instance
from vm.attention.rope.instance import FORMS
from vm.attention.rope.polynomial import (check_polynomial, exponents, features, rank,
                                         weights)
from vm.attention.rope.toeplitz import fft_size, toeplitz_spectrum

CHUNK_ENTRIES = 1 << 21
"""Entries of one row chunk's feature block (16 MiB of float64)."""
CACHE_ENTRIES = 1 << 16
"""Complex entries of one tile of the general route's frequency contraction (1 MiB)."""
SETUP_SHARE = 0.25
"""The general route's progress fraction given to its spectra, before the contraction: they
took 15 to 40 percent of its time (25 s at n = 2^17, d = 2, g = 8, silent and past
--max-seconds when only the contraction reported)."""


SCORE_SLACK = 1e-9
"""Relative room for rounding when scores are held to the bound: random_instance's scores
reach B exactly in exact arithmetic (Cauchy-Schwarz), so their computed bound is B times
1 +- a few ulps."""


def score_bound(inst: Instance, rotary: bool) -> float:
    """An upper bound on every |score| = |Q[i] W_{i-j} K[j]^T| / d: max |Q[i]| max |K[j]|
    max ||W_delta||_2 / d, O(n d^2) (the general form's spectral norms O(n d^3)); the
    rotary form's W_delta are rotations, of norm 1."""
    d = inst.a1.shape[1]
    largest_query = (inst.a1 @ inst.x1).norm(dim=1).max()
    largest_key = (inst.a2 @ inst.x2).norm(dim=1).max()
    largest_offset = 1.0 if rotary else torch.linalg.matrix_norm(inst.offsets, ord=2).max()
    return float(largest_query * largest_key * largest_offset / d)


def check_scores(inst: Instance, bound: float, rotary: bool) -> None:
    """ValueError unless every score provably lies in [-bound, bound]: the polynomial
    approximates exp there only, and a score beyond it gave a silently wrong gradient."""
    reach = score_bound(inst, rotary)
    if reach > bound * (1 + SCORE_SLACK):
        raise ValueError(f"this instance's scores may reach {reach:.6g}, past the bound "
                         f"B = {bound:g} the polynomial approximates exp on; the gradient "
                         f"would be wrong there: use B >= {reach:.6g}")


@dataclass(frozen=True)
class FastGradient:
    """The approximate dLoss/dX, loss and attention output, the rank k of the factors, and
    the bytes of the largest factors held at once (the method's working memory)."""

    dx: torch.Tensor
    loss: float
    output: torch.Tensor
    rank: int
    factor_bytes: int


def _chunks(n: int, size: int) -> list[slice]:
    return [slice(start, min(n, start + size)) for start in range(0, n, size)]


def _reported_chunks(n: int, size: int,
                     report: Callable[[float], None] | None) -> Iterator[slice]:
    """`_chunks`, telling `report` the fraction of them done after each."""
    parts = _chunks(n, size)
    for done, part in enumerate(parts, 1):
        yield part
        if report is not None:
            report(done / len(parts))


def _span(progress: Callable[[float], None] | None, start: float,
          stop: float) -> Callable[[float], None] | None:
    """`progress` for a stage covering the fractions start..stop of the whole route."""
    if progress is None:
        return None
    return lambda fraction: progress(start + fraction * (stop - start))


def rotary_gradient(inst: Instance, degree: int, bound: float,
                    progress: Callable[[float], None] | None = None) -> FastGradient:
    """Section 6's approximate gradient for the standard rotary form (W_delta = R_{-delta});
    `progress` is told the fraction done after each chunk of rows (two sweeps)."""
    check_rotary(inst.offsets)
    n, d = inst.a1.shape
    k = rank(d, degree)
    poly = weights(d, bound, degree)
    check_scores(inst, bound, rotary=True)
    q, key, v = inst.a1 @ inst.x1, inst.a2 @ inst.x2, inst.a3 @ inst.y
    side = (d + 1) * d * (d // 2) * 4
    chunk = max(1, CHUNK_ENTRIES // max(k, side))
    ones = torch.ones(n, 1, dtype=torch.float64)
    right = torch.cat([v, ones], 1)                    # R_c: value columns, then 1
    kv = torch.zeros(k, d + 1, dtype=torch.float64)    # V^T [A3 Y | 1]
    key_side = torch.zeros(side, k, dtype=torch.float64)
    for rows in _chunks(n, chunk):
        psi = features(rotate(key[rows], rows.start), degree)
        kv += psi.T @ right[rows]
        blocks = rotation_blocks(torch.arange(rows.start, rows.stop), d)
        h = torch.einsum("mc,mq,mbts->mcqbts", right[rows], inst.a2[rows], blocks)
        key_side += h.reshape(len(h), -1).T @ psi
        if progress is not None:
            progress(rows.stop / (2 * n))
    query_side = torch.zeros(side, k, dtype=torch.float64)
    outputs, total = [], 0.0
    for rows in _chunks(n, chunk):
        phi = features(rotate(q[rows], rows.start) / d, degree) * poly
        alpha = phi @ kv[:, d]
        out = (phi @ kv[:, :d]) / alpha[:, None]
        ell = out - inst.e[rows]
        rho = (ell * out).sum(1, keepdim=True)
        left = torch.cat([ell, -rho], 1) / alpha[:, None]
        blocks = rotation_blocks(torch.arange(rows.start, rows.stop), d)
        f = torch.einsum("mc,mp,mbtr->mcpbtr", left, inst.a1[rows], blocks)
        query_side += f.reshape(len(f), -1).T @ phi
        outputs.append(out)
        total += 0.5 * float((ell ** 2).sum())
        if progress is not None:
            progress((n + rows.stop) / (2 * n))
    shape = (d + 1, d, d // 2, 2, 2, k)
    per_block = torch.einsum("cpbtrk,cqbtsk->pqbrs", query_side.reshape(shape),
                             key_side.reshape(shape)) / d
    dx = torch.zeros(d, d, d, d, dtype=torch.float64)
    for b in range(d // 2):
        dx[:, :, 2 * b:2 * b + 2, 2 * b:2 * b + 2] = per_block[:, :, b]
    return FastGradient(dx.reshape(d * d, d * d), total, torch.cat(outputs), k,
                        rotary_bytes(n, d, degree))


def _spectra(rows: torch.Tensor, channels: torch.Tensor, size: int,
             report: Callable[[float], None] | None = None) -> torch.Tensor:
    """rfft of rows[:, f] * channels[:, c] for every feature f and channel c, a few features
    at a time (the real products are never all held): f x c x (size/2 + 1); `report` is
    told the fraction done after each few."""
    n, count = rows.shape
    out = torch.empty(count, channels.shape[1], size // 2 + 1, dtype=torch.complex128)
    batch = max(1, CHUNK_ENTRIES // (channels.shape[1] * size))
    for part in _reported_chunks(count, batch, report):
        torch.fft.rfft(rows[:, part].T[:, None, :] * channels.T[None], size, out=out[part])
    return out


def _marginal_index(alphas: torch.Tensor, variables: list[int], d: int,
                    degree: int) -> torch.Tensor:
    """For each monomial alpha over the support, the index (in `features` order over d
    variables) of its marginal: exponent of variable t = sum of alpha_m over m with
    variables[m] == t. Q[i]^marginal is alpha's factor of i (or j for the columns)."""
    marginal = alphas @ torch.nn.functional.one_hot(torch.tensor(variables), d)
    lookup = {tuple(e): i for i, e in enumerate(exponents(d, degree).tolist())}
    return torch.tensor([lookup[tuple(e)] for e in marginal.tolist()])


def general_gradient(inst: Instance, degree: int, bound: float,
                     progress: Callable[[float], None] | None = None) -> FastGradient:
    """Section 6's approximate gradient for the general form, by FFT on the Toeplitz parts.

    Monomial alpha over the |S| products Q[i,r] K[j,s] W_{i-j}[r,s] / d is
    c_alpha Q[i]^mu (prod W_{i-j}^alpha) K[j]^nu with mu, nu its row and column marginals.
    Only C(d+g, g) marginals exist (k = C(|S|+g, g) monomials), so the i- and j-side
    spectra are taken once per marginal, not once per monomial: (d+1) d FFTs per marginal
    per side instead of per monomial. The Toeplitz factor of block m of the gradient,
    W^alpha W_m, is the degree-(g+1) monomial alpha + e_m: one FFT per monomial of degree
    <= g+1 (C(|S|+g+1, g+1)) covers all k |S| of them. Frequencies are then contracted
    monomial by monomial in chunks: x^T T y = (1/N) sum_w conj(x^) t^ y^ (Parseval).
    `progress` is told the fraction done: the spectra's parts, then the frequency bands
    contracted (the longest stage).
    """
    n, d = inst.a1.shape
    pairs = support(inst.offsets)
    rows_of, cols_of = [r for r, _ in pairs], [s for _, s in pairs]
    q, key, v = inst.a1 @ inst.x1, inst.a2 @ inst.x2, inst.a3 @ inst.y
    alphas = exponents(len(pairs), degree)                              # k x |S|
    k = len(alphas)
    coef = weights(len(pairs), bound, degree)
    check_scores(inst, bound, rotary=False)
    mu = _marginal_index(alphas, rows_of, d, degree)
    nu = _marginal_index(alphas, cols_of, d, degree)
    higher = {tuple(e): i for i, e in enumerate(exponents(len(pairs), degree + 1).tolist())}
    shifted = torch.tensor([[higher[tuple(e[:m] + [e[m] + 1] + e[m + 1:])]
                             for m in range(len(pairs))] for e in alphas.tolist()])
    size = fft_size(n)
    bins = size // 2 + 1
    diagonals = inst.offsets[:, rows_of, cols_of]                       # (2n-1) x |S|
    setup = SETUP_SHARE
    toeplitz = features(diagonals, degree + 1,                          # first k: degree <= g
                        _span(progress, 0, 0.2 * setup))
    tspec = torch.empty(toeplitz.shape[1], bins, dtype=torch.complex128)  # k' x bins
    for part in _reported_chunks(toeplitz.shape[1], max(1, CHUNK_ENTRIES // size),
                                 _span(progress, 0.2 * setup, 0.4 * setup)):
        toeplitz_spectrum(toeplitz[:, part].T, size, out=tspec[part])
    qf, kf = features(q / d, degree), features(key, degree)             # n x C(d+g, g)
    right = torch.cat([v, torch.ones(n, 1, dtype=torch.float64)], 1)  # [A3 Y | 1]
    kspec = _spectra(kf, right, size,                                  # marginal x (d+1)
                     _span(progress, 0.4 * setup, 0.5 * setup))
    mixed = torch.zeros(qf.shape[1], d + 1, bins, dtype=torch.complex128)
    batch = max(1, CHUNK_ENTRIES // ((d + 1) * bins))
    for part in _reported_chunks(k, batch, _span(progress, 0.5 * setup, 0.65 * setup)):
        mixed.index_add_(0, mu[part], (coef[part, None] * tspec[part])[:, None] * kspec[nu[part]])
    applied = torch.zeros(d + 1, n, dtype=torch.float64)               # (A~ [A3 Y | 1])^T
    for part in _reported_chunks(qf.shape[1], batch, _span(progress, 0.65 * setup, 0.8 * setup)):
        applied += (qf[:, part].T[:, None, :] * torch.fft.irfft(mixed[part], size)[..., :n]).sum(0)
    del mixed
    alpha = applied[d]
    out = applied[:d].T / alpha[:, None]
    ell = out - inst.e
    rho = (ell * out).sum(1, keepdim=True)
    left = torch.cat([ell, -rho], 1) / alpha[:, None]
    # x^T T y = (1/N) sum over all N frequencies of conj(x^) t^ y^; with rfft bins, the
    # frequencies other than 0 and N/2 stand for their mirror image too: weight 2.
    weight = torch.full((bins,), 2.0, dtype=torch.float64)
    weight[0] = 1.0
    if size % 2 == 0:
        weight[-1] = 1.0
    side_left = (left[:, :, None] * inst.a1[:, None, :]).reshape(n, -1)   # (c, p)
    side_right = (right[:, :, None] * inst.a2[:, None, :]).reshape(n, -1)  # (c, q)
    xs = _spectra(qf, side_left, size, _span(progress, 0.8 * setup, 0.9 * setup))
    ys = _spectra(kf, side_right, size, _span(progress, 0.9 * setup, setup))
    xs, ys = xs.reshape(-1, d + 1, d, bins), ys.reshape(-1, d + 1, d, bins)
    grad = torch.zeros(d, d, len(pairs), dtype=torch.float64)
    groups = [(int(m), (mu == m).nonzero()[:, 0]) for m in mu.unique()]
    width = min(bins, CACHE_ENTRIES // (d * d * max(len(g) for _, g in groups)))
    for band in _chunks(bins, width):              # cache-sized tiles of (monomials, bins)
        xb, yb, tb = xs[..., band].conj(), ys[..., band], tspec[:, band] * weight[band]
        for done, (m, part) in enumerate(groups, 1):  # monomials sharing the i-side marginal
            x, y = xb[m], yb[nu[part]]
            block = x[0, :, None] * y[:, 0, None]
            for c in range(1, d + 1):
                block += x[c, :, None] * y[:, c, None]
            ts = tb[shifted[part]] * coef[part, None, None]             # part x |S| x band
            grad += torch.einsum("apqw,amw->pqm", block, ts).real
            if progress is not None:  # per group: at n = 2, d = 16 one band took 6 s
                progress(setup + (1 - setup) * (band.start + done / len(groups)
                                                * (band.stop - band.start)) / bins)
    dx = torch.zeros(d, d, d, d, dtype=torch.float64)
    for m, (r, s) in enumerate(pairs):
        dx[:, :, r, s] = grad[:, :, m] / (size * d)
    return FastGradient(dx.reshape(d * d, d * d), 0.5 * float((ell ** 2).sum()), out, k,
                        general_bytes(n, d, len(pairs), degree))


def rotary_bytes(n: int, d: int, degree: int) -> int:
    """The rotary route's features of one chunk of rows and its two (d+1) d^2 2 x k sides,
    each twice: the final einsum copies both into its matrix-product layout (counted once,
    d = 16 at degree 5 passed the 4 GiB check with 2.7 GiB and held 5.4). A chunk is at
    most n rows (counting a full chunk at n = 1 reported 33 MiB for 1.3 MiB)."""
    k = rank(d, degree)
    side = (d + 1) * d * (d // 2) * 4
    chunk = min(n, max(1, CHUNK_ENTRIES // max(k, side)))
    return 8 * (2 * chunk * k + 4 * side * k + k * (d + 1))


def general_bytes(n: int, d: int, support_size: int, degree: int) -> int:
    """The general route's spectra: the degree <= g+1 Toeplitz monomials' and, per marginal,
    (d+1) channels for the forward (twice: mixed) and (d+1) d per side for the gradient
    (complex128); and the features: the Toeplitz ones over all 2n-1 offsets (counted at n,
    d = 4, g = 8 at n = 2048 was put at 1.8 GiB and held 2.4), the rows' at n."""
    bins = fft_size(n) // 2 + 1
    toeplitz = rank(support_size, degree + 1)
    spectra = toeplitz + rank(d, degree) * (d + 1) * (2 * d + 2)
    return 16 * bins * spectra + 8 * ((2 * n - 1) * toeplitz + 2 * n * rank(d, degree))


def working_bytes(n: int, d: int, degree: int, form: str) -> int:
    """The bytes of factors the fast route of `form` holds at once (checked before a run)."""
    if form == "rotary":
        return rotary_bytes(n, d, degree)
    return general_bytes(n, d, 2 * d, degree)          # |S| = 2d, as in instance.py


def fast_gradient(inst: Instance, form: str, degree: int, bound: float,
                  progress: Callable[[float], None] | None = None) -> FastGradient:
    """The approximate gradient of the given form (rotary or general); `progress` is told
    the fraction done now and then."""
    if form not in FORMS:  # anything else took the general route
        raise ValueError(f"unknown form {form!r} (choose from {', '.join(FORMS)})")
    check_polynomial(bound, degree)  # before the factors are sized by the degree
    if form == "rotary":
        return rotary_gradient(inst, degree, bound, progress)
    return general_gradient(inst, degree, bound, progress)
