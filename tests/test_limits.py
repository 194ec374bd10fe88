"""`vm.common.limits`: one rule for every thread count and temperature a user or a caller
passes, and every flag and callback it hands over."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vm.common.errors import InputError
from vm.common.limits import (MAX_TEMPERATURE, MAX_THREADS, check_flag, check_temperature,
                              check_threads)
from vm.isa import ProgramOptions, for_path
from vm.runtime.config import EngineConfig

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"


@pytest.mark.parametrize("threads", [1, 2, MAX_THREADS])
def test_a_count_in_range_is_returned(threads):
    assert check_threads(threads) == threads


@pytest.mark.parametrize("threads", [0, -3, MAX_THREADS + 1, 100_000])
def test_a_count_out_of_range_names_the_option_and_the_range(threads):
    with pytest.raises(InputError, match=rf"--threads must be between 1 and {MAX_THREADS}, "
                                         rf"got {threads}"):
        check_threads(threads, "--threads")


def test_an_engine_config_refuses_a_thread_count_that_crashes_thread_pools():
    """100,000 torch threads crashed the process (a segfault, not an error)."""
    with pytest.raises(InputError, match="threads must be between"):
        EngineConfig(threads=100_000)


@pytest.mark.parametrize("temperature", [1e-3, 20.0, MAX_TEMPERATURE])
def test_a_temperature_in_range_is_returned(temperature):
    assert check_temperature(temperature) == temperature


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("nan"), float("inf"), 1e300, 10 ** 400])
def test_a_temperature_that_would_compute_nan_is_refused(temperature):
    """lam = inf (or 1e300) made scores inf - inf: runs printed NaN cells with exit 0; an
    integer beyond any float failed in math.isfinite with an OverflowError."""
    with pytest.raises(InputError, match="temperature must be above 0 and at most"):
        check_temperature(temperature)
    with pytest.raises(InputError, match="temperature must be above 0"):
        EngineConfig(temperature=temperature)


@pytest.mark.parametrize("source", ["subleq/factorial.sq", "fleq/calculator.fleq",
                                    "vsubleq/echo.vsq"])
def test_every_machine_refuses_an_infinite_temperature_before_building(source):
    path = PROGRAMS / source
    isa = for_path(path)
    _, geometry = isa.load(path, ProgramOptions())
    with pytest.raises(InputError, match="temperature"):
        isa.machine(geometry, float("inf"))


@pytest.mark.parametrize("source", ["subleq/factorial.sq", "fleq/calculator.fleq",
                                    "vsubleq/echo.vsq"])
@pytest.mark.parametrize("temperature", [True, "20"])
def test_every_machine_refuses_a_temperature_that_is_not_a_number(source, temperature):
    """float() took True as lam = 1 and '20' as 20, or raised its own ValueError; a machine
    built at 1.0 first was returned for True by the builders' cache (True == 1.0)."""
    path = PROGRAMS / source
    isa = for_path(path)
    _, geometry = isa.load(path, ProgramOptions())
    isa.machine(geometry, 1.0)
    with pytest.raises(InputError, match="temperature must be a number"):
        isa.machine(geometry, temperature)


@pytest.mark.parametrize("temperature", [True, "20", None])
def test_a_temperature_that_is_not_a_number_is_refused_by_name(temperature):
    """'20' raised math's TypeError; True passed as lam = 1."""
    with pytest.raises(InputError, match="temperature must be a number"):
        check_temperature(temperature)


def test_a_callback_that_cannot_take_its_argument_is_refused_before_any_work():
    """The assemblers' progress, as the runs' since 3e786cd, is checked for what it takes:
    `lambda: None` failed with a TypeError at the first line end parsed."""
    from assembler.diagnostics import check_progress
    with pytest.raises(InputError, match="progress must take one argument, the lines parsed"):
        check_progress(lambda: None)
    with pytest.raises(InputError, match="must be a function of the lines parsed"):
        check_progress(5)
    check_progress(max)  # a builtin whose signature cannot be read is taken
    check_progress(lambda line, *rest: None)


@pytest.mark.parametrize("value", ["no", 1, None, 0.0])
def test_a_flag_is_true_or_false_only(value):
    with pytest.raises(InputError, match="trace must be True or False"):
        check_flag(value, "trace")
    assert check_flag(np.bool_(True), "trace") is True
