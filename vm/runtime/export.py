"""Weight export (README, "Exported weights"): weights, layout.json and punchcard.npy.

Anyone with numpy and these three files can run the program with a short
implementation of Eq. (1) and read the result; nothing is pickled. The weights
come as weights.npz (numpy), weights.safetensors (the same tensors, `meta` in
the header) or pass.onnx (one pass as an ONNX graph). SUBLEQ memory is ±1
two's-complement words; FLEQ memory is real-valued cells of d columns
(`fleq_layout_extra` says how to read them).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType

import numpy as np

from assembler.fleq_program import FleqProgram
from vm.common.errors import InputError, shown_path
from vm.common.limits import check_flag, is_whole_number
from vm.common.outputs import check_directory, staged_files
from vm.transformer.layout import Layout
from vm.machines.fleq.layout import FleqGeometry
from vm.transformer.weights import MachineWeights

FORMAT = "looped-transformer/1"
WEIGHT_FILES = {"npz": "weights.npz", "safetensors": "weights.safetensors", "onnx": "pass.onnx"}
FORMATS = tuple(WEIGHT_FILES)
COMMON_FILES = ("layout.json", "punchcard.npy")


def files(fmt: str) -> tuple[str, ...]:
    """The files an export in format `fmt` writes."""
    return (WEIGHT_FILES[fmt], *COMMON_FILES)


def weight_meta(weights: MachineWeights, masked: bool) -> dict:
    """The `meta` document of every weights file."""
    masked = masked and weights.has_mask  # weights without a mask are dense
    return {"format": FORMAT, "layers": len(weights.layers), "heads": weights.heads,
            "rows": weights.rows, "columns": weights.columns,
            "attention": "masked" if masked else "dense", **weights.meta}


def weight_arrays(weights: MachineWeights, masked: bool) -> dict[str, np.ndarray]:
    """The arrays of weights.npz, `meta` first (a JSON string)."""
    arrays: dict[str, np.ndarray] = {"meta": np.array(json.dumps(weight_meta(weights, masked)))}
    mask = None
    if masked and weights.has_mask:  # np.where(None, ...) was one -inf: NaN scores
        mask = np.where(weights.mask, 0.0, -np.inf)
    for l, layer in enumerate(weights.layers):
        for h, head in enumerate(layer.heads):
            prefix = f"l{l}.h{h}"
            arrays[f"{prefix}.Q"], arrays[f"{prefix}.K"] = head.Q, head.K
            arrays[f"{prefix}.V"], arrays[f"{prefix}.lam"] = head.V, np.array(head.lam)
            if mask is not None:
                arrays[f"{prefix}.mask"] = mask
        arrays[f"l{l}.W1"], arrays[f"l{l}.b1"] = layer.ffn.W1, layer.ffn.b1
        arrays[f"l{l}.W2"], arrays[f"l{l}.b2"] = layer.ffn.W2, layer.ffn.b2
    return arrays


def layout_document(layout: Layout, bits: int, extra: dict) -> dict:
    """layout.json: how to decode memory and the program counter from X."""
    return {**layout.to_json(), "bits": bits, "memory_field": "mem", "pc_field": "pc",
            "encoding": "pm1-twos-complement-msb-first", **extra}


def require_safetensors() -> ModuleType:
    """safetensors.numpy, or an InputError saying which extra installs it."""
    try:
        import safetensors.numpy
    except ImportError:
        raise InputError("--format safetensors needs the safetensors package: "
                         "pip install 'ltvm[formats]'") from None
    return safetensors.numpy


def write_weights(path: Path, fmt: str, weights: MachineWeights, masked: bool,
                  dtype: str) -> None:
    """The weights file of format `fmt` at `path`."""
    if fmt == "onnx":  # the ONNX initializers are its arrays: no npz ones besides
        from vm.runtime.onnx_export import pass_model
        model = pass_model(weights, masked, dtype, weight_meta(weights, masked))
        path.write_bytes(model.SerializeToString())
        return
    arrays = weight_arrays(weights, masked)
    if fmt == "npz":
        np.savez(path, **arrays)
    else:
        meta = str(arrays.pop("meta"))  # safetensors holds tensors; strings go in the header
        require_safetensors().save_file(arrays, path, metadata={"meta": meta})


def check_export_directory(directory: str | Path) -> Path:
    """`directory` as a Path if an export may go there: new, empty, or holding only a
    previous export (in any format), and every file it writes or removes a regular one."""
    known = set(WEIGHT_FILES.values()) | set(COMMON_FILES)
    directory = check_directory(directory, sorted(known))
    if directory.is_dir():
        strangers = sorted(p.name for p in directory.iterdir() if p.name not in known)
        if strangers:
            raise InputError(f"{shown_path(directory)} holds other files "
                             f"({', '.join(strangers[:3])}); export into an empty or new "
                             "directory")
    return directory


def _check_space(directory: Path, weights: MachineWeights, masked: bool, fmt: str) -> None:
    """Refuse, before anything is built or written, an export larger than the free space
    where it goes: a masked export holds an n x n float64 mask per head (one in ONNX), 12 GB
    at n = 20,000 and over 100 GB at n = 65,536, which would write for many minutes and then
    fail on a full disk."""
    matrices = sum(array.nbytes for layer in weights.layers for array in layer.arrays())
    masks = 0 if not masked or not weights.has_mask else \
        1 if fmt == "onnx" else sum(weights.heads)
    needed = matrices + masks * weights.columns ** 2 * 8
    usage = shutil.disk_usage(directory if directory.exists() else directory.parent)
    if usage.total and needed > usage.free:  # /proc and the like report no size at all
        # the masks and --attention dense only where there are masks: a dense export too
        # large said "(0 n x n attention masks ...): ... or with --attention dense"
        what, advice = ((f" ({masks} n x n attention masks at n = {weights.columns:,})",
                         ", or with --attention dense (no masks)") if masks else
                        (f" (weight matrices of {matrices / 2**30:.1f} GiB)", ""))
        raise InputError(f"the export needs about {needed / 2**30:.1f} GiB{what}, more than the "
                         f"{usage.free / 2**30:.1f} GiB free there: export a smaller program"
                         f"{advice}")


def export(directory: str | Path, weights: MachineWeights, layout: Layout, punchcard: np.ndarray,
           bits: int, masked: bool, extra_layout: dict, fmt: str = "npz") -> Path:
    """Write the format's three files into `directory`, all or nothing.

    The directory must not exist, be empty, or hold only a previous export (of any
    format: the other formats' weight files are removed, so one export remains).
    """
    if fmt not in WEIGHT_FILES:
        raise InputError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    layout_text = _layout_text(weights, layout, bits, masked, extra_layout)
    _check_punchcard(punchcard, layout)
    if fmt == "safetensors":
        require_safetensors()
    elif fmt == "onnx":
        from vm.runtime.onnx_export import check_size, require_onnx
        require_onnx()
        check_size(weights, masked, str(punchcard.dtype))  # before a byte is built
    directory = check_export_directory(directory)
    _check_space(directory, weights, masked, fmt)
    others = sorted(set(WEIGHT_FILES.values()) - {WEIGHT_FILES[fmt]})
    with staged_files(directory, files(fmt), remove=others) as staging:
        write_weights(staging / WEIGHT_FILES[fmt], fmt, weights, masked, str(punchcard.dtype))
        (staging / "layout.json").write_text(layout_text)
        np.save(staging / "punchcard.npy", punchcard)
    return directory


def _layout_text(weights: MachineWeights, layout: Layout, bits: int, masked: bool,
                 extra_layout: dict) -> str:
    """layout.json's text, once the writer's other arguments are known good: weights or a
    layout of None failed on an attribute, extra_layout=None as 'not a mapping', bits='x'
    and masked='no' were written as given, and a NaN in extra_layout wrote NaN, which is
    no JSON (json.loads elsewhere refuses it), an object a TypeError."""
    if not isinstance(weights, MachineWeights):
        raise InputError(f"weights must be a MachineWeights, got {type(weights).__name__}")
    if not isinstance(layout, Layout):
        raise InputError(f"layout must be a Layout, got {type(layout).__name__}")
    if not is_whole_number(bits) or bits < 1:
        raise InputError(f"bits must be a whole number of bits, got {bits!r:.40}")
    check_flag(masked, "masked")
    if not isinstance(extra_layout, dict):
        raise InputError(f"extra_layout must be a dict, got {type(extra_layout).__name__}")
    try:
        return json.dumps(layout_document(layout, int(bits), extra_layout), indent=2,
                          allow_nan=False) + "\n"
    except (TypeError, ValueError) as error:
        raise InputError(f"extra_layout cannot be written as JSON: {error}") from None


def _check_punchcard(punchcard: np.ndarray, layout: Layout) -> None:
    """Refuse a punchcard that no executor of the export could run: another layout's shape,
    NaN or inf, or not a float array (its dtype names the run's dtype in the weights'
    meta). Each was written without a word (a list failed on `.dtype`)."""
    if not isinstance(punchcard, np.ndarray) or punchcard.dtype not in (np.float32,
                                                                         np.float64):
        raise InputError(f"the punchcard must be a float32 or float64 numpy array, got "
                         f"{getattr(punchcard, 'dtype', type(punchcard).__name__)}")
    if punchcard.shape != (layout.rows, layout.columns):
        raise InputError(f"the punchcard has shape {punchcard.shape}, the layout needs "
                         f"({layout.rows}, {layout.columns})")
    if not np.isfinite(punchcard).all():
        raise InputError("the punchcard must be finite: it holds NaN or inf")


FLEQ_DTYPE = "float64"
"""The dtype layout.json names for a FLEQ run (the products need it); the export refuses a
temperature whose moves are not exact in it."""
FLEQ_MEMORY_ENCODING = ("real: the memory region is a sequence of cells of d consecutive "
                        "columns; cell i starts at column cell_start + i * d and holds a d x d "
                        "matrix in the d rows of memory_field (matrix column k in the cell's "
                        "column k), zero-padded around the variable's shape; a scalar is the "
                        "top-left entry")


def fleq_layout_extra(program: FleqProgram, geometry: FleqGeometry) -> dict:
    """The FLEQ part of layout.json: real cells, named variables, pc and halt."""
    names = {}
    for variable in sorted(program.variables.values(), key=lambda v: v.cell):
        start = geometry.cell_column(variable.cell)
        names[variable.name] = {"cell": variable.cell, "columns": [start, start + geometry.d],
                                "shape": list(variable.shape), "kind": variable.kind}
    return {"machine": "fleq", "encoding": "real",
            "memory_encoding": FLEQ_MEMORY_ENCODING, "d": geometry.d,
            "cells": geometry.cells, "cell_start": geometry.memory_start,
            "memory_names": names, "pc_column": 0,
            "pc_encoding": "pm1-binary-msb-first (absolute column index of the instruction)",
            "instruction_start": geometry.instruction_start, "halt_pc": geometry.eof_column,
            "dtype": FLEQ_DTYPE}
