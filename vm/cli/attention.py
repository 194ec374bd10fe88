"""`ltvm attention` and `ltvm bench attention`: long attention simulated by small oracle calls.

`ltvm attention` runs one random instance of one variant and prints one `name: value` line
per figure (or one JSON object with --json): the oracle calls and the exact count the
variant's formula predicts, the simulation's relative error against attention computed
directly in float64, its wall time and its peak extra memory.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from vm.attention.chunked import MODES
from vm.attention.chunked.limits import (BANDED_MAX_N, MAX_M, MAX_N, check_calls,
                                         check_limits, check_memory, check_score_scale)
from vm.cli.common import (directory_path, integer, non_negative_float, positive_float,
                           seed_value, thread_count)
from vm.common.errors import InputError, RunFailure, shown_path
from vm.tools.progress import Progress

DTYPE_NAMES = ("float32", "float64")
REFERENCE_CHUNK_BYTES = 2 ** 28


def register(commands: argparse._SubParsersAction) -> None:
    """Add the `attention` subcommand."""
    parser = commands.add_parser(
        "attention", help="simulate N-token attention with oracle calls of length M",
        description="Run one random instance of a chunked-attention variant and report its "
        "oracle calls, error against direct attention, time and peak memory.")
    parser.add_argument("--n", type=integer, required=True, metavar="N",
                        help=f"sequence length N, up to {MAX_N} (window and sink: "
                             f"{BANDED_MAX_N})")
    parser.add_argument("--m", type=integer, required=True, metavar="M",
                        help=f"oracle input length M, at most N and {MAX_M}")
    parser.add_argument("--mode", required=True, help=f"one of {', '.join(MODES)}")
    parser.add_argument("--heads", type=integer, default=1, help="heads per layer H (default 1)")
    parser.add_argument("--layers", type=integer, default=1, help="layers L (default 1)")
    parser.add_argument("--head-dim", type=integer, default=16,
                        help="head dimension m (default 16)")
    parser.add_argument("--oracle-heads", type=integer, default=1,
                        help="oracle heads H' (default 1)")
    parser.add_argument("--oracle-layers", type=integer, default=1,
                        help="oracle layers L' (default 1)")
    parser.add_argument("--dtype", default="float32", help="float32 (default) or float64")
    parser.add_argument("--seed", type=seed_value, default=0, help="random seed (default 0)")
    parser.add_argument("--window", type=integer, default=None,
                        help="window size r for window/sink (default M // 2)")
    parser.add_argument("--sinks", type=integer, default=None,
                        help="sink count s for sink (default 4)")
    parser.add_argument("--score-scale", type=non_negative_float, default=1.0,
                        help="standard deviation of the first layer's scores (default 1)")
    parser.add_argument("--threads", type=thread_count, default=1,
                        help="torch threads (default 1)")
    parser.add_argument("--max-seconds", type=positive_float, metavar="S",
                        help="stop the whole command after S seconds of wall time (default: "
                             "no limit; long stages show their progress on stderr)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def register_bench(targets: argparse._SubParsersAction) -> None:
    """Add the `attention` target of `ltvm bench`."""
    parser = targets.add_parser(
        "attention", help="full attention vs. its simulations: time and peak memory",
        description="Measure full attention and the exact, window and sampled simulations "
        "for every N and M, each in a fresh process; write a table and a plot.")
    parser.add_argument("--out", type=directory_path, default=Path("out/bench-attention"),
                        metavar="DIR", help="output directory (default out/bench-attention)")
    parser.add_argument("--n-values", type=_int_list, default=[4096, 16384, 65536],
                        metavar="N,...",
                        help=f"sequence lengths N, 2 to {MAX_N} (default 4096,16384,65536)")
    parser.add_argument("--m-values", type=_int_list, default=[256, 1024], metavar="M,...",
                        help=f"oracle input lengths M, 2 to {MAX_M} (default 256,1024)")
    parser.add_argument("--full-limit-gib", type=positive_float, default=4.0,
                        help="skip full attention above this estimated memory (default 4)")
    parser.add_argument("--head-dim", type=integer, default=16, help="head dimension (default 16)")
    parser.add_argument("--seed", type=seed_value, default=0, help="random seed (default 0)")
    parser.add_argument("--threads", type=thread_count, default=1,
                        help="torch threads of every measured process (default 1)")
    parser.set_defaults(func=run_bench_command)


def _int_list(text: str) -> list[int]:
    try:
        return [integer(item) for item in text.split(",") if item.strip()]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}")


def run(args: argparse.Namespace) -> int:
    """Simulate one random instance and print its figures."""
    if args.dtype not in DTYPE_NAMES:
        raise InputError(f"unknown dtype '{args.dtype}' (choose float32 or float64)")
    for name in ("heads", "layers", "head_dim"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be positive, got "
                             f"{getattr(args, name)}")
    check_limits(args.mode, args.n, args.m, heads=args.heads, layers=args.layers,
                 head_dim=args.head_dim, oracle_heads=args.oracle_heads,
                 oracle_layers=args.oracle_layers)
    check_memory(args.n, args.heads, args.layers, args.head_dim)
    check_score_scale(args.score_scale, args.dtype)
    import torch  # here, not at the top: every `ltvm` call imports this module

    from vm.attention.chunked.average_case import check_first_layer
    from vm.attention.chunked.memory import measure
    from vm.attention.chunked.model import random_instance
    from vm.attention.chunked.reference import direct_forward, relative_error
    from vm.attention.chunked.simulate import check_sizes, expected_calls, mode_mask, simulate

    torch.set_num_threads(args.threads)
    unused = [flag for flag, value, modes in (("--window", args.window, ("window", "sink")),
                                              ("--sinks", args.sinks, ("sink",)))
              if value is not None and args.mode not in modes]
    if unused:  # silently ignored before: a run the user did not ask for
        raise InputError(f"{' and '.join(unused)} do{'es' if len(unused) == 1 else ''} not "
                         f"apply to mode {args.mode}")
    window = args.m // 2 if args.window is None else args.window
    mask = mode_mask(args.mode, window, 4 if args.sinks is None else args.sinks)
    check_sizes(args.mode, args.n, args.m, mask, args.oracle_heads, args.oracle_layers)
    expected = expected_calls(args.mode, args.n, args.m, args.heads, args.layers,
                              args.oracle_heads, args.oracle_layers, mask.window, mask.sinks)
    check_calls(f"the {args.mode} simulation at N={args.n}, M={args.m}", expected,
                "raise --m, --oracle-heads or --oracle-layers, or lower --n, --heads or --layers")
    # one limit for the whole command: both stages' clocks start here
    calls = Progress("oracle calls", expected, max_seconds=args.max_seconds,
                     unfinished="the simulation finished")
    rows = Progress("reference rows", args.layers * args.heads * args.n,
                    max_seconds=args.max_seconds, unfinished="the direct attention finished")
    checked = Progress("first-layer rows checked", args.heads * args.n,
                       max_seconds=args.max_seconds, unfinished="Theorem 4.1's check finished")
    x, model = random_instance(args.n, args.heads, args.layers, args.head_dim, mask,
                               getattr(torch, args.dtype), args.seed, args.score_scale)
    result, taken = measure(lambda: simulate(model, x, args.mode, args.m, args.oracle_heads,
                                             args.oracle_layers, args.seed, calls))
    calls.done()
    reference, log_normalizers = direct_forward(
        model.to(torch.float64), x.double(),
        row_chunk=max(1, REFERENCE_CHUNK_BYTES // (8 * args.n)), progress=rows)
    rows.done()
    report = {
        "mode": args.mode, "n": args.n, "m": args.m, "heads": args.heads, "layers": args.layers,
        "oracle_heads": args.oracle_heads, "oracle_layers": args.oracle_layers,
        "dtype": args.dtype, "calls": result.calls, "expected_calls": result.expected_calls,
        "error": relative_error(result.output, reference), "time": taken.seconds,
        "memory": taken.peak_bytes, "memory_method": taken.method,
    }
    if args.mode in ("window", "sink"):
        report.update(window=mask.window, sinks=mask.sinks, amplification=result.amplification)
    if args.mode == "sampled":
        check = check_first_layer(model, x, args.m, checked)
        checked.done()
        ratio = (result.log_normalizers[0] - log_normalizers[0]).exp()
        report.update(normalizer_error=float((ratio - 1).abs().max()),
                      normalizer_bound=check.normalizer_bound, bound=check.output_bound,
                      c=check.c, d=check.d, sample=check.sample)
    measured = [key for key in ("error", "normalizer_error") if key in report]
    if not all(math.isfinite(report[key]) for key in measured):
        raise RunFailure(f"precision error: the {args.dtype} simulation's "
                         f"{' and '.join(measured)} came out "
                         f"{', '.join(str(report[key]) for key in measured)}; use float64 or "
                         "a smaller --score-scale")
    _print(report, args.json)
    if result.calls != result.expected_calls:
        raise RunFailure(f"the simulation made {result.calls} oracle calls, its formula says "
                         f"{result.expected_calls}")
    return 0


def _print(report: dict, as_json: bool) -> None:
    if as_json:
        # Theorem 4.1's figures are infinite where it gives no bound (C beyond e^700): JSON
        # has no infinity, so they become null.
        print(json.dumps({key: None if isinstance(value, float) and not math.isfinite(value)
                          else value for key, value in report.items()}))
        return
    units = {"time": lambda v: f"{v:.3f} s", "memory": lambda v: f"{v / 2 ** 20:.1f} MiB"}
    for key, value in report.items():
        if key in units:
            text = units[key](value)
        elif isinstance(value, float):
            text = f"{value:.3g}"
        else:
            text = str(value)
        print(f"{key}: {text}")


def run_bench_command(args: argparse.Namespace) -> int:
    """Run the attention bench and say where its table and plot are."""
    from vm.attention.chunked.bench import run_bench  # torch: see `run`

    run_bench(args.out, args.n_values, args.m_values, args.full_limit_gib, args.head_dim,
              args.seed, threads=args.threads)
    print((args.out / "attention.md").read_text(), end="")
    print(f"table: {shown_path(args.out / 'attention.md')} (and attention.csv)")
    print(f"plot: {shown_path(args.out / 'attention.png')}")
    return 0
