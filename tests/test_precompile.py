"""Compiling the fused pass ahead of use (vm/tools/precompile.py, `ltvm compile`), and what a
default run does where nothing is compiled yet."""

import os
import subprocess
import sys
from functools import partial
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


SUBLEQ_SHAPES = [(64, 8, 1), (64, 16, 3), (200, 32, 2)]
"""(columns, word bits, batch) of SUBLEQ runs; images below at several word sizes."""


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_machine_finds_the_kernels_that_compile_made(dtype, recwarn):
    """The suite compiled the kernels as `ltvm compile` does (tests/conftest.py): default
    runs of SUBLEQ programs and of standard SUBLEQ images of every layer count use the
    fused pass. A machine whose kernels take other argument types (another layer count)
    would run without it here, and fail."""
    pytest.importorskip("numba")
    from vm.machines.vsubleq.run import TransformerRun
    from vm.runtime.executor import EngineConfig, TransformerExecutor, evaluator_for
    from vm.tools.vsubleq_bench import counting_loop
    from vm.tools.workloads import looping_programs, workload_geometry
    for columns, bits, batch in SUBLEQ_SHAPES:
        shape = workload_geometry(columns, bits)
        executor = TransformerExecutor(shape, EngineConfig(dtype=dtype))
        runner = executor.runner(executor.load(looping_programs(shape, batch, seed=1)))
        runner.advance(8)
        assert runner.evaluation == "fused", (columns, bits, batch)
    for bits in (8, 16, 17, 32, 64):
        image = TransformerRun(counting_loop(64, bits), dtype, max_output=0, checked=False,
                               accelerate=partial(evaluator_for, evaluation="auto"))
        image.advance(8)
        assert image.evaluation == "fused", bits
    assert not [w for w in recwarn if "numba has not compiled" in str(w.message)]
