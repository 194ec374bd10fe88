"""`ltvm export`, `inspect` and `asm` against hostile-but-realistic inputs: each case failed
(a traceback, a wrong exit code, a misleading text or a blow-up) before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vm.cli import main

GCD = Path(__file__).resolve().parents[1] / "programs" / "subleq" / "gcd.sq"


def test_an_onnx_export_past_2_gib_is_refused_before_the_model_is_built(tmp_path, capsys):
    """n = 16,406 masked: the n x n float64 mask alone passes protobuf's 2 GiB. The model was
    built first (about a minute and over 10 GB of memory at n = 20,000) and protobuf's
    EncodeError came out as a traceback with exit code 1."""
    pytest.importorskip("onnx")
    source = tmp_path / "big.sq"
    source.write_text(".data\nbig: .zero 16400\nz: 0\n.code\n subleq z, z\n")
    out = tmp_path / "export"
    assert main(["export", str(source), "-o", str(out), "--format", "onnx"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltvm: error: the weights take 2.01 GiB, more than one ONNX file")
    assert "--attention dense" in err and err.count("\n") == 1
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["big.sq"]


def test_asm_refuses_o_naming_the_export_csv_directory_before_writing_x(tmp_path, capsys):
    """`asm P -o D --export-csv D` with D new: -o wrote X at D, then --export-csv failed
    ('D exists and is not a directory', exit 2), leaving the X of a failed command."""
    target = tmp_path / "out"
    assert main(["asm", str(GCD), "-o", str(target), "--export-csv", str(target)]) == 2
    err = capsys.readouterr().err
    assert err == (f"ltvm: error: -o {target} is the --export-csv directory: X and the CSV "
                   "files cannot both go there; choose another file\n")
    assert not target.exists()


def test_export_help_says_how_a_standard_subleq_export_halts_and_where_its_output_is(
        tmp_path, capsys):
    """The help said, for every machine, to loop 'while the pc code differs from halt_pc';
    a .vsq/.dec export's layout.json has no halt_pc (a KeyError, or a loop that never ends)
    and the help named neither halted_field nor the output tape. Its recipe now runs a
    program that prints "Hi" to its output."""
    from export_executor import code, eq1_pass, load_export

    with pytest.raises(SystemExit):
        main(["export", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in ("no halt_pc: loop while the halted_field row of pc_column is 0",
                  "the region output holds the output tape, one byte a column in memory_field"):
        assert words in text
    source = tmp_path / "hi.vsq"
    source.write_text("subleq h, -1\nsubleq i, -1\nhalt\nh: .word 72\ni: .word 105\n")
    assert main(["export", str(source), "-o", str(tmp_path / "x")]) == 0
    weights, meta, layout, X = load_export(tmp_path / "x")
    assert "halt_pc" not in layout and layout["machine"] == "vsubleq"
    halted = slice(*layout["fields"][layout["halted_field"]])
    passes = 0
    while X[halted, layout["pc_column"]][0] == 0 and passes < 20:
        X, passes = eq1_pass(weights, meta, X), passes + 1
    tape = X[slice(*layout["fields"][layout["memory_field"]]),
             slice(*layout["regions"]["output"])]
    assert bytes(code(tape[:, j]) & 255 for j in range(tape.shape[1])) == b"Hi"
    assert passes == 3


def test_export_to_a_dangling_symbolic_link_is_refused_up_front_and_says_why(tmp_path, capsys):
    """-o LINK, LINK -> a missing directory: the machine was built, then the final rename
    failed with 'cannot write LINK: Not a directory'. It is refused before the program is
    read (here a missing one), naming the link's target; the link stays."""
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "missing")
    assert main(["export", str(tmp_path / "no.sq"), "-o", str(link)]) == 2
    assert capsys.readouterr().err == (
        f"ltvm: error: cannot write {link}: it is a symbolic link to {tmp_path / 'missing'}, "
        "which does not exist; create that directory or name another\n")
    assert link.is_symlink() and not (tmp_path / "missing").exists()


