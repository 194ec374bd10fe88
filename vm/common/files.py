"""Input files that are opened only when they are regular files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from vm.common.errors import InputError


def require_regular_file(path: str | Path, expected: str) -> None:
    """InputError unless `path` names a regular file (links followed): a FIFO with no
    writer blocks open() forever, /dev/zero never ends, and numpy's memory map and a zip
    archive (read from its end) need a file they can seek in. `expected` says what the file
    should hold, for the message."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror or error}") from None
    if not stat.S_ISREG(mode):
        raise InputError(f"cannot read {path}: not a regular file (expected {expected})")
