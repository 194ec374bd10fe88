"""`ltvm rope`: the RoPE-attention gradient, exact against almost-linear (the RoPE paper).

One random instance with scores in [-B, B] (docs/rope_attention.md): the closed-form
gradient of Lemma 5.3 computed exactly (O(n^2)) and by the polynomial method of Section 6
(degree g, factors of rank k, no n x n matrix), with the relative error of the fast one,
the time and peak extra memory of both and the rank. One `name: value` line per figure,
or one JSON object with --json.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path

from vm.cli.common import directory_path, integer, number, positive_float, seed_value
from vm.common.errors import InputError, RunFailure
from vm.tools.progress import Progress

MAX_N = 1 << 17
MAX_D = 16
MAX_DEGREE = 8
MEMORY_LIMIT = 4 * 2 ** 30
"""The largest n x n matrix (exact path) or set of factors (fast path) a run may hold."""
BLOCK_ENTRIES = 1 << 18
"""Rows of the exact gradient done at once: block x n entries (2 MiB: the n x n blocks
stay in cache; 2^24 entries made the exact path 1.5 to 7 x slower)."""
MIN_BOUND = 1e-30
"""Converting the Chebyshev interpolant of exp on [-B, B] to monomials divides its k-th
coefficient by B^k, so its rounding noise (1e-16) becomes a coefficient near 1e-16 / B^g:
past float64's range (1.8e308) from B = 1e-40 at g = 8, which made NaN gradients. 1e-30
keeps that below 1e225 at every degree; exp is 1 to the last bit long before (B < 1e-16)."""
MAX_BOUND = 350.0
"""exp_error is |P(x) - e^x| / e^x at x = -B, about e^(2B) times the polynomial's error:
float64 holds e^(2B) only below B = ln(1.8e308) / 2 = 354.9 (B = 360 printed inf, B = 710
NaN, and exp itself overflows from B = 709.8). Every figure stays finite up to 350 at every
degree and n; the fast gradient's error is far above 1 long before (3e6 at B = 50)."""
MAX_MONOMIALS = 100_000
"""The most monomials of degree g + 1 over the |S| = 2d support that the general route
enumerates in Python before its first progress report (about 12 s): at d = 8, degree 8 it
would enumerate 2.0 million, minutes of silent work that --max-seconds could not stop."""
FORMS = ("rotary", "general")
BENCH_SECTIONS = ("time", "error", "boundary", "d8", "general")


