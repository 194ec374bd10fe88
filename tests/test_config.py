"""`EngineConfig`: a field of the wrong type or out of range is refused when the config is
made, naming the field, not deep in torch once a run starts."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from vm.common.errors import InputError
from vm.runtime.config import MAX_CHECK_EVERY, EngineConfig


@pytest.mark.parametrize("field,value", [
    ("temperature", "20"), ("temperature", True), ("sampling", "1"),
    ("check_every", "16"), ("check_every", 2.5), ("check_every", True),
    ("check_every", MAX_CHECK_EVERY + 1), ("check_every", 10**12),
    ("threads", 2.5), ("threads", "4"), ("seed", 1.5), ("seed", "x"), ("seed", 2**70),
    ("device", None), ("checked", "yes"),
])
def test_a_field_of_the_wrong_type_or_range_is_refused_by_name(field, value):
    with pytest.raises(InputError, match=field):
        EngineConfig(**{field: value})


def test_integral_fields_take_any_integer_type():
    config = EngineConfig(check_every=np.int64(4), threads=np.int32(2), seed=-1)
    assert config.check_every == 4 and config.threads == 2


def test_a_numpy_seed_runs_a_sampling_run():
    """EngineConfig(sampling=..., seed=np.int64(5)) was taken, and the run failed in
    torch's manual_seed with "an integer is required"."""
    from assembler.subleq import assemble
    from vm.machines.subleq.punchcard import geometry_for
    from vm.runtime.executor import run_transformer
    config = EngineConfig(sampling=0.05, seed=np.int64(5))
    assert type(config.seed) is int
    program = assemble(".data\nx: 5\ny: 0\n.code\nsubleq x, y\nhalt\n", "c.sq")
    assert run_transformer(program, geometry_for(program), config=config).memory[3] == -5


def test_a_fraction_sampling_temperature_runs():
    """EngineConfig(sampling=Fraction(1, 20)) was taken, and the run failed in torch with
    "unsupported operand type(s) for *: 'Tensor' and 'Fraction'"."""

    from assembler.subleq import assemble
    from vm.machines.subleq.punchcard import geometry_for
    from vm.runtime.executor import run_transformer
    config = EngineConfig(sampling=Fraction(1, 20))
    assert type(config.sampling) is float
    program = assemble(".data\nx: 5\ny: 0\n.code\nsubleq x, y\nhalt\n", "c.sq")
    assert run_transformer(program, geometry_for(program), config=config).memory[3] == -5


@pytest.mark.parametrize("temperature", [np.float32(0.5), np.float64(0.5), Fraction(1, 2), 1])
def test_temperature_is_kept_as_a_python_float(temperature):
    """np.float32(0.5) was kept as numpy's value while threads, check_every and seed were
    converted to int: every temperature is a float, as they are."""
    config = EngineConfig(temperature=temperature)
    assert type(config.temperature) is float and config.temperature == float(temperature)
