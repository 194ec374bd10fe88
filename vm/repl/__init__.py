"""The interactive debugger (`ltvm repl`): session commands, lockstep state, names,
typed instructions, the terminal front end.

Sits on top: may import anything below it (assembler, runtime, tools, `vm.isa`).
The defaults below live here, torch-free, because `ltvm repl`'s options name them.
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path

from vm.common.errors import InputError

ENGINES = ("transformer", "reference")
DEFAULT_PICTURE_DIR = Path("out/repl")
DEFAULT_MAX_STEPS = 1_000_000
"""Steps one `step`, `run` or `continue` may take before it stops by itself (Ctrl-C stops it
sooner)."""


def check_max_seconds(max_seconds: float | None) -> float | None:
    """`max_seconds` if it is None (no limit) or a finite number above 0, else InputError:
    the wall time one `step`, `run` or `continue` may take."""
    if max_seconds is not None and not (isinstance(max_seconds, numbers.Real) and
                                        not isinstance(max_seconds, bool) and
                                        math.isfinite(max_seconds) and max_seconds > 0):
        raise InputError(f"max_seconds must be a positive number of seconds or None, got "
                         f"{max_seconds!r}")
    return max_seconds
