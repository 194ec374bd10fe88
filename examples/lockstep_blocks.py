"""What a program-pass of the fused CPU batch costs at each lockstep block size.

The fused pass runs a batch in blocks of programs whose ReLU layers go in lockstep, each
weight applied to every lane of the block in one vector sweep (docs/speed.md, "A batch in
lockstep"; `vm.runtime.fused.LOCKSTEP_BLOCK`, 32). For each block size this times whole
windows of passes of one batch at one thread (the fastest window of --seconds, rounds
alternating between the sizes) and fits t(size) = a + b / size by least squares: b is what
a block shares among its programs (per layer and weight), a what every program pays on its
own (its attention, projections, guard and commit), which no block size removes.

    python examples/lockstep_blocks.py --columns 64 --batch 256 --blocks 4,8,16,32,64

The block size is set for this process only, through the module's constant; `ltvm` runs
use LOCKSTEP_BLOCK. Needs numba and its compiled kernels (`ltvm compile`).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def sizes(text: str) -> list[int]:
    return list(dict.fromkeys(positive(part) for part in text.split(",")))


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--columns", type=positive, default=64, help="n (default 64)")
    parser.add_argument("--batch", type=positive, default=256,
                        help="programs in the batch (default 256)")
    parser.add_argument("--blocks", type=sizes, default=[4, 8, 16, 32, 64],
                        help="block sizes to time (default 4,8,16,32,64)")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="seconds of windows timed per size and round (default 3)")
    parser.add_argument("--rounds", type=positive, default=3,
                        help="rounds over all sizes; each size's best is kept (default 3)")
    options = parser.parse_args()
    if not 0 < options.seconds <= 600:
        parser.error("--seconds: must be above 0 and at most 600")
    if options.columns < 6:
        parser.error("--columns: a benchmark program needs at least 6")
    return options


def program_pass_seconds(executor, programs: list, seconds: float) -> float:
    """The fastest window's seconds per program-pass, after a first window (warm-up)."""
    runner = executor.runner(executor.load(programs))
    runner.advance(runner.window)
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < seconds:
        began = time.perf_counter()
        runner.advance(runner.window)
        best = min(best, (time.perf_counter() - began) / runner.window / len(programs))
    if runner.evaluation != "fused":
        raise RuntimeError(f"the run used the {runner.evaluation} pass, not the fused one")
    return best


def main() -> int:
    options = arguments()
    from vm.runtime import fused
    from vm.runtime.executor import EngineConfig, TransformerExecutor
    from vm.tools.workloads import looping_programs, workload_geometry

    if not fused.available():
        print("lockstep_blocks.py: numba is not installed: there is no fused pass",
              file=sys.stderr)
        return 2
    from vm.common.errors import InputError
    try:
        shape = workload_geometry(options.columns)
        executor = TransformerExecutor(shape, EngineConfig(evaluation="fused", threads=1))
        executor.check_memory(options.batch)
    except InputError as error:
        print(f"lockstep_blocks.py: error: {error}", file=sys.stderr)
        return 2
    programs = looping_programs(shape, options.batch, seed=0)
    best = {size: float("inf") for size in options.blocks}
    default = fused.LOCKSTEP_BLOCK
    try:
        for _ in range(options.rounds):
            for size in options.blocks:
                fused.LOCKSTEP_BLOCK = size
                best[size] = min(best[size], program_pass_seconds(executor, programs,
                                                                  options.seconds))
    finally:
        fused.LOCKSTEP_BLOCK = default
    print(f"n = {options.columns}, batch {options.batch}, 1 thread, float32, fused; the "
          f"fastest window of {options.rounds} round(s)")
    print("| block | us a program-pass |\n|---:|---:|")
    for size in options.blocks:
        print(f"| {size} | {best[size] * 1e6:.2f} |")
    if len(options.blocks) > 1:
        inverse = np.array([1 / size for size in options.blocks])
        times = np.array([best[size] * 1e6 for size in options.blocks])
        shared, own = np.polyfit(inverse, times, 1)
        print(f"fit: {own:.2f} us a program-pass of its own + {shared:.2f} us / block size "
              "shared by a block")
    return 0


if __name__ == "__main__":
    sys.exit(main())
