"""vm/machines/fleq/layout.py: a FLEQ geometry too wide for the machine says where its columns
go."""

import pytest

from vm.common.errors import InputError
from vm.machines.fleq.layout import MAX_COLUMNS, FleqGeometry


def test_too_many_columns_names_the_blocks_the_cells_and_the_instructions():
    """It said only '70002 columns exceed the limit of 65536'."""
    with pytest.raises(InputError, match=(r"^70,002 columns \(1 scratch and function blocks, "
                                          r"35,000 memory cells of 2, 1 instructions\) exceed "
                                          r"the limit of 65,536$")):
        FleqGeometry(2, (), 35_000, 1)
    assert FleqGeometry(2, (), (MAX_COLUMNS - 2) // 2, 1).columns <= MAX_COLUMNS
