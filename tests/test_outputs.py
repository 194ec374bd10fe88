"""vm/common/outputs.py: outputs written whole or not at all, under
any name the file system takes."""

from __future__ import annotations

import pytest

from vm.common.outputs import atomic_path
from vm.common.errors import InputError
from vm.common.outputs import check_directory, staged_files

LONGEST = 250
"""A valid file name's length (the limit is 255): the hidden staging name that repeated
all of it was too long ("File name too long", exit 2)."""


def test_a_file_with_the_longest_names_is_written_through_its_staging_name(tmp_path):
    target = tmp_path / ("a" * (LONGEST - 4) + ".npy")
    with atomic_path(target) as temporary:
        temporary.write_text("x")
    assert [path.name for path in tmp_path.iterdir()] == [target.name]


def test_a_directory_with_the_longest_names_is_written_through_its_staging_name(tmp_path):
    directory = tmp_path / ("d" * LONGEST)
    with staged_files(directory, ["weights.npz"]) as staging:
        (staging / "weights.npz").write_text("x")
    assert [path.name for path in tmp_path.iterdir()] == [directory.name]
    assert (directory / "weights.npz").read_text() == "x"


def test_a_symbolic_link_to_nothing_is_refused_before_any_work(tmp_path):
    """Every directory output (export -o, asm --export-csv, bench --out) built its files and
    then failed the final rename with 'Not a directory'."""
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "missing")
    with pytest.raises(InputError, match="symbolic link to .*missing, which does not exist"):
        check_directory(link, ["a.csv"])


