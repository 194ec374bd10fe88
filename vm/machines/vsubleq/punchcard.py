"""Image <-> X for the standard SUBLEQ machine: memory words in the memory columns, the
address codes beside them, pc = 0, 1, 2 and halted = 0 in the cpu column."""

from __future__ import annotations

import numpy as np

from vm.common.encoding import code_value, pm1_code, pm1_codes, word_values
from vm.common.errors import InputError
from vm.machines.vsubleq.layout import VGeometry, vsubleq_layout
from vm.machines.vsubleq.reference import Image
from vm.transformer.layout import Layout


def geometry_for(image: Image) -> VGeometry:
    """The geometry of an image: its (padded) memory size and word size."""
    return VGeometry(image.size, image.bits)


def encode(image: Image, geometry: VGeometry, layout: Layout | None = None) -> np.ndarray:
    """The punchcard X (rows x n, float64) of `image` before the first pass."""
    if (image.size, image.bits) != (geometry.memory, geometry.bits):
        raise InputError(f"image has {image.size} {image.bits}-bit words, the geometry "
                         f"{geometry.memory} {geometry.bits}-bit words")
    layout = layout or vsubleq_layout(geometry)
    B, X = geometry.pos_bits, np.zeros((layout.rows, layout.columns))
    X[layout["scratch"], 0] = 1
    X[layout["cpu"], 0] = 1
    X[layout["pos"], 1:] = pm1_codes(np.arange(geometry.memory), B).T
    X[layout["mem"], 1:] = pm1_codes(np.array(image.memory, dtype=np.int64), geometry.bits).T
    for offset in range(3):
        X[layout[f"pc{offset}"], 0] = pm1_code(offset, B)
    return X


def decode(X: np.ndarray, layout: Layout) -> tuple[list[int], int, bool]:
    """(memory, pc, halted) read back from X (signs decide bits)."""
    X = np.asarray(X)
    return (word_values(X[layout["mem"], 1:]), code_value(X[layout["pc0"], 0]),
            bool(X[layout["halted"], 0][0] > 0.5))
