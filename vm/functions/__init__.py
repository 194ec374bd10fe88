"""The FLEQ function blocks, one registry (`REGISTRY`, filled by `@register`).

Adding a function is one `@register` class in a module of this package: every
module here is imported, so its blocks are registered.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable

from vm.common.errors import InputError
from vm.common.signatures import make_registered
from vm.functions.base import BOUND_DTYPES, REGISTRY, FunctionBlock

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def make_block(name: str, **parameters: float) -> FunctionBlock:
    """A registered block with the given parameter values (defaults for the rest)."""
    return make_registered(REGISTRY, name, **parameters)


def dtype_parameters(dtype: str,
                     functions: Iterable[str] = REGISTRY) -> dict[str, dict[str, float]]:
    """Block parameters a dtype needs: in float32 the larger eps (`float32_scale`) of every
    linearized-softmax product among `functions`, and each block's `float32_values` (no
    Newton steps for the sigmoid sums). Pass them to the assembler as `defaults`,
    so a program's `.function` headers and `--param` still win. A dtype the machine does not
    run and names of no block are refused: 'float16' or None answered float64's {}, 'mul'
    (a str) and unknown names {} too, functions=None a TypeError."""
    if dtype not in BOUND_DTYPES:
        raise InputError(f"dtype must be one of {', '.join(BOUND_DTYPES)}, got {dtype!r:.40}")
    if isinstance(functions, (str, bytes)) or not isinstance(functions, Iterable):
        raise InputError(f"functions must be a list of block names, got {functions!r:.40}")
    functions = list(functions)
    unknown = [name for name in functions if not (isinstance(name, str) and name in REGISTRY)]
    if unknown:
        raise InputError(f"unknown function {unknown[0]!r:.40} (registered: "
                         f"{', '.join(sorted(REGISTRY))})")
    if dtype != "float32":
        return {}
    values = {}
    for name in functions:
        block = REGISTRY.get(name)
        scale = getattr(block, "float32_scale", None)
        own = {**getattr(block, "float32_values", {}),
               **({"scale": scale} if scale is not None else {})}
        if own:
            values[name] = own
    return values


__all__ = ["REGISTRY", "FunctionBlock", "dtype_parameters", "make_block"]
