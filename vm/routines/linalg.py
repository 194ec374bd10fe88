"""Linear algebra routines: matrix inverse (Newton-Schulz), power iteration, Rayleigh quotient.

Each expands into FLEQ that calls only registered blocks (vm/functions/linalg.py, add, sub),
and of the products only A^T B (matmul_tn), the one the linearized softmax computes without
moving data first: A v is T(A^T, v) with A^T = T(A, I) computed once. That keeps the machine
to six blocks with few heads (at d = 8, half the parameters of a machine that also carries
matmul's transpositions, and a pass about 1.4x faster; docs/linalg.md).

The routine sees the operands' shapes, never their values, so every number that depends on
A (the Newton-Schulz start, the norms) is computed by the machine.

- `X = inverse(A, iters=T)`: X_0 = A^T / ||A||_F^2 (||A||_F^2 = trace(A^T A) >= sigma_max^2,
  so the start satisfies eps < 2 / sigma_max^2), then T times X <- X (2I - A X), with X^T
  carried along (the pair corrects a first-order mismatch between the two in two steps).
- `v = power_iteration(A, iters=T, newton=3)`: from the fixed start (1, ..., 1) / sqrt(n),
  T times v <- A v * rsqrt(||A v||^2); rsqrt's fit is only good to about 1 %, which changes
  the length of v but not its direction, so a final normalization refines 1 / ||v|| with
  `newton` Newton steps y <- y (3/2 - (||v||^2 / 2) y^2) from y = 1.
- `lam = rayleigh(A, v)`: v^T A v / v^T v, with 1 / ||v|| from rsqrt and Newton steps.

`iters` is at most MAX_ITERATIONS and `newton` at most MAX_NEWTON (both whole numbers);
a bad value is an error at the keyword in the caller's source.
"""

from __future__ import annotations

import math

import numpy as np

from vm.functions.base import FunctionBlock
from vm.routines.base import (Expansion, Operand, OperandError, Routine, RoutineCall,
                              count_keyword, expect_real, matrix_literal, register_routine)

NEWTON_STEPS = 3
"""Newton steps after rsqrt's ~1 % guess: the relative error goes 1e-2, 1.5e-4, 3e-8, 1e-15."""


def _square(operand: Operand) -> int:
    rows, columns = operand.shape
    if rows != columns:
        raise OperandError(operand, f"'{operand.name}' must be a square matrix, got "
                                    f"{rows}x{columns}")
    if operand.integer:
        raise OperandError(operand, f"'{operand.name}' is an integer counter, not a matrix")
    return rows


MAX_ITERATIONS = 1_000_000
"""Most `iters`: the loop is a counter, so the program's size does not grow with it, but the
run does (4 instructions an iteration); a million is far beyond what Newton-Schulz (quadratic
once started) or a power iteration with any usable eigengap needs."""
MAX_NEWTON = 64
"""Most `newton` steps: they are unrolled, 4 instructions each (64 -> 256 of the machine's
65,536 columns), and from rsqrt's 1 % guess 3 steps already reach float64's roundoff."""


def _iterations(call: RoutineCall, name: str = "iters") -> int:
    return count_keyword(call, name, MAX_NEWTON if name == "newton" else MAX_ITERATIONS)


def _expect(operand: Operand, shape: tuple[int, int], what: str) -> None:
    if operand.shape != shape:
        raise OperandError(operand, f"'{operand.name}' must be {what} ({shape[0]}x{shape[1]}), "
                                    f"got {operand.shape[0]}x{operand.shape[1]}")


def _counter(call: RoutineCall, iterations: int) -> tuple[list[str], str, str]:
    """Data for a counter that runs a loop body `iterations` times: k starts at 1 - T, the
    body adds 1 and branches back while k <= 0. Returns (data, reset line, step line)."""
    k, start, zero, one = (call.name(s) for s in ("k", "k0", "kzero", "kone"))
    data = [f"{k}: 0", f"{start}: {1 - iterations}", f"{zero}: 0", f"{one}: 1"]
    return data, f"{k} = add({start}, {zero})", f"{k} = add({k}, {one})"


