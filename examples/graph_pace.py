"""What a SUBLEQ active pass costs inside a CUDA graph, and what fewer kernels would give.

For each batch: the kernels one eager active pass launches (torch's profiler; on a GPU),
then one graph of 32 passes (vm/runtime/graphed.py) timed from its launch until the host
has seen it finish, as a run pays it, and the launch call alone. With --compile, the same
for the pass compiled by `torch.compile` (inductor), after checking that it leaves X
bit-identical to the eager pass for --passes passes; its compile time is printed. The
compiled pass is not what `ltvm` runs (a default run would pay the compile): this measures
what it would give (docs/speed.md, "On an H100").

    python examples/graph_pace.py --device cuda --batch 1,256,1024
    python examples/graph_pace.py --device cuda --batch 256 --compile

On the CPU the graph is the same passes as Python calls and no kernels are counted.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from vm.common.errors import InputError
from vm.machines.subleq.punchcard import geometry_for
from vm.runtime.active import ActiveRun
from vm.runtime.executor import EngineConfig, TransformerExecutor
from vm.runtime.graphed import GRAPH_PASSES, captured
from vm.tools.workloads import looping_programs, workload_geometry

REPLAYS = 20


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def batches(text: str) -> list[int]:
    return [positive(part) for part in text.split(",")]


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cpu or cuda (default cuda where there is a GPU, else cpu)")
    parser.add_argument("--columns", type=positive, default=64, help="n (default 64)")
    parser.add_argument("--batch", type=batches, default=[1, 256], help="B,... (default 1,256)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                        help="the machine's float type (default float32)")
    parser.add_argument("--compile", action="store_true",
                        help="also the pass compiled by torch.compile (inductor)")
    parser.add_argument("--passes", type=positive, default=200,
                        help="passes of the bit-identity check of --compile (default 200)")
    options = parser.parse_args()
    if options.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {options.device}: no CUDA device here")
    if options.columns < 6:
        parser.error("--columns: a benchmark program needs at least 6")
    return options


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def active_run(options: argparse.Namespace, batch: int) -> ActiveRun:
    """A run of looping programs, its cache built by a few eager passes."""
    program = looping_programs(workload_geometry(options.columns), 1)[0]
    executor = TransformerExecutor(geometry_for(program), EngineConfig(
        device=options.device, dtype=options.dtype, evaluation="active"))
    runner = executor.runner(executor.load([program] * batch))
    runner.advance(4)
    return runner.active


def kernels_a_pass(run: ActiveRun, one_pass, device: str) -> str:
    if not device.startswith("cuda"):
        return "-"
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profile:
        for _ in range(10):
            one_pass()
        sync(device)
    kernels = [event for event in profile.events()
               if event.device_type == torch.autograd.DeviceType.CUDA]
    return f"{len(kernels) / 10:.0f}"


def graph_pace(run: ActiveRun, one_pass, device: str) -> tuple[float, float]:
    """Seconds a pass of a replayed graph (launch to seen finished) and of its launch."""
    live = [run.X, run.cache, *run.own_scores.values()]
    saved = [tensor.clone() for tensor in live]

    def passes() -> None:
        for _ in range(GRAPH_PASSES):
            one_pass()

    def undo() -> None:
        for kept, tensor in zip(saved, live):
            tensor.copy_(kept)
    replay = captured(passes, run.X.device, undo)
    replay()
    sync(device)
    launches, whole = [], []
    for _ in range(REPLAYS):
        start = time.perf_counter()
        replay()
        launched = time.perf_counter()
        sync(device)
        launches.append(launched - start)
        whole.append(time.perf_counter() - start)
    return min(whole) / GRAPH_PASSES, min(launches) / GRAPH_PASSES


def measure(label: str, run: ActiveRun, one_pass, options: argparse.Namespace,
            batch: int) -> None:
    kernels = kernels_a_pass(run, one_pass, options.device)
    per_pass, launch = graph_pace(run, one_pass, options.device)
    print(f"| {batch} | {label} | {kernels} | {per_pass * 1e3:.3f} | {launch * 1e3:.4f} | "
          f"{batch / per_pass:,.0f} |", flush=True)


def main() -> int:
    options = arguments()
    try:
        return report(options)
    except InputError as error:
        print(f"graph_pace.py: error: {error}", file=sys.stderr)
        return 2


def report(options: argparse.Namespace) -> int:
    TransformerExecutor(workload_geometry(options.columns), EngineConfig(
        device=options.device, dtype=options.dtype)).check_memory(max(options.batch))
    print(f"SUBLEQ active pass in CUDA graphs of {GRAPH_PASSES}, n = {options.columns}, "
          f"{options.dtype}, {options.device}, torch {torch.__version__}")
    print("| batch | pass | kernels a pass | ms a pass (graph) | ms a pass (launch) | steps/s |")
    print("|---:|---|---:|---:|---:|---:|")
    agree = True
    with torch.inference_mode():
        for batch in options.batch:
            run = active_run(options, batch)
            proven = torch.ones((), dtype=torch.bool, device=run.X.device)
            measure("eager", run, lambda: run._active_pass(proven), options, batch)
            if not options.compile:
                continue
            twin = active_run(options, batch)
            twin.X.copy_(run.X)
            twin._rebuild()
            run._rebuild()
            # One eager pass each learns which scratch queries are zero, so the compiled
            # pass reads nothing on the host and compiles as one graph; the reset makes
            # each batch a fresh compile, not a recompile counted against dynamo's limit.
            twin._active_pass(proven)
            run._active_pass(proven)
            torch._dynamo.reset()
            compiled = torch.compile(twin._active_pass, dynamic=False)
            start = time.perf_counter()
            compiled(proven)
            run._active_pass(proven)
            sync(options.device)
            seconds = time.perf_counter() - start
            same = 0
            while same < options.passes and torch.equal(run.X, twin.X):
                run._active_pass(proven)
                compiled(proven)
                same += 1
            agree = agree and same == options.passes and bool(proven)
            measure(f"compiled ({seconds:.1f} s first call, X equal for {same} of "
                    f"{options.passes} passes)", twin, lambda: compiled(proven), options, batch)
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
