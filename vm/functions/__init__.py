"""The FLEQ function blocks, one registry (`REGISTRY`, filled by `@register`).

Adding a function is one `@register` class in a module of this package: every
module here is imported, so its blocks are registered.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Iterable

from vm.common.signatures import make_registered
from vm.functions.base import REGISTRY, FunctionBlock

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def make_block(name: str, **parameters: float) -> FunctionBlock:
    """A registered block with the given parameter values (defaults for the rest)."""
    return make_registered(REGISTRY, name, **parameters)


def dtype_parameters(dtype: str,
                     functions: Iterable[str] = REGISTRY) -> dict[str, dict[str, float]]:
    """Block parameters a dtype needs: in float32 the larger eps (`float32_scale`) of every
    linearized-softmax product among `functions`. Pass them to the assembler as `defaults`,
    so a program's `.function` headers and `--param` still win."""
    if dtype != "float32":
        return {}
    scales = {name: getattr(REGISTRY.get(name), "float32_scale", None) for name in functions}
    return {name: {"scale": scale} for name, scale in scales.items() if scale is not None}


__all__ = ["REGISTRY", "FunctionBlock", "dtype_parameters", "make_block"]
