"""`ltvm bench`: speed of the looped transformer beside the reference interpreter."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from vm.cli.common import integer, positive_float, positive_int, thread_count
from vm.common.json_values import finite_or_null
from vm.runtime.config import DTYPE_NAMES, EVALUATIONS, EngineConfig
from vm.tools.workloads import FLEQ_WORKLOADS
from vm.transformer.modes import ATTENTION_MODES

BENCH_TARGETS = ["attention", "rope", "vsubleq"]
"""Modules of vm.cli that add a `register_bench(targets)` sub-target."""


def _int_list(text: str) -> list[int]:
    try:
        values = [integer(part) for part in text.split(",")]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'")
    if any(value < 1 for value in values):
        raise argparse.ArgumentTypeError("values must be positive")
    return values


ATTENTION_HELP = ("masked (default): scratch columns attend to every column, the others to "
                  "the scratchpad and themselves; dense: every column to every column")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Device, dtype, attention and evaluation of a benchmark of the looped transformer."""
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--dtype", choices=list(DTYPE_NAMES), default="float32",
                        help="the machine's float type (default float32)")
    parser.add_argument("--attention", choices=list(ATTENTION_MODES), default="masked",
                        help=ATTENTION_HELP)
    parser.add_argument("--evaluation", choices=list(EVALUATIONS), default="auto",
                        help="fused, active: only the columns a pass can change (fused: "
                             "compiled with numba on the CPU, CUDA graphs on a GPU; active: "
                             "in torch), bit-identical to full; full: every column, the "
                             "definition; auto (default): what `ltvm run` uses (the evaluation "
                             "column says which ran; a fused row's warm-up includes numba's "
                             "compile when its cache is cold, or the graph's capture)")


MAX_BENCH_SECONDS = 3600.0
"""A measurement's longest budget: an hour a cell is surely a typo for fewer seconds."""


def bench_seconds(text: str) -> float:
    """argparse type: a measurement's time budget, above 0 and at most MAX_BENCH_SECONDS."""
    value = positive_float(text)
    if value > MAX_BENCH_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BENCH_SECONDS:g} seconds, "
                                         f"got {text}")
    return value


MAX_ROUNDS = 100
"""The most rounds a cell takes: each costs about twice `--seconds`."""


def bench_rounds(text: str) -> int:
    """argparse type: rounds a cell, 1 to MAX_ROUNDS."""
    value = positive_int(text)
    if value > MAX_ROUNDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_ROUNDS}, got {value}")
    return value


def _add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=bench_seconds, default=2.0,
                        help="time budget per measurement, after a warm-up (a pass, a CUDA "
                             "graph's chunk, or a FLEQ program's whole run) that is timed and "
                             "shown apart (default 2, at most 3600)")
    parser.add_argument("--threads", type=thread_count,
                        help="CPU threads of torch and of the fused pass, 1 to 256 (default: "
                             "one or all, whichever the run measures faster; one for torch "
                             "passes of up to 2^29 multiply-adds, such as SUBLEQ's up to about "
                             "32K batch x columns, and for batch 1 of the fused pass; the "
                             "threads column shows the count most passes used)")
    parser.add_argument("--rounds", type=bench_rounds, default=1,
                        help="measure each row this many times in a row, each round with "
                             "the reference run between its own chunks, and report the round "
                             "whose ratio is their median, with the lowest and highest ratio "
                             "(default 1, at most 100; each round takes about twice --seconds)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "bench", help="steps per second of the transformer and the reference interpreter",
        description=("Time the SUBLEQ looped transformer at several column counts n (N = "
                     "8-bit words) and batch sizes, beside the reference interpreter, run "
                     "in slices between each row's timed chunks (its rate, and how far it "
                     "drifted meanwhile). Under the table: how a pass's cost grows with n at each "
                     "batch (cost ~ n^x from the fewest to the most columns)."
                     + (" Other targets: " + ", ".join(BENCH_TARGETS) + "."
                        if BENCH_TARGETS else "")
                     + " FLEQ: `ltvm bench fleq`."))
    parser.add_argument("--columns", type=_int_list, default=[64, 256, 1024], metavar="N,...",
                        help="column counts n (default 64,256,1024)")
    parser.add_argument("--batch", type=_int_list, default=[1, 256], metavar="B,...",
                        help="batch sizes (default 1,256)")
    add_engine_arguments(parser)
    _add_common_arguments(parser)
    parser.set_defaults(func=run)
    targets = parser.add_subparsers(dest="target", metavar="TARGET", action=_Targets)
    for name in BENCH_TARGETS:
        importlib.import_module(f"vm.cli.{name}").register_bench(targets)
    _register_fleq(targets)


