"""The registered FLEQ routines (`ROUTINES`, filled by `register_routine`).

Adding a routine is one `register_routine` call in a module imported below.
"""

from __future__ import annotations

from vm.library import ROUTINES, register_routine

__all__ = ["ROUTINES", "register_routine"]