def test_a_loop_of_symbolic_links_is_refused_as_a_loop(tmp_path):
    """Two links naming each other were reported as a link to a directory that does not
    exist, with the advice to create it (which the loop makes impossible)."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(InputError, match="it is a symbolic link that leads back to itself; "
                                         "name another directory"):
        check_directory(tmp_path / "a", ["a.csv"])
    with pytest.raises(InputError, match=r"out: .*a is a symbolic link that leads back to"):
        check_directory(tmp_path / "a" / "out", ["a.csv"])


def test_a_directory_under_a_link_to_nothing_names_the_link(tmp_path):
    (tmp_path / "link").symlink_to(tmp_path / "missing")
    with pytest.raises(InputError, match=r"link is a symbolic link to .*missing, which does "
                                         "not exist"):
        check_directory(tmp_path / "link" / "out", ["a.csv"])


def _directory_with(tmp_path, contents: dict[str, str]):
    directory = tmp_path / "out"
    directory.mkdir()
    for name, text in contents.items():
        (directory / name).write_text(text)
    return directory


def _contents(directory) -> dict[str, str]:
    return {path.name: path.read_text() for path in directory.iterdir()}


OLD = {"a.txt": "old a", "b.txt": "old b"}
NEW = {"a.txt": "new a", "b.txt": "new b"}
MOVES = 4
"""The renames replacing OLD by NEW: each old file set aside, each new one put in place."""


def _moves_with_ctrl_c(monkeypatch, at: int, before: bool, failing: int | None = None):
    """os.replace as staged_files calls it, with a real SIGINT raised at move `at` (counted
    from 1; before or after it is made or fails), and move `failing` failing with EACCES."""
    import errno
    import os
    import signal

    from vm.common import outputs

    replace, count = os.replace, [0]

    def move(source, destination) -> None:
        count[0] += 1
        if count[0] == at and before:
            signal.raise_signal(signal.SIGINT)
        try:
            if count[0] == failing:
                raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(destination))
            replace(source, destination)
        finally:
            if count[0] == at and not before:
                signal.raise_signal(signal.SIGINT)
    monkeypatch.setattr(outputs.os, "replace", move)


@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
@pytest.mark.parametrize("at", range(1, MOVES + 1))
def test_a_ctrl_c_between_the_moves_comes_once_every_file_is_in_place(tmp_path, monkeypatch,
                                                                      at, before):
    """A Ctrl-C between two moves skipped putting the old files back, and the cleanup then
    deleted the ones set aside: the output directory lost files it had held."""
    directory = _directory_with(tmp_path, OLD)
    _moves_with_ctrl_c(monkeypatch, at, before)
    with pytest.raises(KeyboardInterrupt):
        with staged_files(directory, NEW) as staging:
            for name, text in NEW.items():
                (staging / name).write_text(text)
    assert _contents(directory) == NEW


@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
@pytest.mark.parametrize("at", range(1, MOVES + 1))
def test_a_ctrl_c_while_a_failed_replace_is_undone_leaves_the_old_files(tmp_path, monkeypatch,
                                                                       at, before):
    """The third move (b.txt set aside) fails, so a.txt goes back: a Ctrl-C at any move up to
    and through that restore must still leave the directory as it was."""
    directory = _directory_with(tmp_path, OLD)
    _moves_with_ctrl_c(monkeypatch, at, before, failing=3)
    with pytest.raises(KeyboardInterrupt):
        with staged_files(directory, NEW) as staging:
            for name, text in NEW.items():
                (staging / name).write_text(text)
    assert _contents(directory) == OLD


def test_a_replaced_file_keeps_its_mode(tmp_path):
    """A plain open() keeps the mode of a file it overwrites; the rename put a new file with
    the umask's mode there instead, so a private (0600) output came back readable by all."""
    import os
    import stat

    target = tmp_path / "x.npy"
    target.write_text("old")
    os.chmod(target, 0o600)
    with atomic_path(target) as temporary:
        temporary.write_text("new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_text() == "new"


def test_a_file_replaced_in_a_directory_keeps_its_mode(tmp_path):
    """`ltvm export -o DIR` over a private (0600) DIR/weights.npz left it readable by all."""
    import os
    import stat

    directory = _directory_with(tmp_path, OLD)
    os.chmod(directory / "a.txt", 0o600)
    with staged_files(directory, NEW) as staging:
        for name, text in NEW.items():
            (staging / name).write_text(text)
    assert _contents(directory) == NEW
    assert stat.S_IMODE((directory / "a.txt").stat().st_mode) == 0o600


@pytest.mark.parametrize("existing", [False, True])
def test_a_new_file_gets_the_mode_open_gives_whatever_its_writer_gave(tmp_path, existing):
    """safetensors writes its file 0600: `ltvm export --format safetensors` left
    weights.safetensors private beside a layout.json readable by all."""
    import os
    import stat

    directory = _directory_with(tmp_path, OLD) if existing else tmp_path / "new"
    umask = os.umask(0o022)
    try:
        with staged_files(directory, ["w.bin"]) as staging:
            (staging / "w.bin").write_text("weights")
            os.chmod(staging / "w.bin", 0o600)
    finally:
        os.umask(umask)
    assert stat.S_IMODE((directory / "w.bin").stat().st_mode) == 0o644


@pytest.mark.parametrize("maker", ["mkstemp", "mkdtemp"])
def test_a_ctrl_c_as_the_hidden_file_is_made_leaves_nothing_behind(tmp_path, monkeypatch,
                                                                   maker):
    """A Ctrl-C landing as mkstemp (atomic_path) or mkdtemp (staged_files) returned came
    before the cleanup was set up, and the hidden file or directory stayed beside the output."""
    import signal
    import tempfile

    made = getattr(tempfile, maker)

    def make_then_ctrl_c(*args, **kwargs):
        hidden = made(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)
        return hidden
    monkeypatch.setattr(tempfile, maker, make_then_ctrl_c)
    written = (atomic_path(tmp_path / "x.npy") if maker == "mkstemp"
               else staged_files(tmp_path / "out", ["a.txt"]))
    with pytest.raises(KeyboardInterrupt):
        with written:
            pytest.fail("the block ran, though Ctrl-C came before it")
    assert list(tmp_path.iterdir()) == []


def test_a_loop_of_symbolic_links_is_refused_not_replaced(tmp_path):
    """A plain open() fails on a loop of links ('Too many levels of symbolic links'); the
    rename put the file in the loop's place, and the links were gone."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.symlink_to(second)
    second.symlink_to(first)
    with pytest.raises(InputError, match="first: it is a loop of symbolic links"):
        with atomic_path(first) as temporary:
            temporary.write_text("x")
    assert first.is_symlink() and second.is_symlink()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["first", "second"]


def test_a_link_that_cannot_be_written_is_named_as_given(tmp_path):
    """The message named only where the link led (`-o /dev/stdout` with standard output
    closed said 'cannot write /proc/8121/fd/1'), not the path the user gave."""
    link = tmp_path / "x.npy"
    link.symlink_to(tmp_path / "missing" / "x.npy")
    with pytest.raises(InputError, match=r"cannot write .*x\.npy \(a link to .*missing/x\.npy\)"):
        with atomic_path(link):
            pass
