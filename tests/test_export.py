"""The export contract: three files that a 20-line numpy Eq. (1) can run.

The executor (tests/export_executor.py) imports nothing from the project: it is
what a reader of README's "Exported weights" would write.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest

from export_executor import pc_code, run_exported, subleq_memory
from vm.cli import main

ROOT = Path(__file__).resolve().parents[1]


def reference_memory(program: str) -> list[int]:
    from assembler.subleq import assemble_file
    from vm.machines.subleq.reference import run_reference
    return run_reference(assemble_file(ROOT / program)).memory


@pytest.mark.parametrize("program,attention", [
    ("programs/subleq/gcd.sq", "masked"),
    ("programs/subleq/multiply.sq", "dense"),
    ("programs/subleq/reverse.sq", "masked"),
])
def test_independent_numpy_run_of_an_export_matches_the_reference(tmp_path, program, attention):
    out = tmp_path / "export"
    assert main(["export", str(ROOT / program), "-o", str(out), "--attention", attention]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["layout.json", "punchcard.npy",
                                                     "weights.npz"]
    X, layout, _ = run_exported(out, max_steps=1000)
    assert pc_code(X, layout) == layout["halt_pc"]
    assert subleq_memory(X, layout) == reference_memory(program)


def test_weights_meta_follows_the_format(tmp_path):
    out = tmp_path / "e"
    main(["export", str(ROOT / "programs/subleq/gcd.sq"), "-o", str(out)])
    weights = np.load(out / "weights.npz", allow_pickle=False)
    meta = json.loads(str(weights["meta"]))
    assert meta["format"] == "looped-transformer/1"
    assert meta["layers"] == len(meta["heads"]) == 4
    assert meta["rows"] == weights["l0.W1"].shape[1] == weights["l0.h0.V"].shape[0]
    assert weights["l0.h0.mask"].shape == (meta["columns"], meta["columns"])
    assert set(np.unique(weights["l0.h0.mask"])) == {0.0, -np.inf}
    assert meta["geometry"]["columns"] == meta["columns"]
    assert weights["l2.W1"].shape[0] == weights["l2.W2"].shape[1]


def test_export_refuses_a_directory_with_other_files_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    code = main(["export", str(ROOT / "programs/subleq/gcd.sq"), "-o", str(tmp_path)])
    assert code == 2 and "holds other files" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


GCD = str(ROOT / "programs/subleq/gcd.sq")


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` (hidden ones too) with a file's bytes, None for a directory."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


def test_a_blocked_destination_is_refused_before_anything_moves(tmp_path, capsys):
    """A directory where punchcard.npy goes used to fail after weights.npz and layout.json
    had moved in, and the error named the hidden staging directory."""
    out = tmp_path / "pe2"
    (out / "punchcard.npy").mkdir(parents=True)
    before = tree(tmp_path)
    code = main(["export", GCD, "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"cannot write {out / 'punchcard.npy'}: it is a directory" in err
    assert ".pe2." not in err
    assert tree(tmp_path) == before


def test_a_failure_while_moving_puts_the_previous_export_back(tmp_path, capsys, monkeypatch):
    out = tmp_path / "export"
    assert main(["export", GCD, "-o", str(out), "--attention", "dense"]) == 0
    before = tree(tmp_path)
    real_replace = os.replace

    def failing(src, dst):
        if Path(dst) == out / "punchcard.npy" and ".previous" not in str(src):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    code = main(["export", GCD, "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"cannot write {out / 'punchcard.npy'}: No space left" in err
    assert tree(tmp_path) == before


def test_a_file_that_cannot_go_back_is_kept_and_named(tmp_path, capsys, monkeypatch):
    out = tmp_path / "export"
    assert main(["export", GCD, "-o", str(out), "--attention", "dense"]) == 0
    old_layout = (out / "layout.json").read_bytes()
    real_replace = os.replace

    def failing(src, dst):
        moving_in = ".previous" not in str(src)
        if (Path(dst) == out / "punchcard.npy" and moving_in
                or Path(dst) == out / "layout.json" and not moving_in):
            raise OSError(errno.EIO, "Input/output error", str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    assert main(["export", GCD, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "could not put back layout.json, which are kept in " in err
    kept = Path(err.split("which are kept in ")[1].strip()) / "layout.json"
    assert kept.read_bytes() == old_layout


def test_a_write_error_names_the_users_path_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    """`-o /proc/x` reported `No such file or directory: /proc/.x.v57v3g7n`."""
    out = tmp_path / "export"

    def full_disk(path, array):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(np, "save", full_disk)
    assert main(["export", GCD, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"ltvm: error: cannot write {out / 'punchcard.npy'}: No space left on device\n"
    assert list(tmp_path.iterdir()) == []


def test_an_empty_output_path_is_refused(tmp_path, capsys, monkeypatch):
    """Path('') is the current directory: `-o ''` used to export into it."""
    monkeypatch.chdir(tmp_path)
    assert main(["export", GCD, "-o", ""]) == 2
    assert "empty path" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_new_export_directory_gets_the_mode_of_a_plain_mkdir(tmp_path):
    old = os.umask(0o027)
    try:
        assert main(["export", GCD, "-o", str(tmp_path / "export")]) == 0
    finally:
        os.umask(old)
    assert (tmp_path / "export").stat().st_mode & 0o777 == 0o750


def test_an_export_at_an_unproven_temperature_warns(tmp_path, capsys):
    """Runs check every pass at such a temperature; an exported executor would not, so the
    export says its reads are not provably exact (and still writes the weights to study)."""
    factorial = str(ROOT / "programs" / "subleq" / "factorial.sq")
    assert main(["export", factorial, "-o", str(tmp_path / "safe")]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["export", factorial, "--temperature", "0.5", "-o", str(tmp_path / "hot")]) == 0
    err = capsys.readouterr().err
    assert "warning: at temperature 0.5 the reads of these weights are not provably exact" in err
    assert (tmp_path / "hot" / "weights.npz").is_file()


def test_a_file_system_that_reports_no_size_does_not_refuse_as_full(tmp_path, monkeypatch,
                                                                    capsys):
    """/proc reports total = free = 0: `export -o /proc/x` said the export needed 0.0 GiB,
    more than the 0.0 GiB free, instead of why /proc/x cannot be written."""
    import collections

    import vm.runtime.export
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(vm.runtime.export.shutil, "disk_usage", lambda path: usage(0, 0, 0))
    factorial = str(ROOT / "programs" / "subleq" / "factorial.sq")
    assert main(["export", factorial, "-o", str(tmp_path / "out")]) == 0
    assert "GiB" not in capsys.readouterr().err


def _subleq_export_inputs():
    from assembler.subleq import assemble_file
    from vm.machines.subleq.machine import subleq_machine
    from vm.machines.subleq.punchcard import geometry_for
    program = assemble_file(ROOT / "programs/subleq/gcd.sq")
    machine = subleq_machine(geometry_for(program))
    return machine, machine.encode(program)


@pytest.mark.parametrize("bad,message", [
    (lambda card: np.full_like(card, np.nan), "finite"),
    (lambda card: card[:3], "shape"),
    (lambda card: card.tolist(), "numpy array"),
    (lambda card: card.astype(np.int64), "float32 or float64"),
])
def test_export_refuses_a_punchcard_no_executor_could_run(tmp_path, bad, message):
    """A NaN or cut punchcard was exported without a word; a list failed on `.dtype`."""
    from vm.common.errors import InputError
    from vm.runtime.export import export
    machine, card = _subleq_export_inputs()
    with pytest.raises(InputError, match=message):
        export(tmp_path / "out", machine.weights, machine.layout, bad(card), 8, True, {})
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("directory", [5, None])
def test_export_refuses_a_directory_that_is_not_a_path(directory):
    from vm.common.errors import InputError
    from vm.runtime.export import export
    machine, card = _subleq_export_inputs()
    with pytest.raises(InputError, match="must be a path"):
        export(directory, machine.weights, machine.layout, card, 8, True, {})
