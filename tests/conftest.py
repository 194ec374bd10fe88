"""Test-wide settings: one torch CPU thread, so timings do not depend on what else runs;
stop signals as in a terminal; the fused kernels compiled before any test (and before
xdist's workers start); and a fixture that records the engine configs a module builds its executors with."""

import importlib.util
import signal
from typing import Callable

import pytest
import torch

torch.set_num_threads(1)


def _stop_signals_as_in_a_terminal() -> None:
    """Ctrl-C raises KeyboardInterrupt and SIGHUP stops, as for a command typed in a
    terminal: a suite started in the background (`make test &`, nohup) inherits SIGINT and
    SIGHUP ignored, passes that on to every command it starts, and the tests that stop a
    command by a signal saw it ignored."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


_stop_signals_as_in_a_terminal()

def pytest_configure(config) -> None:
    """Compile the fused kernels (numba, cached on disk) before any test, float32 and
    float64 side by side (vm/tools/precompile.py): runs with the default evaluation use the
    fused pass only once it is compiled, and with a cold cache every xdist worker would
    otherwise compile the same kernels (about 80 s of CPU each). With a warm cache this
    takes a few seconds."""
    if hasattr(config, "workerinput") or importlib.util.find_spec("numba") is None:
        return
    from vm.tools.precompile import compile_side_by_side
    compile_side_by_side(["float32", "float64"])


@pytest.fixture
def executor_configs(monkeypatch) -> Callable[[object], list]:
    """`record(module)`: from then on every TransformerExecutor that `module` builds
    appends its EngineConfig to the returned list (the executor itself runs unchanged)."""
    def record(module) -> list:
        configs = []

        class Recording(module.TransformerExecutor):
            def __init__(self, geometry, config, *rest):
                configs.append(config)
                super().__init__(geometry, config, *rest)

        monkeypatch.setattr(module, "TransformerExecutor", Recording)
        return configs
    return record
