"""`vm.common.threads`: one rule for every thread count a user or a caller passes."""

from __future__ import annotations

import pytest

from vm.common.errors import InputError
from vm.common.threads import MAX_THREADS, check_threads
from vm.runtime.config import EngineConfig


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
