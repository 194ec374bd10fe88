"""Where a FLEQ pass's CPU time goes, by torch operation (`torch.profiler`).

A FLEQ pass is hundreds of eager torch operations (docs/speed.md, "FLEQ"); this script runs
a program's own passes through the run loop `ltvm bench fleq` times (restarted at each
halt), then profiles a few more runs and prints each operation's share of the CPU time,
largest first, with the milliseconds a pass it took before profiling.

    python examples/fleq_profile.py calculator --runs 5
"""

from __future__ import annotations

import argparse
import sys
import time


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("program", nargs="?", default="calculator",
                        help="a built-in workload (calculator, inverse-d8) or a .fleq file "
                             "(default: calculator)")
    parser.add_argument("--runs", type=int, default=5,
                        help="runs of the program to profile, each from its start to its halt "
                             "(default 5, at most 1000)")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads torch uses (default 1)")
    parser.add_argument("--rows", type=int, default=15,
                        help="operations listed (default 15)")
    options = parser.parse_args()
    for name, most in (("runs", 1000), ("threads", 256), ("rows", 1000)):
        if not 1 <= getattr(options, name) <= most:
            parser.error(f"--{name}: must be between 1 and {most}")
    return options


def main() -> int:
    options = arguments()
    import torch
    from torch.profiler import ProfilerActivity, profile

    from vm.common.errors import InputError
    from vm.runtime.executor import EngineConfig, TransformerExecutor
    from vm.tools.bench import FLEQ_BENCH_STEPS, fleq_geometry_for, fleq_workload

    try:
        program = fleq_workload(options.program)
        executor = TransformerExecutor(fleq_geometry_for(program),
                                       EngineConfig(checked=False, threads=options.threads))
    except InputError as error:
        print(f"fleq_profile.py: error: {error}", file=sys.stderr)
        return 2
    torch.set_num_threads(options.threads)
    X = executor.load([program])
    runner = executor.runner(X)
    runner.advance(FLEQ_BENCH_STEPS)  # the warm-up, which gives the run's length
    length = max(1, int(runner.result().steps.max()))

    def runs(count: int) -> None:
        for _ in range(count):
            runner.restart(X)
            runner.advance(length)

    start = time.perf_counter()
    runs(options.runs)
    per_pass = (time.perf_counter() - start) / (options.runs * length)
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        runs(options.runs)
    events = sorted(profiled.key_averages(), key=lambda event: event.self_cpu_time_total,
                    reverse=True)
    total = sum(event.self_cpu_time_total for event in events) or 1.0
    print(f"{options.program}: {length} passes a run, {per_pass * 1e3:.3f} ms a pass "
          f"({runner.evaluation} evaluation, {options.threads} thread(s)), "
          f"{options.runs} runs profiled")
    print(f"{'share':>7}  {'calls a pass':>12}  {'us a call':>9}  operation")
    for event in events[:options.rows]:
        calls = event.count / (options.runs * length)
        print(f"{100 * event.self_cpu_time_total / total:6.2f}%  {calls:12.1f}  "
              f"{event.self_cpu_time_total / max(event.count, 1):9.1f}  {event.key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
