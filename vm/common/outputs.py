"""Output files written whole or not at all: a set of files goes into a directory only
when every one of them was written, and what it replaces comes back if a move fails."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from vm.common.errors import InputError, shown_path
from vm.common.signals import signals_held_back

PREVIOUS = ".previous"
"""Where `staged_files` keeps the files it replaces until all the new ones are in place."""
STAGED_NAME = 64
"""Characters of an output's name that its hidden staging name repeats: the whole of a
valid 250-character name made the staging name longer than a file name may be (255)."""


def check_directory(directory: str | Path, names: Iterable[str]) -> Path:
    """`directory` as a Path, once it is clear that the files `names` can be written there:
    refused up front (before any work or write) when the path is empty, its parent is
    missing, it is a symbolic link to nothing (the final rename failed with 'Not a
    directory'), it is not a directory, or one of the names is taken by anything but a
    regular file (a directory, a link, a pipe), which replacing it would lose or bypass."""
    if not isinstance(directory, (str, os.PathLike)):  # Path(5) raised a TypeError
        raise InputError(f"the output directory must be a path, got {directory!r}")
    if not str(directory):  # Path("") would silently be the current directory
        raise InputError("the output directory is an empty path")
    directory = Path(directory)
    if directory.is_symlink() and not directory.exists():
        link, advice = _broken_link(directory)
        raise InputError(f"cannot write {shown_path(directory)}: it is {link}; {advice}")
    if directory.exists():
        if not directory.is_dir():
            raise InputError(f"cannot write {shown_path(directory)}: it exists and is not a "
                             "directory")
        for name in names:
            path = directory / name
            if os.path.lexists(path) and not stat.S_ISREG(path.lstat().st_mode):
                what = ("a symbolic link" if path.is_symlink() else
                        "a directory" if path.is_dir() else "not a regular file")
                raise InputError(f"cannot write {shown_path(path)}: it is {what}")
    elif directory.parent.is_symlink() and not directory.parent.exists():
        raise InputError(f"cannot write {shown_path(directory)}: "
                         f"{shown_path(directory.parent)} is {_broken_link(directory.parent)[0]}")
    elif refusal := refused_directory(directory.parent):
        raise InputError(f"cannot write {shown_path(directory)}: {refusal}")
    return directory


def _broken_link(link: Path) -> tuple[str, str]:
    """What the symbolic link `link`, which leads nowhere, is, and what to do about it: a
    chain of links that comes back on itself was reported as a link to a directory that
    does not exist."""
    try:
        link.stat()
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "a symbolic link that leads back to itself", "name another directory"
    return (f"a symbolic link to {os.readlink(link)}, which does not exist",
            "create that directory or name another")


def refused_directory(directory: Path) -> str:
    """Why no file can be made in `directory` as far as its type and mode say ('' when
    one can): missing, not a directory, or not writable. Root passes the last anywhere;
    `refused_creation` asks the file system itself."""
    if not directory.exists():
        return f"directory {shown_path(directory)} does not exist"
    if not directory.is_dir():
        return f"{shown_path(directory)} is not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"directory {shown_path(directory)} is not writable"
    return ""


def refused_creation(directory: str | Path) -> str:
    """Why nothing can be created in `directory` ('' when something can), found by creating
    and removing an empty directory there: access() lets root write anywhere, so an output
    under /proc or /sys passed the checks and failed after all the work. Signals wait until
    it is removed, as in `staged_files`."""
    try:
        with signals_held_back():
            os.rmdir(tempfile.mkdtemp(dir=directory, prefix=".ltvm-check."))
    except OSError as error:
        return error.strerror or str(error)
    return ""


def check_output_directory(directory: Path, names: Iterable[str]) -> None:
    """InputError unless `directory` is a writable directory or can be made one, with no
    directory in the way of the files `names`: for work of minutes that writes them at its
    end (`staged_files`), checked before it, without making anything, so that work which
    fails leaves no empty directory behind."""
    if directory.exists():
        if not directory.is_dir():
            raise InputError(f"cannot write into {shown_path(directory)}: it is not a "
                             "directory")
        refusal = refused_creation(directory)
        if refusal:
            raise InputError(f"cannot write into {shown_path(directory)}: {refusal}")
        for name in names:
            if (directory / name).is_dir():
                raise InputError(f"cannot write {shown_path(directory / name)}: it is a "
                                 "directory")
        return
    ancestor = next(parent for parent in directory.absolute().parents if parent.exists())
    if not ancestor.is_dir():
        raise InputError(f"cannot create {shown_path(directory)}: {shown_path(ancestor)} is "
                         "not a directory")
    refusal = refused_creation(ancestor)
    if refusal:
        raise InputError(f"cannot create {shown_path(directory)} in {shown_path(ancestor)}: "
                         f"{refusal}")


def _failure(error: OSError, staging: Path, directory: Path) -> str:
    """What went wrong, at the path the user named rather than the hidden staging one."""
    where = directory
    if isinstance(error.filename, str):
        try:
            where = directory / Path(error.filename).relative_to(staging)
        except ValueError:
            where = Path(error.filename)
    return f"cannot write {where}: {error.strerror or error}"


@contextmanager
def staged_files(directory: str | Path, names: Iterable[str],
                 remove: Iterable[str] = ()) -> Iterator[Path]:
    """A hidden directory for the block to write the files `names` into. Only when the block
    succeeds do they replace those in `directory` (created if missing) and the files
    `remove` go; a failure anywhere leaves `directory` as it was, so an output is never a
    mix of two runs or half of one. Errors name the user's paths, never the staging ones.
    A new file gets the mode a plain open() gives it whatever its writer gave it, a file it
    replaces keeps its own."""
    names, remove = tuple(names), tuple(remove)
    directory = check_directory(directory, names + remove)
    exists = directory.exists()
    staging, keep_staging = None, False
    try:
        with signals_held_back():  # a Ctrl-C as mkdtemp returned left its directory behind
            try:
                # Inside an existing directory (the same file system, even for a mount
                # point), else beside it, so that every move below is a rename.
                staging = Path(tempfile.mkdtemp(
                    dir=directory if exists else directory.parent,
                    prefix=f".{directory.name[:STAGED_NAME] or 'ltvm'}."))
            except OSError as error:
                raise InputError(f"cannot write {shown_path(directory)}: "
                                 f"{error.strerror or error}") from None
        try:
            yield staging
        except OSError as error:
            raise InputError(_failure(error, staging, directory)) from None
        for name in names:  # safetensors writes its file 0600, beside 0644 ones
            if (staging / name).is_file():
                os.chmod(staging / name, _open_mode())
        if exists:
            with signals_held_back():  # a Ctrl-C between two moves lost the files set aside
                failure = _replace_files(staging, directory, names, remove)
                keep_staging = bool(failure) and any((staging / PREVIOUS).iterdir())
            if failure:
                raise InputError(failure)
        else:
            umask = os.umask(0)
            os.umask(umask)
            try:
                os.chmod(staging, 0o777 & ~umask)  # what mkdir gives; mkdtemp's is 0700
                os.rename(staging, directory)
            except OSError as error:
                raise InputError(f"cannot write {shown_path(directory)}: {error.strerror or error}"
                                 ) from None
    finally:
        if staging is not None and not keep_staging:
            shutil.rmtree(staging, ignore_errors=True)


def _replace_files(staging: Path, directory: Path, names: tuple[str, ...],
                   remove: tuple[str, ...]) -> str | None:
    """Move the staged `names` onto `directory` and set aside `remove`, all or nothing: the
    files replaced wait in staging/PREVIOUS until every move has succeeded, and go back if
    one fails. None, or what failed (then `directory` is as it was, or the message names
    the files that could not go back and are still in staging/PREVIOUS)."""
    previous = staging / PREVIOUS
    previous.mkdir()
    done: list[tuple[str, bool]] = []
    for name in (*names, *remove):
        try:
            had = os.path.lexists(directory / name)
            if had and name in names:  # as a plain open() keeps it: a 0600 file stays private
                os.chmod(staging / name, stat.S_IMODE((directory / name).stat().st_mode))
            if had:
                os.replace(directory / name, previous / name)
            done.append((name, had))
            if name in names:
                os.replace(staging / name, directory / name)
        except OSError as error:
            failure = f"cannot write {directory / name}: {error.strerror or error}"
            break
    else:
        return None
    lost = []
    for name, had in reversed(done):
        try:
            if had:
                os.replace(previous / name, directory / name)
            else:
                (directory / name).unlink(missing_ok=True)
        except OSError:
            lost.append(name)
    if lost:
        failure += f"; could not put back {', '.join(lost)}, which are kept in {previous}"
    return failure


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """A temporary path renamed onto `target` only if the block succeeds,
    so a failed command never leaves a half-written file. The file gets the mode a plain
    open() would give it (mkstemp's is 0600): a file it replaces keeps its own (a private
    0600 file came back readable by all), a new one gets 0666 less the umask. A symbolic
    link keeps pointing where it did (the file it names is replaced; a loop of links, which
    names no file, is refused: the file took its place); a device or pipe, which
    has no contents to replace, is written in place (`-o /dev/null`)."""
    target = Path(target)
    if target.is_dir():
        raise InputError(f"cannot write {shown_path(target)}: it is a directory")
    if target.exists() and not target.is_file():
        yield target
        return
    written = shown_path(target)
    if target.is_symlink():
        target = Path(os.path.realpath(target))
        if target.is_symlink():  # where realpath stopped, going round
            raise InputError(f"cannot write {written}: it is a loop of symbolic links")
        written = f"{written} (a link to {shown_path(target)})"
    refusal = refused_directory(target.parent)
    if refusal:
        raise InputError(f"cannot write {written}: {refusal}")
    temporary = None
    try:
        with signals_held_back():  # a Ctrl-C as mkstemp returned left its file behind
            try:
                handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=target.suffix,
                                                     prefix=f".{target.name[:STAGED_NAME]}.")
            except OSError as error:
                raise InputError(f"cannot write {written}: {error.strerror}") from None
            os.close(handle)
        os.chmod(temporary, stat.S_IMODE(target.stat().st_mode) if target.exists()
                 else _open_mode())
        yield Path(temporary)
        os.replace(temporary, target)
    finally:
        if temporary is not None and os.path.exists(temporary):
            os.unlink(temporary)


def _open_mode() -> int:
    """The mode a plain open() gives a new file: 0666 less the umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def is_standard_output(path: str | Path) -> bool:
    """Does `path` name what standard output writes to (/dev/stdout, or x.npy in `-o x.npy >
    x.npy`)? Writing it through a temporary file and a rename replaced the file the shell had
    opened (`>>` lost what it held), and a summary printed to standard output then went into
    nothing, or into a pipe after the data. False when standard output is no file (closed,
    or captured in memory), and for a device that keeps nothing (`-o /dev/null > /dev/null`
    silences both, as before); a terminal is standard output, for the caller to refuse."""
    try:
        status = os.stat(path)
        return (os.path.samestat(status, os.fstat(sys.stdout.fileno()))
                and (not stat.S_ISCHR(status.st_mode) or sys.stdout.isatty()))
    except (OSError, ValueError, AttributeError):
        return False
