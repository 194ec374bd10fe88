"""`ltvm train`: SGD on a small network, run by the looped transformer, beside exact SGD."""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from vm.cli.common import (add_engine_arguments, engine_config, finite_float, non_negative_int,
                           positive_float, positive_int, seed_value)
from vm.common.errors import InputError
from vm.common.limits import MAX_EPOCHS
from vm.functions.activations import ACTIVATIONS
from vm.tools.progress import Progress, TimeLimitExceeded

if TYPE_CHECKING:
    from vm.machines.fleq.domains import DomainViolation


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "train", help="train a network by SGD on the transformer, beside exact SGD (Section 9)",
        description="Build a FLEQ program from the data (samples and initial weights in "
                    "memory, one sgd_step per sample unrolled inside an epoch loop), run it on "
                    "the looped transformer, run the same SGD exactly in float64 numpy, and "
                    "print the mean loss of every epoch side by side with the largest weight "
                    "difference, then the final numbers as 'name: value' lines. Exit code 1 "
                    "when a block call of the exact run leaves its block's documented domain "
                    "(the 'domain' line names it), 2 for bad input.",
        epilog="example: ltvm train --data data.npz --hidden 3 --lr 0.1 --epochs 10")
    parser.add_argument("--data", required=True, metavar="FILE.npz",
                        help="arrays x (n x d_in) and y (n x d_out)")
    parser.add_argument("--hidden", type=non_negative_int, default=0, metavar="H",
                        help="hidden units (default 0: the linear model y = W x)")
    parser.add_argument("--lr", type=finite_float, default=0.1, metavar="ETA",
                        help="learning rate (default 0.1)")
    parser.add_argument("--epochs", type=positive_int, default=5, metavar="E",
                        help=f"passes over the data (default 5, at most {MAX_EPOCHS})")
    parser.add_argument("--activation", choices=list(ACTIVATIONS),
                        help="hidden-layer activation (default tanh; needs --hidden)")
    parser.add_argument("--no-bias", action="store_true",
                        help="do not append the constant input 1 that gives the first layer "
                             "a bias")
    parser.add_argument("--seed", type=seed_value, default=0, help="seed of the initial weights")
    parser.add_argument("--show-program", action="store_true",
                        help="print the generated FLEQ program and exit")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--max-seconds", type=positive_float, metavar="S",
                        help="stop after S seconds of wall time (exit 1). The set-up "
                             "counts: assembling the program and building the transformer "
                             "take seconds to minutes for thousands of samples; the limit is "
                             "checked before each of its stages (assembling; each "
                             "function block of the transformer's weights, each of its layers "
                             "and each step of its active evaluation's checks; loading: one "
                             "already begun runs to its end) and during the run; default: no "
                             "limit")
    add_engine_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from vm.apps.training import (TrainingSetup, load_dataset,  # torch: not for every call
                                  program_source, starting_point, train)

    if args.epochs > MAX_EPOCHS:  # before the data is read (TrainingSetup checks it too)
        raise InputError(f"--epochs {args.epochs} exceeds the limit of {MAX_EPOCHS}")
    if args.activation is not None and not args.hidden:  # ignored: the model is linear
        raise InputError("--activation applies to a hidden layer (--hidden H)")
    if args.show_program and args.json:  # --json was ignored: the program text came out
        raise InputError("--show-program prints the FLEQ program, not JSON; drop one of them")
    x, y = load_dataset(args.data)
    config = engine_config(args)
    setup = TrainingSetup(args.hidden, args.lr, args.epochs, args.activation or "tanh",
                          not args.no_bias, args.seed, config.dtype or "float64")
    # progress and --max-seconds every pass: at 15,000 columns (200 samples, hidden 4) a pass
    # takes 2 s, and the default 16 passes between reports ran 30 s past the limit in silence
    config = replace(config, dtype=setup.dtype, check_every=1)
    if args.show_program:
        inputs, targets, weights = starting_point(x, y, setup)
        print(program_source(inputs, targets, setup, weights), end="")
        return 0
    progress = Progress("steps", max_seconds=args.max_seconds)

    def checkpoint(stage: str) -> None:
        """--max-seconds between the set-up's stages (Progress checks it during the run)."""
        if args.max_seconds is not None and \
                time.monotonic() - progress.created >= args.max_seconds:
            raise TimeLimitExceeded(f"stopped by --max-seconds {args.max_seconds:g} before "
                                    f"{stage}, before the run began")

    try:
        result = train(x, y, setup, config, progress, checkpoint)
    finally:
        progress.done()
    distances, differences = result.weight_distances, result.loss_differences
    overflow = result.overflow
    summary = {"samples": len(x), "d_in": x.shape[1], "bias": setup.bias,
               "hidden": setup.hidden, "d_out": y.shape[1],
               "activation": setup.activation if setup.hidden else "none",
               "lr": setup.lr, "epochs": setup.epochs, "dtype": setup.dtype,
               "steps": result.steps, "instructions": result.instructions,
               "final_loss_transformer": _finite(result.transformer.losses[-1]),
               "final_loss_exact": _finite(result.exact.losses[-1]),
               "final_weight_difference": _finite(distances[-1]),
               "max_weight_difference": None if overflow else max(distances),
               "domain": _domain(result.violation),
               "overflow": overflow}
    failed = 1 if result.violation or overflow else 0
    if args.json:
        epochs = [{"epoch": i + 1, "loss_transformer": _finite(a), "loss_exact": _finite(b),
                   "loss_difference": _finite(c), "weight_difference": _finite(w)}
                  for i, (a, b, c, w) in enumerate(zip(result.transformer.losses,
                                                       result.exact.losses, differences,
                                                       distances))]
        print(json.dumps({**summary, "per_epoch": epochs}, indent=2, allow_nan=False))
        return failed
    print(f"{'epoch':>5}  {'loss (transformer)':>18}  {'loss (exact)':>14}  "
          f"{'|difference|':>12}  {'max |W - W_exact|':>17}")
    for i, (a, b, c, w) in enumerate(zip(result.transformer.losses, result.exact.losses,
                                         differences, distances)):
        print(f"{i + 1:>5}  {_shown(a, 18, '.10g')}  {_shown(b, 14, '.10g')}  "
              f"{_shown(c, 12, '.3g')}  {_shown(w, 17, '.3g')}")
    for name, value in summary.items():
        if name == "overflow":
            if value:
                print(f"overflow: {value}")
        elif value is None:
            print(f"{name}: overflowed (see overflow)")
        else:
            print(f"{name}: {value:.10g}" if isinstance(value, float) else f"{name}: {value}")
    return failed


def _domain(violation: DomainViolation | None) -> str:
    """The domain line: train has no --param, so the block's own advice to widen its domain
    with one (`--param matmul.span=N`, an unrecognized argument here) gives way to
    scaling the data."""
    if violation is None:
        return "ok"
    return f"{replace(violation, widen=None).describe()}; scale the data down"


def _finite(value: float) -> float | None:
    """`value`, or None where it overflowed: JSON has no NaN or Infinity, and the
    `overflow` field says why."""
    return value if math.isfinite(value) else None


def _shown(value: float, width: int, spec: str) -> str:
    """A table entry: the number, or 'overflow' where it is not finite (never 'nan')."""
    return f"{value:>{width}{spec}}" if math.isfinite(value) else f"{'overflow':>{width}}"
