"""`ltvm bench vsubleq`: steps/s of the standard SUBLEQ transformer beside its reference."""

from __future__ import annotations

import argparse
import json
import sys

from vm.cli.bench import add_engine_arguments, bench_seconds
from vm.cli.common import integer
from vm.machines.vsubleq.layout import MAX_MEMORY
from vm.machines.vsubleq.reference import MAX_BITS

DEFAULT_WORDS = [256, 4096]
DEFAULT_BITS = 16


def _words(text: str) -> list[int]:
    try:
        return [integer(part) for part in text.split(",")]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'")


def register_bench(targets: argparse._SubParsersAction) -> None:
    """Add the `vsubleq` target of `ltvm bench`."""
    parser = targets.add_parser(
        "vsubleq", help="steps/s of the standard SUBLEQ transformer beside its reference",
        description="Time the standard (von Neumann) SUBLEQ looped transformer on a counting "
                    "loop that never halts, padded to m memory words, beside the reference "
                    "interpreter measured in the same run. Tapes are empty.")
    parser.add_argument("--words", type=_words, default=DEFAULT_WORDS, metavar="M,...",
                        help=f"memory sizes m, powers of two up to {MAX_MEMORY} that hold the "
                             "loop (default " + ",".join(map(str, DEFAULT_WORDS)) + ")")
    parser.add_argument("--bits", type=integer, default=DEFAULT_BITS, metavar="N",
                        help=f"word size N, 4 to {MAX_BITS}; m <= 2^(N-1) (default "
                             f"{DEFAULT_BITS})")
    parser.add_argument("--seconds", type=bench_seconds, default=2.0,
                        help="time budget per measurement (transformer, then reference), "
                             "after a one-pass warm-up timed apart (default 2, at most 3600)")
    add_engine_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch  # here, not at the top: every `ltvm` call imports this module

    from vm.transformer.devices import check_device
    from vm.tools.vsubleq_bench import bench_vsubleq, format_vsubleq_table

    check_device(args.device)  # a traceback from torch's first tensor, for cuda without one
    rows = bench_vsubleq(args.words, args.bits, args.seconds, args.dtype, args.attention,
                         args.device, args.evaluation,
                         lambda message: print(message, file=sys.stderr, flush=True))
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    title = (f"standard SUBLEQ looped transformer, counting loop, {device}, "
             f"torch {torch.__version__}")
    if args.json:
        print(json.dumps({"title": title, "rows": [row.as_dict() for row in rows]}, indent=2))
    else:
        print(title)
        print(format_vsubleq_table(rows))
    return 0
