"""Linear algebra routines: matrix inverse (Newton-Schulz), power iteration, Rayleigh quotient.

Each expands into FLEQ that calls only registered blocks (vm/functions/linalg.py, add, sub);
the routine sees the operands' shapes, never their values, so every number that depends on
A (the Newton-Schulz start, the norms) is computed by the machine.

- `X = inverse(A, iters=T)`: X_0 = A^T / ||A||_F^2 (||A||_F^2 = trace(A^T A) >= sigma_max^2,
  so the start satisfies eps < 2 / sigma_max^2), then T times X <- X (2I - A X).
- `v = power_iteration(A, iters=T, newton=3)`: from the fixed start (1, ..., 1) / sqrt(n),
  T times v <- A v * rsqrt(||A v||^2); rsqrt's fit is only good to about 1 %, which changes
  the length of v but not its direction, so a final normalization refines 1 / ||v|| with
  `newton` Newton steps y <- y (3/2 - (||v||^2 / 2) y^2) from y = 1.
- `lam = rayleigh(A, v)`: v^T A v / v^T v, with 1 / ||v|| from rsqrt and Newton steps.
"""

from __future__ import annotations

from vm.library import Expansion, Operand, Routine, RoutineCall, register_routine

NEWTON_STEPS = 3
"""Newton steps after rsqrt's ~1 % guess: the relative error goes 1e-2, 1.5e-4, 3e-8, 1e-15."""


def _matrix(rows: list[list[float]]) -> str:
    body = ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in rows)
    return f".matrix {len(rows)}x{len(rows[0])} [{body}]"


def _square(call: RoutineCall, operand: Operand) -> int:
    rows, columns = operand.shape
    if rows != columns:
        raise ValueError(f"'{operand.name}' must be a square matrix, got {rows}x{columns}")
    if operand.integer:
        raise ValueError(f"'{operand.name}' is an integer counter, not a matrix")
    return rows


def _iterations(call: RoutineCall, name: str = "iters") -> int:
    value = call.keywords[name]
    if value != int(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value:g}")
    return int(value)


def _expect(operand: Operand, shape: tuple[int, int], what: str) -> None:
    if operand.shape != shape:
        raise ValueError(f"'{operand.name}' must be {what} ({shape[0]}x{shape[1]}), got "
                         f"{operand.shape[0]}x{operand.shape[1]}")


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
    (a,) = call.arguments
    n = _square(call, a)
    _expect(call.destination, (n, n), "the shape of A")
    iterations = _iterations(call)
    x = call.destination.name
    gram, norm2, r, eps, product, two, loop = (call.name(s) for s in
                                               ("gram", "norm2", "r", "eps", "p", "two", "loop"))
    counter, reset, step = _counter(call, iterations)
    data = counter + [f"{gram}: .zeros {n}x{n}", f"{norm2}: 0.0", f"{r}: 0.0", f"{eps}: 0.0",
                      f"{product}: .zeros {n}x{n}",
                      f"{two}: " + _matrix([[2.0 if i == j else 0.0 for j in range(n)]
                                            for i in range(n)])]
    code = [reset,
            f"{gram} = matmul_tn({a.name}, {a.name})",
            f"{norm2} = trace({gram})",
            f"{r} = rsqrt({norm2})",
            f"{eps} = scale({r}, {r})",
            f"{x} = transpose({a.name})",
            f"{x} = scale({x}, {eps})",
            f"{loop}: {step}",
            f"{product} = matmul({a.name}, {x})",
            f"{product} = sub({two}, {product})",
            f"{x} = matmul({x}, {product}) if {call.name('k')} <= 0 goto {loop}"]
    return Expansion(data, code)


def expand_power_iteration(call: RoutineCall) -> Expansion:
    (a,) = call.arguments
    n = _square(call, a)
    _expect(call.destination, (n, 1), "a vector as long as A")
    iterations, steps = _iterations(call), _iterations(call, "newton")
    v = call.destination.name
    start, zero, w, norm2, r, loop = (call.name(s) for s in
                                      ("v0", "vzero", "w", "norm2", "r", "loop"))
    counter, reset, step = _counter(call, iterations)
    unit = repr(1.0 / n ** 0.5)
    data = counter + [f"{start}: " + _matrix([[float(unit)]] * n),
                      f"{zero}: .zeros {n}x1", f"{w}: .zeros {n}x1", f"{norm2}: 0.0",
                      f"{r}: 0.0"]
    newton_data, newton_code = newton_rsqrt(call, norm2, r, steps, from_rsqrt=False)
    code = [reset,
            f"{v} = add({start}, {zero})",
            f"{loop}: {step}",
            f"{w} = matmul({a.name}, {v})",
            f"{norm2} = matmul_tn({w}, {w})",
            f"{r} = rsqrt({norm2})",
            f"{v} = scale({w}, {r}) if {call.name('k')} <= 0 goto {loop}",
            f"{norm2} = matmul_tn({v}, {v})",
            *newton_code,
            f"{v} = scale({v}, {r})"]
    return Expansion(data + newton_data, code)


def expand_rayleigh(call: RoutineCall) -> Expansion:
    a, v = call.arguments
    n = _square(call, a)
    _expect(v, (n, 1), "a vector as long as A")
    _expect(call.destination, (1, 1), "a scalar")
    steps = _iterations(call, "newton")
    lam = call.destination.name
    norm2, r, inverse_norm2, w = (call.name(s) for s in ("norm2", "r", "q", "w"))
    data = [f"{norm2}: 0.0", f"{r}: 0.0", f"{inverse_norm2}: 0.0", f"{w}: .zeros {n}x1"]
    newton_data, newton_code = newton_rsqrt(call, norm2, r, steps, from_rsqrt=True)
    code = [f"{norm2} = matmul_tn({v.name}, {v.name})",
            *newton_code,
            f"{inverse_norm2} = scale({r}, {r})",
            f"{w} = matmul({a.name}, {v.name})",
            f"{lam} = matmul_tn({v.name}, {w})",
            f"{lam} = scale({lam}, {inverse_norm2})"]
    return Expansion(data + newton_data, code)


register_routine(Routine("inverse", "X = A^-1 by Newton-Schulz from X_0 = A^T / ||A||_F^2", 1,
                         {"iters": 20.0}, expand_inverse))
register_routine(Routine("power_iteration", "v = dominant eigenvector of A, unit length", 1,
                         {"iters": 30.0, "newton": float(NEWTON_STEPS)},
                         expand_power_iteration))
register_routine(Routine("rayleigh", "lam = v^T A v / v^T v", 2,
                         {"newton": float(NEWTON_STEPS)}, expand_rayleigh))
