"""What the assembler knows of FLEQ function blocks and routines: their signatures.

The blocks (`vm.functions`) and routines (`vm.routines`) live above the assembler; it never
imports them. Whoever owns them (the FLEQ instruction set, `vm.isa.fleq`) hands the
assembler a `Catalogue`, and the assembler checks names, arity, shapes and parameters
against the signatures it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Protocol

from vm.common.errors import InputError

Shape = tuple[int, int]

MAGNITUDE_BITS = 50
MAGNITUDE = 2.0 ** MAGNITUDE_BITS
"""Every value a FLEQ program holds stays within |x| <= 2^50. The machine isolates blocks
by offsets of 2^60 (docs/fleq_machine.md, offset gating); values near 2^59 defeat them and
corrupt other cells (2e18 + 2e18 turned 3 + 4 into 2.3e18). 2^50 leaves a factor 512 for
what one step computes from values in the domain; the assembler refuses literals outside
it and the exact replay flags the first value that leaves it."""


class BlockSignature(Protocol):
    """A function block as the assembler sees it: built with parameter values, it knows
    its arity, its result shape, and whether integers stay integers."""

    name: str
    arity: int
    integer_preserving: bool
    integer_result: bool
    values: dict[str, float]

    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        """Result shape for operand shapes, or ValueError with a readable reason."""


def make_registered(blocks: Mapping[str, Callable[..., BlockSignature]], name: str,
                    **parameters: float) -> BlockSignature:
    """Block `name` of `blocks` with the given parameter values (defaults for the rest);
    InputError for an unknown name or parameter."""
    if name not in blocks:
        raise InputError(f"unknown function '{name}' (registered: {', '.join(sorted(blocks))})")
    try:
        return blocks[name](**parameters)
    except ValueError as error:
        raise InputError(str(error)) from None


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


@dataclass(frozen=True)
class Catalogue:
    """The blocks and routines a FLEQ program may call, as the assembler receives them."""

    blocks: Mapping[str, Callable[..., BlockSignature]]
    routines: Mapping[str, Routine]

    def make_block(self, name: str, **parameters: float) -> BlockSignature:
        return make_registered(self.blocks, name, **parameters)

    def block_names(self) -> str:
        """The registered block names, sorted, for error messages."""
        return ", ".join(sorted(self.blocks))
