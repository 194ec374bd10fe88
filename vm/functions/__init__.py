"""The FLEQ function blocks, one registry (`REGISTRY`, filled by `@register`).

Adding a function is one registered class in a module imported below.
"""

from __future__ import annotations

from vm.errors import InputError
from vm.functions.base import REGISTRY, FunctionBlock

from vm.functions import arithmetic, products, sigmoid_sums  # noqa: E402,F401  (registration)


def make_block(name: str, **parameters: float) -> FunctionBlock:
    """A registered block with the given parameter values (defaults for the rest)."""
    if name not in REGISTRY:
        raise InputError(f"unknown function '{name}' (registered: {', '.join(sorted(REGISTRY))})")
    try:
        return REGISTRY[name](**parameters)
    except ValueError as error:
        raise InputError(str(error)) from None


__all__ = ["REGISTRY", "FunctionBlock", "make_block"]
