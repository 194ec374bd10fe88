"""Composite FLEQ routines, registered by name and expanded by the assembler.

`X = inverse(A, iters=10)` in a .fleq file is not a function block: the
assembler asks the routine for FLEQ text (data lines for its temporaries and
constants, code lines that call only registered function blocks) and splices
it in place of the call. Generated names start with `_` (a prefix users may
not use), so they never collide with the program's own.
"""

from __future__ import annotations

import math

import numpy as np

from vm.common.signatures import Expansion, Operand, Routine, RoutineCall, Shape


def matrix_literal(values: np.ndarray | list[list[float]]) -> str:
    """A constant as FLEQ data text, `.matrix RxC [[...], ...]`; repr keeps every float
    exact. Refused: values that are not a non-empty 2-D matrix of finite reals (a vector or
    complex failed in a TypeError, NaN and 0x0 wrote text the assembler cannot read)."""
    if np.iscomplexobj(values):
        raise ValueError("a matrix literal needs real values, got complex ones")
    values = np.asarray(values, dtype=float)
    if values.ndim != 2 or values.size == 0:
        raise ValueError(f"a matrix literal needs a non-empty 2-D matrix, got shape "
                         f"{values.shape}")
    if not np.isfinite(values).all():
        raise ValueError("a matrix literal needs finite values: it holds NaN or inf")
    rows = ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in values)
    return f".matrix {values.shape[0]}x{values.shape[1]} [{rows}]"


def expect_shape(operand: "Operand", shape: Shape, role: str) -> None:
    """OperandError naming the operand by its role unless it has `shape`."""
    if operand.shape != shape:
        raise OperandError(operand, f"{role} '{operand.name}' must be {shape[0]}x{shape[1]}, "
                                    f"is {operand.shape[0]}x{operand.shape[1]}")


def expect_real(operand: "Operand", role: str) -> None:
    """OperandError naming the operand by its role when it is an integer counter the expansion
    writes real values to: `k = rayleigh(A, v)` failed inside the expansion, at a line of a
    program the user never wrote."""
    if operand.integer:
        raise OperandError(operand, f"{role} '{operand.name}' is an integer counter; the "
                                    "routine writes real values to it")


class KeywordError(ValueError):
    """A bad keyword argument: the assembler points at `keyword=...` in the user's source
    rather than at the whole call."""

    def __init__(self, keyword: str, message: str) -> None:
        super().__init__(message)
        self.keyword = keyword


class OperandError(ValueError):
    """A bad operand (its shape, its kind): the assembler points at it in the user's source
    rather than at the whole call. `operand` is the call's own Operand (the destination or
    an argument), so a name passed twice is told apart by position."""

    def __init__(self, operand: "Operand", message: str) -> None:
        super().__init__(message)
        self.operand = operand


def count_keyword(call: "RoutineCall", name: str, maximum: int) -> int:
    """The keyword `name` as a count in 1..maximum (the range checked first, so that an inf
    from a literal past float64 gets this message); the cap keeps the expansion (or the
    run) to a size that fits the machine."""
    value = call.keywords[name]
    if not 1 <= value <= maximum or value != int(value):
        raise KeywordError(name, f"{name} must be an integer from 1 to {maximum}, got "
                                 f"{shown_keyword(value)}")
    return int(value)


def shown_keyword(value: float) -> str:
    """A keyword's value as a message names it: a literal past float64's range (1e999,
    read as inf) as such, not as 'inf', which nobody typed."""
    return f"{value:.15g}" if math.isfinite(value) else "a number past float64's range"


ROUTINES: dict[str, Routine] = {}


def register_routine(routine: Routine) -> Routine:
    if routine.name in ROUTINES:
        raise ValueError(f"routine {routine.name!r} registered twice")
    ROUTINES[routine.name] = routine
    return routine


__all__ = ["ROUTINES", "Expansion", "KeywordError", "Operand", "OperandError", "Routine",
           "RoutineCall", "count_keyword", "expect_real", "expect_shape", "matrix_literal",
           "register_routine"]
"""What a routine module needs, in one import (the signature types live in
`vm.common.signatures`, where the assembler reads them)."""
