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
