"""The scripts of examples/ as tests use them: run as a user runs them (a subprocess), or
loaded as a module to test one of their functions."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(script: str, *arguments: str, timeout: float = 300,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """examples/`script` run with `arguments`, its output captured as text."""
    return subprocess.run([sys.executable, str(EXAMPLES / script), *arguments],
                          capture_output=True, text=True, timeout=timeout, env=env)


def example_module(script: str) -> ModuleType:
    """examples/`script` loaded as a module (its `main` not run)."""
    spec = importlib.util.spec_from_file_location(Path(script).stem, EXAMPLES / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
