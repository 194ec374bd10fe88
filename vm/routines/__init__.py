"""The registered FLEQ routines (`ROUTINES`, filled by `register_routine`).

Adding a routine is one module in this package that calls `register_routine`:
every module here is imported, so its routines are registered.
"""

from __future__ import annotations

import importlib
import pkgutil

from vm.routines.base import ROUTINES, register_routine

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ROUTINES", "register_routine"]
