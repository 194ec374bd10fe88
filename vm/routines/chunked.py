"""chunked_attention: attention over N tokens from (N/M)^2 calls of the attention_oracle block.

Call syntax (Lemma 3.1 of "Simulating Large Transformers with Small Ones"):

    Y0 = chunked_attention(X0, Wq, Wk, Wv, n=16, m=4, score=2)

A cell holds at most d x d, so the N x d_model input is stored as T = N/M chunk
cells, one column per token (the machine's own orientation: its columns are
tokens): X0 .. X{T-1}, each d_model x M, where X_t holds tokens tM .. tM+M-1.
The call names chunk 0 (a name ending in 0); the routine finds the others by
that stem, and writes Y0 .. Y{T-1} (h x M each, column i = output of token i)
the same way. Wq, Wk, Wv are d_model x h data cells: q = Wq^T x, so the result
is softmax(X Wq (X Wk)^T) X Wv for token-row X, without 1/sqrt(h) (fold it into
Wq). The block takes `.function attention_oracle dim=h length=M`.

The expansion calls only registered blocks (attention_oracle, matmul_tn, add,
sub), unrolled, no branches:

  projections (once)  Wkv = [Wk Wv] = (Wk^T)^T [I 0] + (Wv^T)^T [0 I], with
                      Wk^T = Wk^T I; per chunk Q_t = Wq^T X_t and
                      KV_t = Wkv^T X_t = [K_t; V_t]                     (5 + 2T)
  per query chunk c   S = sum over key chunks t of attention_oracle(Q_c, KV_t):
                      numerators on top, normalizers on a diagonal, so the sum
                      is the paper's sum_t B_t and sum_t A_t        (T calls, T-1 adds)
                      Nt = S^T [I/2N; 0]      (numerators^T / 2N)
                      D  = [0; I/N]^T S       (diag of the mean e^(q.k) of each query)
                      X  ~ D^-1 by Newton, X <- X^T (2I - D X) from X_0 = I / cosh(score)
                      (3 instructions a step); the last step is symmetrized,
                      X <- X^T R + R^T X with R = 2I - D X (5 instructions)
                      Y_c = Nt^T X

Why the symmetrized step: matmul_tn gives X^T products, and X^T (2I - D X)
maps an error E of X to E^T - E, so the antisymmetric part of the products'
rounding doubles each step; X^T R + R^T X cancels every first-order error.

With `rope=1` the queries and keys are rotated by their tokens' positions first, the
standard rotary embedding (vm/attention/rope: R_p is block-diagonal 2 x 2 rotations by
p theta_b, theta_b = 10000^(-2b/h), h even), so the result is RoPE attention
softmax((R_i q_i) . (R_j k_j)) v. Per chunk, Q_t <- C o Q_t + S o (P Q_t) with the
positions' cosines C, sines S and the pair swap P (x1, x2) -> (-x2, x1) as constant cells
(matmul_tn, two hadamard products, add: 4 instructions), and the same on the key rows of
KV_t (cosine 1 and sine 0 on its value rows): 8T more instructions. Rotations keep norms, so
`score` bounds the rotated scores too.

Newton converges for every query whose mean e^(q.k) lies in (0, 2 cosh(score));
when every |q.k| <= score, `newton_iterations(score)` steps take it below
float64's unit roundoff, so the result is limited by the blocks' own errors
(docs/chunked_attention.md measures it). Instructions: 5 + 2T + T (2T + 3k + 4)
for k Newton steps: 181 for N = 16, M = 4, score = 2 (k = 10), and a halt.
"""

from __future__ import annotations

import math

import numpy as np

from vm.common.geometry import MAX_COLUMNS
from vm.routines.base import (Expansion, KeywordError, Operand, OperandError, Routine,
                              RoutineCall, expect_real, expect_shape, matrix_literal,
                              shown_keyword)
from vm.routines import register_routine

TOLERANCE = 2.0 ** -53
"""Newton steps are counted until the worst-case error would be below this."""


MAX_SCORE = 16.0
"""Largest `score`: Newton's steps grow as 2.9 score (51 at 16), and from about 18.7 on
tanh(score) rounds to 1 in float64, where the step count has no bound."""


def newton_iterations(score: float) -> int:
    """Steps of X <- X (2I - D X) from X_0 = I / cosh(score) that take every diagonal entry
    of D in [e^-score, e^score] within TOLERANCE: the error tanh(score)^(2^k)."""
    contraction = math.tanh(score)
    return max(1, math.ceil(math.log2(math.log(TOLERANCE) / math.log(contraction))))


