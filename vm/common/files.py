"""Opening the files users name: inputs that must be regular files, and named pipes, which
are opened without blocking in silence; what a malformed .npy raises."""

from __future__ import annotations

import errno
import os
import select
import stat
import sys
import tokenize
from pathlib import Path
from typing import BinaryIO

from vm.common.errors import InputError, shown_path


NPY_FORMAT_ERRORS: tuple[type[Exception], ...] = (ValueError, OverflowError, SyntaxError,
                                                  tokenize.TokenError)
"""What numpy raises on a malformed .npy header: its own ValueError, an OverflowError for a
shape past what can be mapped, and from the parser it falls back to, tokenize.TokenError (an
unclosed '{') and SyntaxError or IndentationError (a descr of ',6<f8', a line indented
less than the one before): the last three reached the user as a traceback."""


def require_regular_file(path: str | Path, expected: str) -> None:
    """InputError unless `path` names a regular file (links followed): a FIFO with no
    writer blocks open() forever, /dev/zero never ends, and numpy's memory map and a zip
    archive (read from its end) need a file they can seek in. `expected` says what the file
    should hold, for the message. A number is refused: os.stat and open take it as a file
    descriptor, so load_dataset(5) read, and then closed, whatever descriptor 5 was."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"a path must be a str, bytes or os.PathLike, got {type(path).__name__} "
                        f"{path!r}")
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        raise InputError(f"cannot read {shown_path(path)}: {error.strerror or error}") from None
    if not stat.S_ISREG(mode):
        raise InputError(f"cannot read {shown_path(path)}: not a regular file (expected "
                         f"{expected})")


PIPE_NOTICE_SECONDS = 1.0
"""How long a named pipe may stay silent before reading it says what it waits for."""


def open_for_reading(path: str | Path) -> int:
    """A descriptor of `path` ready to read. A named pipe with no writer blocked open()
    forever in silence: it is opened without waiting, and when nothing has written to it
    within PIPE_NOTICE_SECONDS a line on stderr says that the command waits for a writer
    (Ctrl-C stops it), as `cat` would wait; bash's <(...) arrives at once."""
    if "\0" in os.fspath(path):  # os.open's ValueError reached the REPL as "embedded null byte"
        raise InputError(f"cannot read {shown_path(path)}: a path cannot hold a NUL character")
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if stat.S_ISFIFO(os.fstat(descriptor).st_mode):
            ready = select.poll()
            ready.register(descriptor, select.POLLIN)
            if not ready.poll(PIPE_NOTICE_SECONDS * 1000):
                print(f"ltvm: waiting for a program to write to {shown_path(path)} (a pipe; Ctrl-C "
                      f"stops)", file=sys.stderr, flush=True)
                ready.poll()
        os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def open_for_writing(path: Path) -> BinaryIO:
    """`path` (what `atomic_path` yields: a new file, or a device or pipe written in place)
    opened to write bytes. A named pipe that no program reads blocked open() in silence,
    forever when none came: it is tried without waiting, and while it has no reader a line
    on stderr says what the command waits for (Ctrl-C stops it), as reading a pipe does."""
    flags = os.O_WRONLY | os.O_TRUNC
    try:
        descriptor = os.open(path, flags | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        if error.errno != errno.ENXIO:  # ENXIO: a pipe that nothing reads yet
            raise
        print(f"ltvm: waiting for a program to read {shown_path(path)} (a pipe; Ctrl-C stops)",
              file=sys.stderr, flush=True)
        descriptor = os.open(path, flags)
    os.set_blocking(descriptor, True)
    return open(descriptor, "wb")
