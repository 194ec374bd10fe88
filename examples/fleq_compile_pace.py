"""What torch.compile would give a FLEQ active pass on a GPU, and whether X stays exact.

`ltvm` runs a FLEQ active pass on a GPU as two CUDA graphs (vm/runtime/graphed.py): the
control layers (`FleqActiveEvaluator.control_`), one host read, then the rest of the pass
for the selected blocks (`rest_`). Each graph replays the eager pass's kernels, about 150
for the calculator, and their count sets the pace (docs/speed.md, "FLEQ on a GPU"). This
script measures the same graphs made of the two halves compiled by `torch.compile`
(inductor fuses elementwise kernels):

1. the workload as `ltvm` runs it: ms a pass, timed as `ltvm bench fleq` times it
   (repeated runs from the punchcard to the halt), after a first run that captures;
2. the halves compiled: the first run (compiles and captures, timed), X compared bit for
   bit with the full pass after every pass up to the halt, then ms a pass likewise.

Compiled halves are not what `ltvm` runs: a default run would pay the compile, and the
exactness of a compiled pass is what (2) measures, not what the construction proves.

    python examples/fleq_compile_pace.py --device cuda calculator

On the CPU FLEQ has no graphs, so both rows time the eager active pass; `--backend eager`
checks the script itself without inductor's compile.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

import torch

from vm.common.errors import InputError
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.runtime.executor import EngineConfig, Runner, TransformerExecutor
from vm.runtime.graphed import FleqGraphedPasses
from vm.tools.bench import FLEQ_BENCH_STEPS, fleq_workload
from vm.tools.workloads import FLEQ_WORKLOADS

RECOMPILES = 64
"""Dynamo's limit of compiled variants a function keeps: `rest_` compiles once per block
set (the calculator meets 7), above dynamo's default of 8 with the control half."""


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", nargs="?", default="calculator",
                        help=f"{' or '.join(FLEQ_WORKLOADS)}, or a .fleq file "
                             "(default calculator)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cpu or cuda (default cuda where there is a GPU, else cpu)")
    parser.add_argument("--batch", type=int, default=1, help="copies of the program (default 1)")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="timing budget of each row (default 2)")
    parser.add_argument("--backend", default="inductor",
                        help="torch.compile backend (default inductor)")
    options = parser.parse_args()
    if options.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {options.device}: no CUDA device here")
    if not 1 <= options.batch <= 4096:
        parser.error("--batch: from 1 to 4096")
    if not 0 < options.seconds <= 600:
        parser.error("--seconds: more than 0, at most 600")
    return options


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def first_run(runner: Runner, device: str) -> tuple[int, float]:
    """The run's length in passes and the seconds its first run took."""
    start = time.perf_counter()
    runner.advance(FLEQ_BENCH_STEPS)
    sync(device)
    return max(1, int(runner.result().steps.max())), time.perf_counter() - start


def ms_a_pass(runner: Runner, X: torch.Tensor, length: int, options: argparse.Namespace
              ) -> float:
    """Whole runs from X, repeated for about `seconds`: ms a pass."""
    passes, start = 0, time.perf_counter()
    while passes == 0 or time.perf_counter() - start < options.seconds:
        runner.restart(X)
        runner.advance(length)
        passes += length
    sync(options.device)
    return (time.perf_counter() - start) / passes * 1e3


def compile_halves(executor: TransformerExecutor, backend: str) -> None:
    """The evaluator's control and rest halves replaced by their compiled forms (the
    executor caches its evaluator, so this holds for every later run of the machine)."""
    evaluator = executor.active
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, RECOMPILES)
    evaluator.control_ = torch.compile(evaluator.control_, backend=backend, dynamic=False)
    evaluator.rest_ = torch.compile(evaluator.rest_, backend=backend, dynamic=False)


def lockstep(runner: Runner, full: Runner) -> tuple[int, int]:
    """Both runs pass by pass to the halt; the passes made and how many of them left X
    equal to the full pass's (counted up to the first difference)."""
    equal, made = 0, 0
    while made < FLEQ_BENCH_STEPS:
        before = runner.done
        runner.advance(1)
        full.advance(1)
        if runner.done == before:
            break
        made += 1
        if equal == made - 1 and torch.equal(runner.X, full.X):
            equal += 1
    return made, equal


def report(options: argparse.Namespace) -> int:
    program = fleq_workload(options.workload)
    config = EngineConfig(device=options.device, dtype="float64", checked=False)
    executor = TransformerExecutor(fleq_geometry_for(program), config)
    X = executor.load([program] * options.batch)
    graphs = isinstance(executor.active.fused, FleqGraphedPasses)
    print(f"FLEQ {options.workload}, batch {options.batch}, {options.device}, float64, "
          f"torch {torch.__version__}, {'CUDA graphs' if graphs else 'no graphs'}")
    print("| pass | first run s | X equal to the full pass | ms a pass |")
    print("|---|---:|---:|---:|")
    runner = executor.runner(X)
    length, first = first_run(runner, options.device)
    print(f"| as ltvm runs it ({runner.evaluation}) | {first:.2f} | (tests) | "
          f"{ms_a_pass(runner, X, length, options):.3f} |", flush=True)
    compile_halves(executor, options.backend)
    compiled = executor.runner(X)
    length, first = first_run(compiled, options.device)
    compiled.restart(X)
    full = TransformerExecutor(executor.geometry, replace(config, evaluation="full")).runner(X)
    made, equal = lockstep(compiled, full)
    print(f"| halves compiled ({options.backend}) | {first:.2f} | {equal} of {made} passes | "
          f"{ms_a_pass(compiled, X, length, options):.3f} |", flush=True)
    return 0 if equal == made else 1


def main() -> int:
    options = arguments()
    try:
        with torch.inference_mode():
            return report(options)
    except InputError as error:
        print(f"fleq_compile_pace.py: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
