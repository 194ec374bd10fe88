"""sgd_step and sgd_step_linear: one step of stochastic gradient descent (Section 9).

Call syntax (a routine returns one cell, so the weights are updated in place
and the destination receives the sample's loss before the update):

    loss = sgd_step(W1, W2, x, y, lr=0.1, activation=0)   ; y^ = W2 act(W1 x)
    loss = sgd_step_linear(W, x, y, lr=0.1)               ; y^ = W x

with x (d_in x 1), y (d_out x 1), W1 (d_h x d_in), W2 (d_out x d_h), W
(d_out x d_in), the loss 1/2 |y^ - y|^2, and `activation` a code: 0 tanh,
1 sigmoid, 2 relu (keyword values are numbers in .fleq). The expansion is the
forward pass, the loss, backpropagation and the update, calling only
registered blocks:

    z = matmul(W1, x); h = act(z); p = matmul(W2, h); e = sub(p, y)
    loss = matmul_tn(e, e); loss = scale(loss, 1/2)
    e = scale(e, lr)                       ; lr * dL/dp
    b = matmul_tn(W2, e)                   ; lr * dL/dh, before W2 changes
    g = matmul_nt(e, h); W2 = sub(W2, g)   ; W2 -= lr e h^T
    s = act'(z); b = hadamard(b, s)        ; lr * dL/dz
    g = matmul_nt(b, x); W1 = sub(W1, g)   ; W1 -= lr (dL/dz) x^T

14 instructions (sgd_step_linear: 7). Every temporary is the expansion's own
cell, named with its unique `_` prefix.
"""

from __future__ import annotations

from vm.functions.activations import ACTIVATIONS
from vm.routines.base import (Expansion, KeywordError, OperandError, Routine, RoutineCall,
                              expect_real, expect_shape, shown_keyword)
from vm.routines import register_routine

ACTIVATION_CODES = {0: "tanh", 1: "sigmoid", 2: "relu"}
"""The `activation=` keyword's values."""


def activation_code(name: str) -> int:
    """The keyword value that selects an activation by name."""
    codes = {activation: code for code, activation in ACTIVATION_CODES.items()}
    if name not in codes:
        raise ValueError(f"unknown activation {name!r} (choose from {', '.join(codes)})")
    return codes[name]


def _loss_destination(call: RoutineCall) -> None:
    destination = call.destination
    if destination.shape != (1, 1) or destination.integer:
        raise OperandError(destination, f"the destination '{destination.name}' receives the "
                                        "loss: a real scalar (like 0.0)")


def _learning_rate(call: RoutineCall) -> float:
    rate = call.keywords["lr"]
    if not rate > 0:
        raise KeywordError("lr", f"lr must be positive, got {shown_keyword(rate)}")
    return rate


def _loss_and_scaled_error(call: RoutineCall, e: str, half: str, lr: str) -> list[str]:
    loss = call.destination.name
    return [f"{loss} = matmul_tn({e}, {e})", f"{loss} = scale({loss}, {half})",
            f"{e} = scale({e}, {lr})"]


def expand_two_layer(call: RoutineCall) -> Expansion:
    w1, w2, x, y = call.arguments
    _loss_destination(call)
    expect_real(w1, "the weight matrix")
    expect_real(w2, "the weight matrix")
    hidden, inputs = w1.shape
    outputs = w2.shape[0]
    expect_shape(x, (inputs, 1), "the input")
    expect_shape(w2, (outputs, hidden), "the output weights")
    expect_shape(y, (outputs, 1), "the target")
    code = call.keywords["activation"]
    if code not in ACTIVATION_CODES:
        raise KeywordError("activation", f"activation must be one of {sorted(ACTIVATION_CODES)} "
                         f"({', '.join(f'{c} {n}' for c, n in ACTIVATION_CODES.items())})")
    function, derivative = ACTIVATIONS[ACTIVATION_CODES[int(code)]]
    rate = _learning_rate(call)
    z, h, p, e, b, s, g1, g2, half, lr = (call.name(n) for n in
                                          ("z", "h", "p", "e", "b", "s", "g1", "g2", "half",
                                           "lr"))
    data = [f"{z}: .zeros {hidden}x1", f"{h}: .zeros {hidden}x1", f"{p}: .zeros {outputs}x1",
            f"{e}: .zeros {outputs}x1", f"{b}: .zeros {hidden}x1", f"{s}: .zeros {hidden}x1",
            f"{g1}: .zeros {hidden}x{inputs}", f"{g2}: .zeros {outputs}x{hidden}",
            f"{half}: 0.5", f"{lr}: {rate!r}"]
    code_lines = [f"{z} = matmul({w1.name}, {x.name})", f"{h} = {function}({z})",
                  f"{p} = matmul({w2.name}, {h})", f"{e} = sub({p}, {y.name})",
                  *_loss_and_scaled_error(call, e, half, lr),
                  f"{b} = matmul_tn({w2.name}, {e})",
                  f"{g2} = matmul_nt({e}, {h})", f"{w2.name} = sub({w2.name}, {g2})",
                  f"{s} = {derivative}({z})", f"{b} = hadamard({b}, {s})",
                  f"{g1} = matmul_nt({b}, {x.name})", f"{w1.name} = sub({w1.name}, {g1})"]
    return Expansion(data, code_lines)


def expand_linear(call: RoutineCall) -> Expansion:
    w, x, y = call.arguments
    _loss_destination(call)
    expect_real(w, "the weight matrix")
    outputs, inputs = w.shape
    expect_shape(x, (inputs, 1), "the input")
    expect_shape(y, (outputs, 1), "the target")
    rate = _learning_rate(call)
    p, e, g, half, lr = (call.name(n) for n in ("p", "e", "g", "half", "lr"))
    data = [f"{p}: .zeros {outputs}x1", f"{e}: .zeros {outputs}x1",
            f"{g}: .zeros {outputs}x{inputs}", f"{half}: 0.5", f"{lr}: {rate!r}"]
    code_lines = [f"{p} = matmul({w.name}, {x.name})", f"{e} = sub({p}, {y.name})",
                  *_loss_and_scaled_error(call, e, half, lr),
                  f"{g} = matmul_nt({e}, {x.name})", f"{w.name} = sub({w.name}, {g})"]
    return Expansion(data, code_lines)


register_routine(Routine(
    "sgd_step", "one SGD step of y^ = W2 act(W1 x) on 1/2 |y^ - y|^2; W1, W2 updated in "
    "place; returns the loss before the step", 4, {"lr": 0.1, "activation": 0.0},
    expand_two_layer))
register_routine(Routine(
    "sgd_step_linear", "one SGD step of y^ = W x on 1/2 |y^ - y|^2; W updated in place; "
    "returns the loss before the step", 3, {"lr": 0.1}, expand_linear))