class _Targets(argparse._SubParsersAction):
    """The TARGET argument. It refuses options written before the target, which would
    otherwise be dropped without a word: argparse lets the target's own defaults replace
    them (`ltvm bench --device cuda fleq` timed the CPU, `--json vsubleq` printed a
    table)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        given = [f"--{dest.replace('_', '-')}" for dest in vars(namespace)
                 if dest != self.dest and getattr(namespace, dest) != parser.get_default(dest)]
        if given:
            raise argparse.ArgumentError(self, f"{', '.join(given)} before '{values[0]}' would "
                                               f"be ignored: write them after it")
        super().__call__(parser, namespace, values, option_string)


def _register_fleq(targets: argparse._SubParsersAction) -> None:
    parser = targets.add_parser(
        "fleq", help="time one pass of the FLEQ looped transformer",
        description="Time passes of the FLEQ looped transformer (unchecked; weights built "
                    "before timing): runs of the program from its start to its halt, "
                    "repeated, on built-in workloads or .fleq files. Built-in: "
                    "calculator (programs/fleq/calculator.fleq, d = 1) and inverse-d8 "
                    "(X = inverse(A, iters=3) on an 8 x 8 matrix, then y = inv(x)).")
    parser.add_argument("programs", nargs="*", default=list(FLEQ_WORKLOADS), metavar="PROGRAM",
                        help="built-in workload names or .fleq files (default: "
                             + " ".join(FLEQ_WORKLOADS) + ")")
    parser.add_argument("--batch", type=_int_list, default=[1], metavar="B,...",
                        help="batch sizes (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--dtype", choices=list(DTYPE_NAMES),
                        help="default: the machine's (float64 for FLEQ)")
    parser.add_argument("--attention", choices=list(ATTENTION_MODES), default="masked",
                        help=ATTENTION_HELP)
    parser.add_argument("--evaluation", choices=list(EVALUATIONS), default="auto",
                        help="active: skip the function blocks the instruction does not "
                             "select, bit-identical to full and falling back to it when its "
                             "guard fails; fused: on a GPU, the active pass as CUDA graphs "
                             "(the CPU has none and runs active); full: every block, the "
                             "definition; auto (default): what `ltvm run` uses (the "
                             "evaluation column says which ran; the warm-up is one whole run, "
                             "graph captures included)")
    _add_common_arguments(parser)
    parser.set_defaults(func=run_fleq)


def run_fleq(args: argparse.Namespace) -> int:
    import torch  # here, not at the top: every `ltvm` call imports this module

    from vm.tools.bench import bench_fleq, format_fleq_table

    config = EngineConfig(dtype=args.dtype, device=args.device, attention=args.attention,
                          threads=args.threads, evaluation=args.evaluation)
    rows = bench_fleq(args.programs, args.batch, config, args.seconds,
                      lambda message: print(message, file=sys.stderr, flush=True), args.rounds)
    device = torch.cuda.get_device_name() if config.device.startswith("cuda") else "cpu"
    title = f"FLEQ looped transformer, {device}, torch {torch.__version__}"
    _report(title, [row.as_dict() for row in rows], format_fleq_table(rows), args.json)
    return 0


def run(args: argparse.Namespace) -> int:
    import torch  # see `run_fleq`

    from vm.tools.bench import bench, format_growth, format_table, growth

    config = EngineConfig(dtype=args.dtype, device=args.device, attention=args.attention,
                          threads=args.threads, evaluation=args.evaluation)
    rows = bench(args.columns, args.batch, config, args.seconds,
                 lambda message: print(message, file=sys.stderr, flush=True), args.rounds)
    device = torch.cuda.get_device_name() if config.device.startswith("cuda") else \
        f"cpu ({torch.get_num_threads()} cores available to torch)"
    title = f"SUBLEQ looped transformer, N = 8-bit words, {device}, torch {torch.__version__}"
    grows = growth(rows)
    _report(title, [row.as_dict() for row in rows], format_table(rows), args.json,
            {"growth": [item.as_dict() for item in grows]}, format_growth(grows))
    return 0


def _report(title: str, rows: list[dict], table: str, as_json: bool, more: dict | None = None,
            footer: str = "") -> None:
    """The table under its title, then `footer` if any; or one JSON object of the title,
    the rows and `more`."""
    if as_json:
        print(json.dumps(finite_or_null({"title": title, "rows": rows, **(more or {})}),
                         indent=2, allow_nan=False))
        return
    print(title)
    print(table)
    if footer:
        print(footer)
