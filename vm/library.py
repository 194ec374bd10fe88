"""Composite FLEQ routines, registered by name and expanded by the assembler.

`X = inverse(A, iters=10)` in a .fleq file is not a function block: the
assembler asks the routine for FLEQ text (data lines for its temporaries and
constants, code lines that call only registered function blocks) and splices
it in place of the call. Generated names start with `_` (a prefix users may
not use), so they never collide with the program's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from assembler.fleq_program import Shape


@dataclass(frozen=True)
class Operand:
    """A variable as a routine sees it."""

    name: str
    shape: Shape
    integer: bool


@dataclass(frozen=True)
class RoutineCall:
    destination: Operand
    arguments: tuple[Operand, ...]
    keywords: dict[str, float]
    prefix: str
    """Unique prefix (starting with '_') for the names and labels the expansion introduces."""

    def name(self, suffix: str) -> str:
        return f"{self.prefix}_{suffix}"


@dataclass(frozen=True)
class Expansion:
    data: list[str]
    code: list[str]


@dataclass(frozen=True)
class Routine:
    name: str
    summary: str
    arity: int
    keywords: dict[str, float]
    """Accepted keyword arguments and their defaults."""
    expand: Callable[[RoutineCall], Expansion]


ROUTINES: dict[str, Routine] = {}


def register_routine(routine: Routine) -> Routine:
    if routine.name in ROUTINES:
        raise ValueError(f"routine {routine.name!r} registered twice")
    ROUTINES[routine.name] = routine
    return routine
