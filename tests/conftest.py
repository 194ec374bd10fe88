"""Test-wide settings: one torch CPU thread, so timings do not depend on what else runs;
and a fixture that records the engine configs a module builds its executors with."""

from typing import Callable

import pytest
import torch

torch.set_num_threads(1)


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