def newton_rsqrt(call: RoutineCall, x: str, y: str, steps: int,
                 from_rsqrt: bool) -> tuple[list[str], list[str]]:
    """y = 1 / sqrt(x) (1 x 1 cells): rsqrt's guess (or y = 1 when x is known to be near 1),
    then `steps` Newton steps y <- y (3/2 - (x / 2) y^2). Returns (data, code)."""
    half, three_halves, h, t, unit = (call.name(s) for s in ("half", "c15", "h", "t", "unit"))
    data = [f"{half}: 0.5", f"{three_halves}: 1.5", f"{h}: 0.0", f"{t}: 0.0", f"{unit}: 1.0"]
    code = [f"{y} = rsqrt({x})" if from_rsqrt else f"{y} = scale({unit}, {unit})",
            f"{h} = scale({x}, {half})"]
    for _ in range(steps):
        code += [f"{t} = scale({y}, {y})", f"{t} = scale({t}, {h})",
                 f"{t} = sub({three_halves}, {t})", f"{y} = scale({y}, {t})"]
    return data, code


def expand_inverse(call: RoutineCall) -> Expansion:
    """Newton-Schulz with the natural product T(L, R) = L^T R only (matmul_tn): with
    At = T(A, I), P = A X = T(At, X), and keeping Xt = X^T beside X,
    X (2I - P) = T(Xt, 2I - P) and its transpose (2I - P)^T X^T = T(2I - P, Xt)."""
    (a,) = call.arguments
    n = _square(a)
    _expect(call.destination, (n, n), "the shape of A")
    expect_real(call.destination, "the destination")
    iterations = _iterations(call)
    x = call.destination.name
    names = ("eye", "two", "at", "xt", "gram", "norm2", "r", "eps", "p", "loop")
    eye, two, at, xt, gram, norm2, r, eps, product, loop = (call.name(s) for s in names)
    counter, reset, step = _counter(call, iterations)
    data = counter + [f"{eye}: {matrix_literal(np.eye(n))}",
                      f"{two}: {matrix_literal(2 * np.eye(n))}",
                      *(f"{name}: .zeros {n}x{n}" for name in (at, xt, gram, product)),
                      f"{norm2}: 0.0", f"{r}: 0.0", f"{eps}: 0.0"]
    code = [reset,
            f"{at} = matmul_tn({a.name}, {eye})",
            f"{gram} = matmul_tn({a.name}, {a.name})",
            f"{norm2} = trace({gram})",
            f"{r} = rsqrt({norm2})",
            f"{eps} = scale({r}, {r})",
            f"{x} = scale({at}, {eps})",
            f"{xt} = scale({a.name}, {eps})",
            f"{loop}: {step}",
            f"{product} = matmul_tn({at}, {x})",
            f"{product} = sub({two}, {product})",
            f"{x} = matmul_tn({xt}, {product})",
            f"{xt} = matmul_tn({product}, {xt}) if {call.name('k')} <= 0 goto {loop}"]
    return Expansion(data, code)


def expand_power_iteration(call: RoutineCall) -> Expansion:
    (a,) = call.arguments
    n = _square(a)
    _expect(call.destination, (n, 1), "a vector as long as A")
    expect_real(call.destination, "the destination")
    iterations, steps = _iterations(call), _iterations(call, "newton")
    v = call.destination.name
    eye, at, start, zero, w, norm2, r, loop = (call.name(s) for s in
                                               ("eye", "at", "v0", "vzero", "w", "norm2", "r",
                                                "loop"))
    counter, reset, step = _counter(call, iterations)
    unit = 1.0 / n ** 0.5
    data = counter + [f"{eye}: {matrix_literal(np.eye(n))}", f"{at}: .zeros {n}x{n}",
                      f"{start}: {matrix_literal(np.full((n, 1), unit))}",
                      f"{zero}: .zeros {n}x1", f"{w}: .zeros {n}x1", f"{norm2}: 0.0",
                      f"{r}: 0.0"]
    newton_data, newton_code = newton_rsqrt(call, norm2, r, steps, from_rsqrt=False)
    code = [reset,
            f"{at} = matmul_tn({a.name}, {eye})",
            f"{v} = add({start}, {zero})",
            f"{loop}: {step}",
            f"{w} = matmul_tn({at}, {v})",
            f"{norm2} = matmul_tn({w}, {w})",
            f"{r} = rsqrt({norm2})",
            f"{v} = scale({w}, {r}) if {call.name('k')} <= 0 goto {loop}",
            f"{norm2} = matmul_tn({v}, {v})",
            *newton_code,
            f"{v} = scale({v}, {r})"]
    return Expansion(data + newton_data, code)


