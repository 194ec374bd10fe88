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


@pytest.mark.parametrize("fields,message", [
    ((2.5, (), 4, 1), "geometry d must be an integer, got 2.5"),
    ((None, (), 4, 1), "geometry d must be an integer, got None"),
    ((1, (), True, 1), "geometry cells must be an integer, got True"),
    ((1, (), 4, 1.0), "geometry instructions must be an integer, got 1.0"),
    ((1, None, 4, 1), "geometry functions must be a tuple of \\(name, parameters\\) pairs"),
    ((1, [("add", ())], 4, 1), "geometry functions must be a tuple"),
    ((1, (("add",),), 4, 1), "geometry functions must be a tuple")])
def test_a_field_of_the_wrong_kind_is_refused_by_name(fields, message):
    """As Geometry's are: d = 2.5 failed in bit_length, None in a comparison, functions =
    None with 'not iterable' when the blocks were built, a list of them as the machine
    cache's key ('unhashable type')."""
    with pytest.raises(InputError, match=message):
        FleqGeometry(*fields)
