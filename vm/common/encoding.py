"""±1 binary codes, most significant bit first: positions and two's-complement words."""

from __future__ import annotations

import numpy as np


def pm1_code(value: int, width: int) -> np.ndarray:
    """`value` (taken modulo 2^width) as `width` bits in ±1, MSB first."""
    value %= 1 << width
    bits = [(value >> (width - 1 - i)) & 1 for i in range(width)]
    return np.array(bits, dtype=np.float64) * 2 - 1


def pm1_codes(values: np.ndarray, width: int) -> np.ndarray:
    """Codes of many values at once: shape (len(values), width).

    Signed values of up to 64 bits; unsigned arithmetic (mod 2^64) so that width 63 and
    64 and the value -2^63 need no wider integer."""
    values = np.asarray(values, dtype=np.int64).view(np.uint64)
    shifts = np.arange(width - 1, -1, -1, dtype=np.uint64)
    return ((values[:, None] >> shifts) & np.uint64(1)).astype(np.float64) * 2 - 1


def code_value(code: np.ndarray) -> int:
    """The unsigned integer a ±1 code stands for (sign of each entry decides its bit)."""
    value = 0
    for entry in np.asarray(code).ravel():
        value = (value << 1) | int(entry > 0)
    return value


def word_value(code: np.ndarray) -> int:
    """The signed integer an N-bit two's-complement ±1 word stands for."""
    width = np.asarray(code).size
    value = code_value(code)
    return value - (1 << width) if value >> (width - 1) else value


def word_values(codes: np.ndarray) -> list[int]:
    """Signed values of the words stored column-wise in `codes` (shape (N, m))."""
    width = codes.shape[0]
    if width > 62:
        return [word_value(codes[:, j]) for j in range(codes.shape[1])]
    weights = 1 << np.arange(width - 1, -1, -1, dtype=np.int64)
    values = (np.asarray(codes) > 0).astype(np.int64).T @ weights
    values = np.where(values >> (width - 1), values - (1 << width), values)
    return [int(value) for value in values]
