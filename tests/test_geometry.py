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
