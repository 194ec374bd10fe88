"""Compiles the fused pass's kernels ahead of use.

numba keeps their machine code in its cache on disk (next to vm/runtime/fused.py, or in the
user's cache where that is read-only), for this machine's CPU and this source. Runs with
the default evaluation use the fused pass only once its kernels are there: they never wait
up to a minute for a compile (docs/speed.md, "Compiling"). `ltvm compile`, `make install`
and the test suite fill the cache here, one child process a dtype, side by side.

`python -m vm.tools.precompile DTYPE` compiles one dtype's kernels and prints `compiled`
or `cached` (nothing had to be compiled) and the seconds it took.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from functools import partial

from vm.runtime.config import DTYPE_NAMES

PASSES = 4
"""Passes each warm-up run makes: enough for the cache to be built and fused calls made."""
SUBLEQ_BITS = (8, 32)
"""Word sizes of the SUBLEQ programs compiled for: the machine has 4 layers up to 16 bits and
5 above, and a batch's kernel (`_lockstep`) takes a tuple of arrays a layer, so each layer
count is its own compile (without the 32-bit batch, a batch of 17-bit or wider programs ran
without the fused pass after `ltvm compile`, and said to run `ltvm compile`)."""
IMAGE_BITS = (16, 32)
"""Word sizes of the standard SUBLEQ images compiled for: the machine has 5 layers up to
16 bits and 6 above, and the kernels take a tuple of arrays a layer, so each layer count
is its own compile."""


def compile_fused(dtype: str) -> bool:
    """Compile, or load from numba's cache, every kernel a fused run in `dtype` calls: a
    SUBLEQ program alone and in a batch (in lockstep, and the roll-back), at narrow and
    wide words, and standard SUBLEQ images, whose machines have more layers (so other
    argument types). Returns whether anything had to be compiled."""
    from vm.machines.vsubleq.run import TransformerRun
    from vm.runtime import fused
    from vm.runtime.executor import EngineConfig, TransformerExecutor, evaluator_for
    from vm.tools.vsubleq_bench import counting_loop
    from vm.tools.workloads import looping_programs, workload_geometry

    for bits in SUBLEQ_BITS:
        shape = workload_geometry(64, bits)
        executor = TransformerExecutor(shape, EngineConfig(evaluation="fused", dtype=dtype,
                                                           threads=1))
        for batch in (1, 2):
            executor.run(executor.load(looping_programs(shape, batch, seed=0)), PASSES)
    for bits in IMAGE_BITS:
        image = TransformerRun(counting_loop(64, bits), dtype, max_output=0, checked=False,
                               accelerate=partial(evaluator_for, evaluation="fused"))
        image.advance(PASSES)
    return any(kernel.stats.cache_misses for kernel in (fused._program, fused._lockstep,
                                                        fused._rollback))


@dataclass
class Compiled:
    """One dtype's compile: whether numba had to compile (False: loaded from its cache) and
    the seconds it took."""

    dtype: str
    compiled: bool
    seconds: float


def compile_side_by_side(dtypes: list[str]) -> list[Compiled]:
    """`compile_fused` for each dtype in its own child process, all at once (a compile is
    single-threaded); raises RuntimeError with a child's error output if one fails."""
    children = [(dtype, subprocess.Popen([sys.executable, "-m", __name__, dtype],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True))
                for dtype in dtypes]
    done = []
    try:
        for dtype, child in children:
            out, err = child.communicate()
            if child.returncode != 0:
                raise RuntimeError(f"compiling the {dtype} kernels failed:\n{err.strip()}")
            verb, seconds = out.split()[-2:]  # its last line: anything numba printed before
            done.append(Compiled(dtype, verb == "compiled", float(seconds)))
    finally:
        for _, child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return done


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in DTYPE_NAMES:
        sys.exit(f"usage: python -m vm.tools.precompile {{{','.join(DTYPE_NAMES)}}}")
    start = time.perf_counter()
    verb = "compiled" if compile_fused(sys.argv[1]) else "cached"
    print(verb, time.perf_counter() - start)