def _stem(operand: Operand, role: str) -> str:
    if not operand.name.endswith("0"):
        raise OperandError(operand, f"the {role} '{operand.name}' must name chunk 0 (a name "
                                    "ending in 0; the other chunks are the same name ending "
                                    "in 1, 2, ...)")
    return operand.name[:-1]


def _sizes(call: RoutineCall) -> tuple[int, int, int, int]:
    """(tokens N, chunk length M, model width, head width h), checked."""
    x0, wq, wk, wv = call.arguments
    n, m = call.keywords["n"], call.keywords["m"]
    # finite first: int() of an inf (a literal past float64, 1e999) raised OverflowError
    if not math.isfinite(m) or m != int(m) or m < 1:
        raise KeywordError("m", f"m must be a positive integer, got {shown_keyword(m)}")
    if not math.isfinite(n) or n != int(n) or not m <= n or int(n) % int(m):
        raise KeywordError("n", f"n must be a positive multiple of m={m:g}, got "
                                f"{shown_keyword(n)}")
    width, length = x0.shape
    if length != m:
        raise OperandError(x0, f"the chunk '{x0.name}' has {length} tokens (columns), m is {m:g}")
    heads = wq.shape[1]
    for weight in (wq, wk, wv):
        expect_shape(weight, (width, heads), "the weight")
    expect_shape(call.destination, (heads, length), "the output chunk")
    expect_real(call.destination, "the output chunk")
    score = call.keywords["score"]
    if not 0 < score <= MAX_SCORE:
        raise KeywordError("score", f"score must be positive and at most {MAX_SCORE:g}, got "
                           f"{shown_keyword(score)}")
    if call.keywords["rope"] not in (0, 1):
        raise KeywordError("rope", f"rope must be 0 or 1, got "
                                   f"{shown_keyword(call.keywords['rope'])}")
    chunks, steps = int(n) // int(m), newton_iterations(score)
    if chunks > MAX_COLUMNS:  # checked first: a 300-digit count filled the message below
        raise KeywordError("n", f"n/m = {n / m:g} chunks, more than the machine's "
                           f"{MAX_COLUMNS} columns")
    size = instructions(chunks, steps, bool(call.keywords["rope"]))
    if size > MAX_COLUMNS:
        raise KeywordError("n", f"n/m = {chunks} chunks would expand to {size} instructions, "
                           f"more than the machine's {MAX_COLUMNS} columns")
    return int(n), int(m), width, heads


def instructions(chunks: int, steps: int, rope: bool) -> int:
    """The expansion's length, 5 + 2T + T (2T + 3k + 4) (+ 8T with rope): counted before
    building it, so a huge n/m is refused instead of filling memory."""
    return 5 + 2 * chunks + chunks * (2 * chunks + 3 * steps + 4) + (8 * chunks if rope else 0)


def expand_chunked_attention(call: RoutineCall) -> Expansion:
    n, m, width, h = _sizes(call)
    chunks = n // m
    x_stem = _stem(call.arguments[0], "input")
    y_stem = _stem(call.destination, "destination")
    wq, wk, wv = (a.name for a in call.arguments[1:])
    score = call.keywords["score"]
    name = call.name
    constants = {"id": np.eye(width), "liftk": np.eye(h, 2 * h), "liftv": np.eye(h, 2 * h, h),
                 "num": np.vstack([np.eye(h), np.zeros((m, h))]) / (2 * n),
                 "den": np.vstack([np.zeros((h, m)), np.eye(m)]) / n,
                 "guess": np.eye(m) / math.cosh(score), "two": 2 * np.eye(m)}
    data = [f"{name(key)}: {matrix_literal(value)}" for key, value in constants.items()]
    data += [f"{name('wkt')}: .zeros {h}x{width}", f"{name('wvt')}: .zeros {h}x{width}",
             f"{name('wkl')}: .zeros {width}x{2 * h}", f"{name('wvl')}: .zeros {width}x{2 * h}",
             f"{name('wkv')}: .zeros {width}x{2 * h}",
             f"{name('s')}: .zeros {h + m}x{m}", f"{name('t')}: .zeros {h + m}x{m}",
             f"{name('nt')}: .zeros {m}x{h}"]
    data += [f"{name(v)}: .zeros {m}x{m}" for v in ("d", "x", "p", "r")]
    for t in range(chunks):
        data += [f"{name(f'q{t}')}: .zeros {h}x{m}", f"{name(f'kv{t}')}: .zeros {2 * h}x{m}"]
    code = [f"{name('wkt')} = matmul_tn({wk}, {name('id')})",
            f"{name('wvt')} = matmul_tn({wv}, {name('id')})",
            f"{name('wkl')} = matmul_tn({name('wkt')}, {name('liftk')})",
            f"{name('wvl')} = matmul_tn({name('wvt')}, {name('liftv')})",
            f"{name('wkv')} = add({name('wkl')}, {name('wvl')})"]
    for t in range(chunks):
        code += [f"{name(f'q{t}')} = matmul_tn({wq}, {x_stem}{t})",
                 f"{name(f'kv{t}')} = matmul_tn({name('wkv')}, {x_stem}{t})"]
    if call.keywords["rope"]:
        rope_data, rope_code = _rotations(name, chunks, m, h)
        data += rope_data
        code += rope_code
    for c in range(chunks):
        code += _query_chunk(name, c, chunks, newton_iterations(score), f"{y_stem}{c}")
    return Expansion(data, code)