def test_asm_leaves_no_x_when_the_csv_pair_fails(tmp_path, capsys, monkeypatch):
    """`asm P -o X.npy --export-csv DIR`: X was written (and kept) before the CSV files, so
    a CSV failure (a full disk here) exited 2 with X.npy in place."""
    import errno

    import vm.isa.subleq

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(vm.isa.subleq, "save_csv", full)
    x, pair = tmp_path / "x.npy", tmp_path / "pair"
    assert main(["asm", str(GCD), "-o", str(x), "--export-csv", str(pair)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_asm_export_csv_to_a_dangling_link_is_refused_before_x_is_written(tmp_path, capsys):
    """--export-csv LINK, LINK -> a missing directory: -o wrote X, then the CSV pair failed
    with 'cannot write LINK: Not a directory' (exit 2, X kept)."""
    link, x = tmp_path / "link", tmp_path / "x.npy"
    link.symlink_to(tmp_path / "missing")
    assert main(["asm", str(GCD), "-o", str(x), "--export-csv", str(link)]) == 2
    assert capsys.readouterr().err == (
        f"ltvm: error: cannot write {link}: it is a symbolic link to {tmp_path / 'missing'}, "
        "which does not exist; create that directory or name another\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link"]


def test_onnx_weights_just_under_2_gib_leave_room_for_the_graph():
    """A mask of 16,383^2 float64 entries is 256 kB under protobuf's limit; with the graph
    beside it the file passes it, which protobuf reports as a traceback (EncodeError)."""
    from types import SimpleNamespace

    from vm.common.errors import InputError
    from vm.runtime.onnx_export import check_size

    check_size(SimpleNamespace(layers=[], columns=16_000, has_mask=True), True, "float64")
    with pytest.raises(InputError, match="more than one ONNX file holds"):
        check_size(SimpleNamespace(layers=[], columns=16_383, has_mask=True), True, "float64")


def test_weights_without_a_mask_export_as_dense_not_as_minus_infinity(tmp_path):
    """export(..., masked=True) of weights with no mask (MachineWeights.mask is None, as
    the type allows) wrote np.where(None, 0, -inf), one -inf, as every head's mask: every
    score became -inf and an executor's softmax NaN. Such weights are dense."""
    import dataclasses

    from assembler.subleq import assemble_file
    from export_executor import run_exported, subleq_memory
    from vm.isa import SUBLEQ
    from vm.machines.subleq.reference import run_reference
    from vm.runtime.export import export

    program = assemble_file(GCD)
    geometry = SUBLEQ.geometry_for(program)
    machine = SUBLEQ.machine(geometry)
    weights = dataclasses.replace(machine.weights, mask_scratch=None)
    bits, extra = SUBLEQ.export_fields(program, geometry)
    export(tmp_path / "x", weights, machine.layout, machine.encode(program), bits, True, extra)
    X, layout, _ = run_exported(tmp_path / "x", max_steps=1000)
    assert subleq_memory(X, layout) == run_reference(program).memory
    meta = json.loads(str(np.load(tmp_path / "x" / "weights.npz")["meta"]))
    assert meta["attention"] == "dense"


@pytest.mark.parametrize("existing", [False, True])
def test_asm_o_with_a_trailing_slash_is_refused_not_written_as_a_file(tmp_path, capsys,
                                                                      existing):
    """`asm P -o out/` wrote X as a file named out (and replaced a file out), though a
    trailing slash names a directory and the OS refuses to open 'out/' as a file."""
    if existing:
        (tmp_path / "out").write_text("keep")
    target = f"{tmp_path / 'out'}/"
    assert main(["asm", str(GCD), "-o", target]) == 2
    assert capsys.readouterr().err == (f"ltvm: error: cannot write {target}: -o takes a file "
                                       "(X.npy), and a path ending in '/' names a directory\n")
    assert [p.read_text() for p in tmp_path.iterdir()] == (["keep"] if existing else [])


@pytest.mark.parametrize("name", ["x.npz", "X.NPZ"])
def test_asm_o_to_an_npz_name_is_refused_not_written_as_npy_bytes(tmp_path, capsys, name):
    """`asm P -o out.npz` wrote one .npy array under the name of numpy's zip archive of
    arrays, which a reader of .npz files (`np.load(f)["X"]`) could not use as such."""
    target = tmp_path / name
    assert main(["asm", str(GCD), "-o", str(target)]) == 2
    assert capsys.readouterr().err == (
        f"ltvm: error: cannot write {target}: -o saves X as one .npy array, and .npz names "
        "numpy's zip archive of arrays; name it X.npy\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("attention", ["dense", "masked"])
def test_a_too_large_export_names_masks_and_dense_only_where_there_are_masks(
        tmp_path, capsys, monkeypatch, attention):
    """`export --attention dense` larger than the free space (the weight matrices alone,
    e.g. every FLEQ function at d = 16: 83 GiB) said '(0 n x n attention masks at n = ...)'
    and advised '--attention dense (no masks)', the option already given. The refusal
    comes before any mask is built (4 GB of booleans at 65,536 columns)."""
    import collections

    import vm.runtime.export
    import vm.transformer.weights

    def no_mask_built(columns, scratch):
        raise AssertionError("the size check built the n x n mask")
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(vm.runtime.export.shutil, "disk_usage",
                        lambda path: usage(10**9, 10**9, 1000))
    monkeypatch.setattr(vm.transformer.weights, "mask_matrix", no_mask_built)
    assert main(["export", str(GCD), "-o", str(tmp_path / "x"), "--attention", attention]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltvm: error: the export needs about ") and err.count("\n") == 1
    if attention == "dense":
        assert "weight matrices of" in err and "mask" not in err and "--attention" not in err
    else:
        assert "4 n x n attention masks at n = 32" in err and "--attention dense" in err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("change,message", [
    ({"bits": "x"}, "bits must be a whole number of bits"),
    ({"masked": "no"}, "masked must be True or False"),
    ({"extra_layout": None}, "extra_layout must be a dict"),
    ({"extra_layout": {"x": float("nan")}}, "extra_layout cannot be written as JSON"),
    ({"extra_layout": {"x": object()}}, "extra_layout cannot be written as JSON"),
    ({"weights": None}, "weights must be a MachineWeights"),
    ({"layout": None}, "layout must be a Layout")])
def test_the_writer_refuses_arguments_it_cannot_write_and_writes_nothing(tmp_path, change,
                                                                        message):
    """vm.runtime.export.export wrote bits='x' and masked='no' as given and a NaN in
    extra_layout as NaN, which is no JSON; None weights, layout or extra_layout failed on an
    attribute or as 'not a mapping', an object with a TypeError."""
    from vm.common.errors import InputError
    from vm.isa import SUBLEQ
    from vm.runtime.export import export
    program = SUBLEQ.assemble_text(".data\nx: 1\n.code\nhalt\n", "p.sq")
    machine = SUBLEQ.machine(SUBLEQ.geometry_for(program))
    arguments = dict(directory=tmp_path / "out", weights=machine.weights,
                     layout=machine.layout, punchcard=machine.encode(program), bits=8,
                     masked=True, extra_layout={})
    with pytest.raises(InputError, match=message):
        export(**{**arguments, **change})
    assert not (tmp_path / "out").exists()
