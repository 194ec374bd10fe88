"""vm/common/files.py: only regular files are opened as inputs."""

from __future__ import annotations

import os

import pytest

from vm.common.errors import InputError
from vm.common.files import open_for_reading, require_regular_file


def test_a_regular_file_and_a_link_to_one_pass(tmp_path):
    data = tmp_path / "data.npy"
    data.write_bytes(b"x")
    (tmp_path / "link.npy").symlink_to(data)
    require_regular_file(data, "an array")
    require_regular_file(tmp_path / "link.npy", "an array")


def test_a_fifo_a_directory_and_a_device_are_refused_saying_what_was_expected(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for path in (tmp_path / "fifo", tmp_path, "/dev/null"):
        with pytest.raises(InputError, match=r"not a regular file \(expected an array\)"):
            require_regular_file(path, "an array")


def test_a_missing_file_and_a_dangling_link_say_why(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    for path in (tmp_path / "missing", tmp_path / "dangling"):
        with pytest.raises(InputError, match="cannot read .*: No such file or directory"):
            require_regular_file(path, "an array")


def test_a_path_with_a_nul_character_is_refused_by_name():
    """`load a\\x00b.sq` in the REPL printed "error: ValueError: embedded null byte"."""
    with pytest.raises(InputError, match="a path cannot hold a NUL character"):
        open_for_reading("a\0b.sq")


@pytest.mark.parametrize("path", [5, 5.0, None])
def test_a_path_that_is_no_str_or_pathlike_is_refused(path):
    """os.stat(5) is file descriptor 5: load_dataset(5) read it and closed it."""
    with pytest.raises(TypeError, match="a path must be a str, bytes or os.PathLike"):
        require_regular_file(path, "an array")