ROPE_BASE = 10000.0
"""The rotary embedding's frequency base, as in vm/attention/rope/forward.py."""


def _rotations(name, chunks: int, m: int, h: int) -> tuple[list[str], list[str]]:
    """Data and code that rotate every chunk's queries and keys by their positions."""
    if h % 2:
        raise ValueError(f"rope=1 needs an even head width h, got {h}")
    swap = np.zeros((h, h))
    for b in range(0, h, 2):
        swap[b, b + 1], swap[b + 1, b] = -1.0, 1.0
    swap_kv = np.zeros((2 * h, 2 * h))
    swap_kv[:h, :h] = swap
    frequencies = np.repeat(ROPE_BASE ** (-np.arange(0, h, 2) / h), 2)
    data = [f"{name('swq')}: {matrix_literal(swap.T)}",
            f"{name('swkv')}: {matrix_literal(swap_kv.T)}",
            f"{name('rq')}: .zeros {h}x{m}", f"{name('rkv')}: .zeros {2 * h}x{m}",
            f"{name('uq')}: .zeros {h}x{m}", f"{name('ukv')}: .zeros {2 * h}x{m}"]
    code = []
    for t in range(chunks):
        phase = frequencies[:, None] * np.arange(t * m, (t + 1) * m)[None, :]
        cos_kv = np.vstack([np.cos(phase), np.ones((h, m))])
        sin_kv = np.vstack([np.sin(phase), np.zeros((h, m))])
        data += [f"{name(f'cq{t}')}: {matrix_literal(np.cos(phase))}",
                 f"{name(f'sq{t}')}: {matrix_literal(np.sin(phase))}",
                 f"{name(f'ckv{t}')}: {matrix_literal(cos_kv)}",
                 f"{name(f'skv{t}')}: {matrix_literal(sin_kv)}"]
        for part, swapped, rotated, scratch in (("q", "swq", "rq", "uq"),
                                                ("kv", "swkv", "rkv", "ukv")):
            chunk = name(f"{part}{t}")
            code += [f"{name(rotated)} = matmul_tn({name(swapped)}, {chunk})",
                     f"{name(scratch)} = hadamard({name(f's{part}{t}')}, {name(rotated)})",
                     f"{name(rotated)} = hadamard({name(f'c{part}{t}')}, {chunk})",
                     f"{chunk} = add({name(rotated)}, {name(scratch)})"]
    return data, code


def _query_chunk(name, c: int, chunks: int, iterations: int, output: str) -> list[str]:
    """The oracle calls of query chunk c, their sum, and the division by the normalizers."""
    s, t, x, d, p, r = (name(v) for v in ("s", "t", "x", "d", "p", "r"))
    query = name(f"q{c}")
    code = [f"{s} = attention_oracle({query}, {name('kv0')})"]
    for key in range(1, chunks):
        code += [f"{t} = attention_oracle({query}, {name(f'kv{key}')})", f"{s} = add({s}, {t})"]
    code += [f"{name('nt')} = matmul_tn({s}, {name('num')})",
             f"{d} = matmul_tn({name('den')}, {s})"]
    current, two = name("guess"), name("two")
    for _ in range(iterations - 1):
        code += [f"{p} = matmul_tn({d}, {current})", f"{r} = sub({two}, {p})",
                 f"{x} = matmul_tn({current}, {r})"]
        current = x
    code += [f"{p} = matmul_tn({d}, {current})", f"{r} = sub({two}, {p})",
             f"{p} = matmul_tn({current}, {r})", f"{r} = matmul_tn({r}, {current})",
             f"{x} = add({p}, {r})"]
    code.append(f"{output} = matmul_tn({name('nt')}, {x})")
    return code


register_routine(Routine(
    "chunked_attention",
    "attention of N tokens (chunk cells X0..) from (N/M)^2 attention_oracle calls",
    4, {"n": 16.0, "m": 4.0, "score": 2.0, "rope": 0.0}, expand_chunked_attention))
