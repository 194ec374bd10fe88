"""Test-wide settings: one torch CPU thread, so timings do not depend on what else runs;
stop signals as in a terminal; the fused kernels compiled once before xdist's workers
start; and a fixture that records the engine configs a module builds its executors with."""

import importlib.util
import signal
import subprocess
import sys
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

COMPILE_FUSED_KERNELS = """
import sys
from vm.runtime.executor import EngineConfig, TransformerExecutor
from vm.tools.workloads import looping_programs, workload_geometry
shape = workload_geometry(64)
config = EngineConfig(evaluation="fused", dtype=sys.argv[1], threads=1)
executor = TransformerExecutor(shape, config)
for batch in (1, 2):
    executor.run(executor.load(looping_programs(shape, batch, seed=0)), max_steps=4)
"""


def pytest_configure(config) -> None:
    """With several xdist workers, compile the fused kernels (numba, cached on disk) first,
    float32 and float64 side by side: a cold cache otherwise costs every worker about 80 s
    of CPU compiling the same kernels. With a warm cache this takes a few seconds."""
    workers = getattr(config.option, "numprocesses", None)
    if (hasattr(config, "workerinput") or not isinstance(workers, int) or workers < 2
            or importlib.util.find_spec("numba") is None):
        return
    compiling = [subprocess.Popen([sys.executable, "-c", COMPILE_FUSED_KERNELS, dtype],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for dtype in ("float32", "float64")]
    for process in compiling:
        process.wait()


@pytest.fixture
def executor_configs(monkeypatch) -> Callable[[object], list]:
    """`record(module)`: from then on every TransformerExecutor that `module` builds
    appends its EngineConfig to the returned list (the executor itself runs unchanged)."""
    def record(module) -> list:
        configs = []

        class Recording(module.TransformerExecutor):
            def __init__(self, geometry, config):
                configs.append(config)
                super().__init__(geometry, config)

        monkeypatch.setattr(module, "TransformerExecutor", Recording)
        return configs
    return record