def register(commands: argparse._SubParsersAction) -> None:
    """Add the `rope` subcommand."""
    parser = commands.add_parser(
        "rope", help="RoPE attention gradient: exact vs. the almost-linear polynomial method",
        description="Compute the gradient of the RoPE attention loss for one random instance "
        "exactly and by the polynomial method; report the error, time, memory and rank.")
    parser.add_argument("--n", type=integer, required=True, help=f"sequence length (<= {MAX_N})")
    parser.add_argument("--d", type=integer, default=4, help=f"head dimension (<= {MAX_D}, "
                        "even for the rotary form; default 4)")
    parser.add_argument("--bound", type=number, default=1.0,
                        help=f"B: every score lies in [-B, B], {MIN_BOUND:g} to {MAX_BOUND:g} "
                             "(default 1)")
    parser.add_argument("--degree", type=integer, default=8,
                        help=f"degree g of the polynomial for exp (<= {MAX_DEGREE}; default 8)")
    parser.add_argument("--form", default="rotary", help="rotary (default) or general")
    parser.add_argument("--seed", type=seed_value, default=0, help="random seed (default 0)")
    parser.add_argument("--skip-exact", action="store_true",
                        help="run only the fast path (no error figure)")
    parser.add_argument("--max-seconds", type=positive_float, metavar="S",
                        help="stop the whole command after S seconds of wall time (default: "
                             "no limit; both gradients show their progress on stderr)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse bad sizes before anything is allocated (InputError, exit 2)."""
    from vm.attention.rope.fast import working_bytes  # torch: see `run`
    from vm.attention.rope.polynomial import rank

    if args.form not in FORMS:
        raise InputError(f"unknown form '{args.form}' (choose rotary or general)")
    if not 1 <= args.n <= MAX_N:
        raise InputError(f"--n must be between 1 and {MAX_N}, got {args.n}")
    if not 1 <= args.d <= MAX_D:
        raise InputError(f"--d must be between 1 and {MAX_D}, got {args.d}")
    if args.form == "rotary" and args.d % 2:
        raise InputError(f"the rotary form rotates pairs of coordinates: --d must be even, "
                         f"got {args.d}")
    if not 0 <= args.degree <= MAX_DEGREE:
        raise InputError(f"--degree must be between 0 and {MAX_DEGREE}, got {args.degree}")
    if not (math.isfinite(args.bound) and args.bound > 0):
        raise InputError(f"--bound must be finite and positive, got {args.bound:g}")
    if not MIN_BOUND <= args.bound <= MAX_BOUND:
        raise InputError(f"--bound must be between {MIN_BOUND:g} and {MAX_BOUND:g}, got "
                         f"{args.bound:g}: beyond them the polynomial method's coefficients "
                         "(below) or its error against e^x (above, about e^(2B)) leave "
                         "float64's range")
    monomials = rank(2 * args.d, args.degree + 1)
    if args.form == "general" and monomials > MAX_MONOMIALS:
        raise InputError(f"the general route at d={args.d}, degree {args.degree} enumerates "
                         f"{monomials:,} monomials before it starts (limit {MAX_MONOMIALS:,}, "
                         "minutes of set-up): lower --degree or --d")
    fast = working_bytes(args.n, args.d, args.degree, args.form)
    if fast > MEMORY_LIMIT:
        raise InputError(f"the fast {args.form} route at d={args.d}, degree {args.degree} "
                         f"would hold {fast / 2 ** 30:.1f} GiB of factors (limit "
                         f"{MEMORY_LIMIT // 2 ** 30} GiB): lower --degree or --d")
    square = 8 * args.n ** 2
    if square > MEMORY_LIMIT and not args.skip_exact:
        raise InputError(f"the exact gradient at n={args.n} works on an n x n matrix of "
                         f"{square / 2 ** 30:.1f} GiB (limit {MEMORY_LIMIT // 2 ** 30} GiB): "
                         "pass --skip-exact to run only the fast path")


def register_bench(targets: argparse._SubParsersAction) -> None:
    """Add the `rope` target of `ltvm bench`."""
    parser = targets.add_parser(
        "rope", help="RoPE gradient: exact vs the polynomial method, time, memory, error",
        description="Time and peak memory of the exact and the fast RoPE attention gradient "
                    "for n = 2^8 .. 2^16 (d = 4, B = 1) with fitted log-log exponents, the "
                    "fast gradient's error against the degree for B in 0.5..4, the B where "
                    "it stops beating the exact one at error 1e-6, d = 8 and the general "
                    "form; writes rope_gradient.md, .csv and .png into --out "
                    "(docs/rope_attention.md). Several minutes a section; --quick for a "
                    "smoke run.")
    parser.add_argument("--out", type=directory_path, default=Path("out/bench-rope"),
                        help="output directory (default out/bench-rope)")
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--max-exact-n", type=integer, default=1 << 14, metavar="N",
                        help="largest n the exact gradient is measured at, 2^8..2^16 "
                             "(default 2^14; beyond it its time is extrapolated)")
    parser.add_argument("--degree", type=integer, default=8, metavar="G",
                        help="polynomial degree of the timing sweep, 1..8 (default 8)")
    parser.add_argument("--sections", default=",".join(BENCH_SECTIONS), metavar="LIST",
                        help="comma-separated sweeps to run, of " + ", ".join(BENCH_SECTIONS)
                             + " (default all; each alone stays under about 5 minutes)")
    parser.set_defaults(func=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    if not (1 << 8) <= args.max_exact_n <= (1 << 16):
        raise InputError(f"--max-exact-n must be between 256 and 65536, got {args.max_exact_n}")
    if not 1 <= args.degree <= 8:
        raise InputError(f"--degree must be between 1 and 8, got {args.degree}")
    sections = [name for name in args.sections.split(",") if name]
    unknown = [name for name in sections if name not in BENCH_SECTIONS]
    if unknown or not sections:
        raise InputError(f"--sections takes a comma-separated list of "
                         f"{', '.join(BENCH_SECTIONS)}, got '{args.sections}'")
    args.sections = sections
    from vm.attention.rope.bench import run as run_sweeps  # torch, matplotlib: bench only
    return run_sweeps(args)


def run(args: argparse.Namespace) -> int:
    """Compute both gradients of one random instance and print the figures."""
    check_arguments(args)
    import torch  # here, not at the top: every `ltvm` call imports this module

    from vm.attention.chunked.memory import measure
    from vm.attention.rope.fast import fast_gradient
    from vm.attention.rope.gradient import exact_gradient, exact_rotary_gradient
    from vm.attention.rope.instance import random_instance
    from vm.attention.rope.polynomial import exp_error_bound

    # one limit for the whole command: both gradients' clocks start here
    fast_done, exact_done = (Progress(f"percent of the {name} gradient", 100,
                                      max_seconds=args.max_seconds, unfinished="it finished")
                             for name in ("fast", "exact"))
    inst = random_instance(args.n, args.d, args.bound, args.form, args.seed)
    fast, fast_taken = measure(lambda: fast_gradient(inst, args.form, args.degree, args.bound,
                                                     _percent(fast_done)))
    fast_done.done()
    report = {"form": args.form, "n": args.n, "d": args.d, "bound": args.bound,
              "degree": args.degree, "rank": fast.rank,
              "exp_error": exp_error_bound(args.bound, args.degree)}
    if not args.skip_exact:
        block = max(1, BLOCK_ENTRIES // args.n)
        exact_route = exact_rotary_gradient if args.form == "rotary" else (
            lambda inst, block, progress: exact_gradient(inst, block=block, progress=progress))
        exact, exact_taken = measure(lambda: exact_route(inst, block, _percent(exact_done)))
        exact_done.done()
        scale = float(exact.dx.norm())
        # at n = 1 the softmax is constant and the exact gradient is 0: a relative error is
        # undefined there (it printed 0 beside a nonzero max_abs_error), so it is null
        report.update(error=float((fast.dx - exact.dx).norm()) / scale if scale else None,
                      max_abs_error=float((fast.dx - exact.dx).abs().max()),
                      loss_error=abs(fast.loss - exact.loss) / max(exact.loss, 1e-300),
                      exact_time=exact_taken.seconds, exact_memory=exact_taken.peak_bytes)
    report.update(fast_time=fast_taken.seconds, fast_memory=fast_taken.peak_bytes,
                  factor_memory=fast.factor_bytes, memory_method=fast_taken.method,
                  threads=torch.get_num_threads())
    broken = [key for key, value in report.items()
              if isinstance(value, float) and not math.isfinite(value)]
    if broken:
        raise RunFailure(f"precision error: {', '.join(broken)} came out "
                         f"{', '.join(str(report[key]) for key in broken)} in float64 at "
                         f"--bound {args.bound:g}, --degree {args.degree}; use a bound nearer 1")
    _print(report, args.json)
    return 0


def _percent(progress: Progress) -> Callable[[float], None]:
    """A fraction-done callback for `progress`, counted in whole percent."""
    return lambda fraction: progress(int(100 * fraction))


def _print(report: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report))
        return
    for key, value in report.items():
        if key.endswith("_time"):
            text = f"{value:.3f} s"
        elif key.endswith("memory"):
            text = f"{value / 2 ** 20:.1f} MiB"
        elif isinstance(value, float):
            text = f"{value:.3g}"
        elif value is None:
            text = "undefined (the exact gradient is 0; see max_abs_error)"
        else:
            text = str(value)
        print(f"{key}: {text}")