def expand_rayleigh(call: RoutineCall) -> Expansion:
    a, v = call.arguments
    n = _square(a)
    _expect(v, (n, 1), "a vector as long as A")
    _expect(call.destination, (1, 1), "a scalar")
    expect_real(call.destination, "the destination")
    steps = _iterations(call, "newton")
    lam = call.destination.name
    eye, at, norm2, r, inverse_norm2, w = (call.name(s) for s in
                                           ("eye", "at", "norm2", "r", "q", "w"))
    data = [f"{eye}: {matrix_literal(np.eye(n))}", f"{at}: .zeros {n}x{n}", f"{norm2}: 0.0",
            f"{r}: 0.0", f"{inverse_norm2}: 0.0", f"{w}: .zeros {n}x1"]
    newton_data, newton_code = newton_rsqrt(call, norm2, r, steps, from_rsqrt=True)
    code = [f"{norm2} = matmul_tn({v.name}, {v.name})",
            *newton_code,
            f"{inverse_norm2} = scale({r}, {r})",
            f"{at} = matmul_tn({a.name}, {eye})",
            f"{w} = matmul_tn({at}, {v.name})",
            f"{lam} = matmul_tn({v.name}, {w})",
            f"{lam} = scale({lam}, {inverse_norm2})"]
    return Expansion(data + newton_data, code)


def inverse_error_bound(n: int, a_max: float, x_max: float, dtype: str,
                        product: FunctionBlock) -> float:
    """Entrywise bound on |X_transformer - X_exact| once Newton-Schulz has converged (first
    order; b = the product block's bound): the iteration squares earlier errors away, so what
    remains is the last step's (P = A X off by b(1), carried through n entries of X, and the
    product's own b(x_max)) and the error of A^T = T(A, I), which makes it invert a matrix off
    by b(a_max) per entry (n^2 x_max^2 b(a_max)). Factor 2 of margin."""
    b = product.bound_at
    last_step = n * x_max * b(dtype, 1.0) + b(dtype, x_max)
    transposed = n * n * x_max * x_max * b(dtype, a_max)
    return float(2 * (last_step + transposed))


def eigenvector_error_bound(n: int, a_max: float, lam1: float, lam2: float, dtype: str,
                            product: FunctionBlock) -> float:
    """Entrywise bound on |v_transformer - v_exact| for a symmetric A with |lam1| > |lam2|
    (first order): A^T off by b(a_max) per entry moves the eigenvector by at most
    n b(a_max) / (|lam1| - |lam2|); each iteration's A v is off by b(|lam1|) per entry, a
    direction error sqrt(n) b / |lam1| that later iterations shrink by |lam2 / lam1|; the
    normalization's products near 1 change the length by about 10 b(1). Factor 2 of margin."""
    if not abs(lam1) > abs(lam2):  # equal moduli divided by zero, |lam2| > |lam1| gave < 0
        raise ValueError(f"the bound needs |lam1| > |lam2|, got {lam1:g} and {lam2:g}")
    b = product.bound_at
    ratio = abs(lam2 / lam1)
    perturbation = n * b(dtype, a_max) / (abs(lam1) - abs(lam2))
    iteration = math.sqrt(n) * b(dtype, abs(lam1)) / abs(lam1) / (1 - ratio)
    return float(2 * (perturbation + iteration + 10 * b(dtype, 1.0)))


def rayleigh_error_bound(n: int, a_max: float, lam: float, dtype: str,
                         product: FunctionBlock) -> float:
    """Bound on |lam_transformer - v^T A v / v^T v| (first order): 1 / v^T v from products
    near 1 (10 b(1) relative), A^T and A v (n b(a_max) + b(|lam|)), the dot product and the
    final scale (2 b(|lam|)). Factor 2 of margin."""
    b = product.bound_at
    return float(2 * (abs(lam) * 10 * b(dtype, 1.0) + n * b(dtype, a_max) + 3 * b(dtype,
                                                                                   abs(lam))))


register_routine(Routine("inverse", "X = A^-1 by Newton-Schulz from X_0 = A^T / ||A||_F^2", 1,
                         {"iters": 20.0}, expand_inverse))
register_routine(Routine("power_iteration", "v = dominant eigenvector of A, unit length", 1,
                         {"iters": 30.0, "newton": float(NEWTON_STEPS)},
                         expand_power_iteration))
register_routine(Routine("rayleigh", "lam = v^T A v / v^T v", 2,
                         {"newton": float(NEWTON_STEPS)}, expand_rayleigh))
