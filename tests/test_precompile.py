"""Compiling the fused pass ahead of use (vm/tools/precompile.py, `ltvm compile`), and what a
default run does where nothing is compiled yet."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vm.cli import main
from vm.tools.precompile import compile_side_by_side

ROOT = Path(__file__).resolve().parents[1]


def test_compile_finds_the_kernels_the_suite_compiled(capsys):
    """tests/conftest.py compiled them: `ltvm compile` loads them from numba's cache."""
    pytest.importorskip("numba")
    assert main(["compile", "--dtype", "float32"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("float32: already compiled, loaded in ")
    assert "compiling the fused pass's kernels for float32 with numba" in captured.err


def test_compile_without_numba_says_what_to_install(monkeypatch, capsys):
    import vm.cli.compile as command
    monkeypatch.setattr(command.importlib.util, "find_spec",
                        lambda name: None if name == "numba" else object())
    assert main(["compile"]) == 2
    assert "numba is not installed" in capsys.readouterr().err


def test_a_failed_child_is_reported_with_its_error_output():
    with pytest.raises(RuntimeError, match="float16 kernels failed:\nusage: python -m "
                                           "vm.tools.precompile"):
        compile_side_by_side(["float16"])


def test_a_default_run_on_a_cold_cache_compiles_nothing_and_says_so(tmp_path):
    """With numba's cache empty (NUMBA_CACHE_DIR), `ltvm run` does not wait for a compile:
    it runs without the fused pass to the halt, then prints one note; numba's cache holds
    no kernel afterwards."""
    pytest.importorskip("numba")
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "vm.cli", "run",
                           str(ROOT / "programs" / "subleq" / "bubble_sort.sq")],
                          capture_output=True, text=True, env=environment, timeout=120)
    assert done.returncode == 0, done.stderr  # 0: the program halted
    notes = [line for line in done.stderr.splitlines() if line.startswith("ltvm: note:")]
    assert len(notes) == 1 and "numba has not compiled the fused pass" in notes[0]
    assert "`ltvm compile`" in notes[0]
    assert not list(tmp_path.rglob("*.nbc"))


LOADS_NOTHING_NEW = """
import sys
import warnings
from functools import partial
from vm.common.errors import NotCompiledWarning
from vm.machines.vsubleq.run import TransformerRun
from vm.runtime import fused
from vm.runtime.executor import EngineConfig, TransformerExecutor, evaluator_for
from vm.tools.precompile import compile_fused
from vm.tools.vsubleq_bench import counting_loop
from vm.tools.workloads import looping_programs, workload_geometry

warnings.simplefilter("error", NotCompiledWarning)
dtype = sys.argv[1]
compile_fused(dtype)
kernels = {name: kernel for name, kernel in vars(fused).items() if hasattr(kernel, "overloads")}
made = {name: set(kernel.overloads) for name, kernel in kernels.items()}
for columns, bits, batch in [(64, 8, 1), (64, 16, 3), (200, 32, 2), (64, 17, 5), (64, 64, 6)]:
    shape = workload_geometry(columns, bits)
    executor = TransformerExecutor(shape, EngineConfig(dtype=dtype))
    runner = executor.runner(executor.load(looping_programs(shape, batch, seed=1)))
    runner.advance(8)
    print(columns, bits, batch, runner.evaluation)
for bits in (8, 16, 17, 32, 64):
    image = TransformerRun(counting_loop(64, bits), dtype, max_output=0, checked=False,
                           accelerate=partial(evaluator_for, evaluation="auto"))
    image.advance(8)
    print("image", bits, image.evaluation)
for name, kernel in kernels.items():
    for signature in set(kernel.overloads) - made[name]:
        print("loaded after compile:", name, len(signature), "argument types")
"""
"""In a fresh process: what `ltvm compile` loads for a dtype (`compile_fused`), then default
runs of SUBLEQ programs (word sizes of 4 and 5 layers, alone and in batches) and standard
SUBLEQ images of every layer count, printing each run's evaluation and every kernel
signature the runs loaded that the compile had not."""


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_machine_uses_only_the_kernels_that_compile_makes(dtype):
    """Whatever else numba's cache holds (other tests compile on first use), default runs
    of every machine shape need no kernel signature beyond those `ltvm compile` makes: a
    batch of 17-bit programs (5 layers, `_lockstep`) once needed one, and ran without the
    fused pass after `ltvm compile`, telling the user to run `ltvm compile`."""
    pytest.importorskip("numba")
    done = subprocess.run([sys.executable, "-c", LOADS_NOTHING_NEW, dtype],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 10 and all(line.endswith(" fused") for line in lines), done.stdout
