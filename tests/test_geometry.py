"""vm/common/geometry.py: a SUBLEQ geometry too wide for the machine says where its columns go."""

import pytest

from vm.common.errors import InputError
from vm.common.geometry import MAX_COLUMNS, Geometry


def test_too_many_columns_names_the_scratch_memory_and_instructions():
    """`--scratch 100000` was refused as '100031 columns exceed the limit', naming no part."""
    with pytest.raises(InputError, match=(r"^100,031 columns \(100,000 scratch, 9 memory, 22 "
                                          r"instructions\) exceed the limit of 65,536$")):
        Geometry(100_000, 9, 22, 8)
    assert Geometry(MAX_COLUMNS - 31, 9, 22, 8).columns == MAX_COLUMNS


def test_numpy_counts_are_kept_as_python_ints():
    """Geometry(np.int64(2), ...) passed its checks and failed in pos_bits with
    "'numpy.int64' object has no attribute 'bit_length'"; the FLEQ and VSUBLEQ geometries
    likewise."""
    import dataclasses
    from pathlib import Path

    import numpy as np

    from vm.isa import FLEQ, VSUBLEQ
    geometry = Geometry(np.int64(2), np.int64(4), np.int64(3), np.int64(8))
    assert geometry.pos_bits == 4 and type(geometry.bits) is int
    root = Path(__file__).resolve().parents[1] / "programs"
    for isa, source, name in ((FLEQ, "fleq/calculator.fleq", "cells"),
                              (VSUBLEQ, "vsubleq/hello.dec", "memory")):
        _, loaded = isa.load(root / source)
        changed = dataclasses.replace(loaded, **{name: np.int64(getattr(loaded, name))})
        assert type(getattr(changed, name)) is int and changed.pos_bits == loaded.pos_bits
