"""RoPE attention gradient: exact closed form vs. the almost-linear polynomial method
(`ltvm bench rope`; `python examples/rope_gradient.py` runs the same with --out examples/out).

Measures (docs/rope_attention.md reports the numbers):
  1. time and peak extra memory vs n (2^8 .. 2^16) of the exact gradient (Lemma 5.3, the
     BLAS-bound rotary baseline, O(n^2)) and the fast one (Section 6, rank C(d+g, g)),
     at d = 4, B = 1, degree g; fitted log-log exponents over n >= 2^11. The exact path
     runs up to --max-exact-n; beyond it its time is extrapolated with its fitted exponent
     (marked so in the table);
  2. relative error of the fast gradient vs degree g = 0..8 for B in {0.5, 1, 2, 4};
  3. the bounded-entry boundary: per B, the smallest degree reaching 1e-6 (measured), its
     rank, and fast vs exact time at n = 2^14, until the fast one loses;
  4. d = 8: error per degree up to the one reaching 1e-6, time against exact at n = 2^12;
  5. the general W_{i-j} form's FFT route at g = 2 and 4 against its exact closed form,
     n = 2^8 .. 2^15, and where it starts to win.
`--sections` picks which of them run (time, error, boundary, d8, general).
Writes rope_gradient.md, rope_gradient.csv and rope_gradient.png to --out.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from vm.attention.chunked.memory import Measurement, Result, measure  # noqa: E402
from vm.attention.rope.boundary import MAX_SEARCH_DEGREE, smallest_degree  # noqa: E402
from vm.attention.rope.fast import fast_gradient  # noqa: E402
from vm.attention.rope.gradient import (Gradient, Instance, exact_gradient,  # noqa: E402
                                        exact_rotary_gradient)
from vm.attention.rope.instance import random_instance  # noqa: E402
from vm.attention.rope.polynomial import exp_error_bound, rank  # noqa: E402
from vm.common.errors import InputError  # noqa: E402
from vm.common.outputs import check_output_directory, staged_files  # noqa: E402

TARGET = 1e-6
D8_TARGETS = (1e-4, 1e-6)
GENERAL_DEGREES = (2, 4)
BOUNDS = [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0]
BLOCK_ENTRIES = 1 << 18
OUTPUTS = ("rope_gradient.md", "rope_gradient.csv", "rope_gradient.png")
MIN_EXACT_N = 1 << 9
"""The smallest --max-exact-n of the time section: two measured sizes (256 and 512) to fit
the exact gradient's exponent."""


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def best_of(repeats: int, run: Callable[[], Result]) -> tuple[Result, Measurement]:
    """The fastest of `repeats` runs (time) with its result and peak memory."""
    results = [measure(run) for _ in range(repeats)]
    return min(results, key=lambda item: item[1].seconds)


def exact_route(inst: Instance, form: str) -> Gradient:
    block = max(1, BLOCK_ENTRIES // inst.a1.shape[0])
    if form == "rotary":
        return exact_rotary_gradient(inst, block)
    return exact_gradient(inst, block=block)


def fit(ns: list[int], times: list[float], smallest: int = 1 << 11) -> float:
    """Slope of log(time) against log(n) over n >= smallest (all n if too few)."""
    points = [(n, t) for n, t in zip(ns, times) if n >= smallest and t]
    if len(points) < 2:                        # a smoke run: fit what there is
        points = list(zip(ns, times))
    x, y = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    return float(np.polyfit(x, y, 1)[0])


def time_sweep(ns: list[int], max_exact: int, d: int, bound: float, degree: int,
               rows: list[dict]) -> tuple[float, float]:
    fast_t, exact_t, exact_n = [], [], []
    for n in ns:
        inst = random_instance(n, d, bound, "rotary", seed=n)
        repeats = 3 if n <= 1 << 12 else 1
        fast, taken = best_of(repeats, lambda: fast_gradient(inst, "rotary", degree, bound))
        row = {"table": "time", "form": "rotary", "n": n, "d": d, "bound": bound,
               "degree": degree, "rank": fast.rank, "fast_s": taken.seconds,
               "fast_mib": taken.peak_bytes / 2 ** 20,
               "factor_mib": fast.factor_bytes / 2 ** 20}
        fast_t.append(taken.seconds)
        if n <= max_exact:
            exact, etaken = best_of(repeats, lambda: exact_route(inst, "rotary"))
            row.update(exact_s=etaken.seconds, exact_mib=etaken.peak_bytes / 2 ** 20,
                       error=relative(fast.dx, exact.dx), exact_measured=True)
            exact_t.append(etaken.seconds)
            exact_n.append(n)
        rows.append(row)
        print(row, flush=True)
    slope = fit(exact_n, exact_t)
    for row in rows:
        if row.get("table") == "time" and "exact_s" not in row:
            last = exact_n[-1]
            row.update(exact_s=exact_t[-1] * (row["n"] / last) ** slope, exact_measured=False)
    return fit(ns, fast_t), slope


def error_sweep(n: int, d: int, bounds: list[float], degrees: list[int],
                rows: list[dict]) -> None:
    for bound in bounds:
        inst = random_instance(n, d, bound, "rotary", seed=11)
        exact = exact_route(inst, "rotary")
        for degree in degrees:
            fast = fast_gradient(inst, "rotary", degree, bound)
            rows.append({"table": "error", "form": "rotary", "n": n, "d": d, "bound": bound,
                         "degree": degree, "rank": fast.rank,
                         "error": relative(fast.dx, exact.dx),
                         "exp_error": exp_error_bound(bound, degree)})


def boundary_sweep(n_error: int, n_time: int, bounds: list[float], rows: list[dict]) -> None:
    """Task: the B where the fast gradient stops beating the exact one at error TARGET.

    Per B (rotary, d = 4): the smallest degree reaching TARGET, measured at n_error, then
    both gradients timed at n_time. Stops after the first B where fast is slower: a larger
    B needs a larger degree (tests/test_rope_boundary.py), so it is slower still.
    """
    for bound in bounds:
        small = random_instance(n_error, 4, bound, "rotary", seed=11)
        degree, errors = smallest_degree(small, exact_route(small, "rotary").dx, "rotary",
                                         bound, TARGET)
        row = {"table": "boundary", "form": "rotary", "d": 4, "bound": bound,
               "target": TARGET, "n_error": n_error, "n": n_time, "degree": degree}
        if degree is None:
            rows.append(row)
            break
        big = random_instance(n_time, 4, bound, "rotary", seed=12)
        fast, taken = measure(lambda: fast_gradient(big, "rotary", degree, bound))
        exact, etaken = measure(lambda: exact_route(big, "rotary"))
        row.update(rank=fast.rank, error=errors[degree], error_n=relative(fast.dx, exact.dx),
                   fast_s=taken.seconds, exact_s=etaken.seconds,
                   crossover_n=n_time * taken.seconds / etaken.seconds)
        rows.append(row)
        print(row, flush=True)
        if taken.seconds > etaken.seconds:
            break


def d8_sweep(n_error: int, n_time: int, targets: tuple[float, ...], rows: list[dict]) -> None:
    """d = 8 (rotary, B = 1): error per degree up to the one reaching min(targets), and
    the time of each against the exact gradient at n_time."""
    inst = random_instance(n_error, 8, 1.0, "rotary", seed=8)
    exact = exact_route(inst, "rotary").dx
    big = random_instance(n_time, 8, 1.0, "rotary", seed=9)
    _, etaken = measure(lambda: exact_route(big, "rotary"))
    for degree in range(0, MAX_SEARCH_DEGREE + 1):
        fast = fast_gradient(inst, "rotary", degree, 1.0)
        error = relative(fast.dx, exact)
        row = {"table": "d8", "form": "rotary", "n": n_time, "n_error": n_error, "d": 8,
               "bound": 1.0, "degree": degree, "rank": fast.rank, "error": error,
               "exact_s": etaken.seconds}
        if degree >= 2:
            _, taken = measure(lambda: fast_gradient(big, "rotary", degree, 1.0))
            row.update(fast_s=taken.seconds,
                       crossover_n=n_time * taken.seconds / etaken.seconds)
        rows.append(row)
        print(row, flush=True)
        if error <= min(targets):
            break


def general_sweep(ns: list[int], degrees: tuple[int, ...], rows: list[dict]
                  ) -> tuple[float, float]:
    """The general form (d = 4, B = 1): FFT route at each degree against the exact closed
    form per n; returns the fitted exponents (fast at the largest degree, exact)."""
    for n in ns:
        inst = random_instance(n, 4, 1.0, "general", seed=n)
        exact, etaken = measure(lambda: exact_route(inst, "general"))
        for degree in degrees:
            fast, taken = measure(lambda: fast_gradient(inst, "general", degree, 1.0))
            rows.append({"table": "general", "form": "general", "n": n, "d": 4, "bound": 1.0,
                         "degree": degree, "rank": fast.rank,
                         "error": relative(fast.dx, exact.dx), "fast_s": taken.seconds,
                         "exact_s": etaken.seconds, "factor_mib": fast.factor_bytes / 2 ** 20})
            print(rows[-1], flush=True)
    top = [r for r in rows if r["table"] == "general" and r["degree"] == max(degrees)]
    return (fit([r["n"] for r in top], [r["fast_s"] for r in top]),
            fit([r["n"] for r in top], [r["exact_s"] for r in top]))


def error_table(errors: list[dict]) -> list[str]:
    """Markdown lines: the fast gradient's error per degree and B, and the degree for TARGET."""
    bounds = sorted({r["bound"] for r in errors})
    degrees = sorted({r["degree"] for r in errors})
    lines = ["", f"Relative error of the fast gradient vs degree g (rotary, d=4, "
             f"n={errors[0]['n']}); rank C(4+g, g):", "",
             "| g | rank | " + " | ".join(f"B={b:g}" for b in bounds) + " |",
             "|---|---|" + "---|" * len(bounds)]
    for g in degrees:
        cells = [next(r["error"] for r in errors if r["bound"] == b and r["degree"] == g)
                 for b in bounds]
        lines.append(f"| {g} | {rank(4, g)} | " + " | ".join(f"{c:.1e}" for c in cells) + " |")
    reach = []
    for b in bounds:
        ok = [r["degree"] for r in errors if r["bound"] == b and r["error"] <= TARGET]
        reach.append(f"B={b:g}: " + (f"g={min(ok)} (rank {rank(4, min(ok))})" if ok
                                     else f"not reached by g={max(degrees)}"))
    return lines + ["", f"Smallest degree reaching {TARGET:g}: " + "; ".join(reach) + "."]


def markdown(rows: list[dict], slopes: dict[str, float], command: str) -> str:
    def f(value: float | None, spec: str = ".3g") -> str:
        return "" if value is None else format(value, spec)

    lines = [f"Produced by `{command}` (torch {torch.__version__}, 1 thread, float64)."]
    timing = [r for r in rows if r["table"] == "time"]
    if timing:
        lines += ["", f"Time vs n (rotary, d=4, B=1): fitted exponents over n >= 2^11: exact "
                  f"{slopes['exact']:.2f}, fast {slopes['fast']:.2f}.", "",
                  "| n | rank | exact s | fast s | speed-up | fast peak MiB | factors MiB | "
                  "rel. error |", "|---|---|---|---|---|---|---|---|"]
    for r in timing:
        mark = "" if r.get("exact_measured") else " (extrapolated)"
        lines.append(f"| {r['n']} | {r['rank']} | {f(r['exact_s'])}{mark} | {f(r['fast_s'])} "
                     f"| {r['exact_s'] / r['fast_s']:.1f}x | {r['fast_mib']:.1f} "
                     f"| {r['factor_mib']:.1f} | {f(r.get('error'), '.2e')} |")
    errors = [r for r in rows if r["table"] == "error"]
    if errors:
        lines += error_table(errors)
    boundary = [r for r in rows if r["table"] == "boundary"]
    if boundary:
        first = boundary[0]
        lines += ["", f"Bounded-entry boundary (rotary, d=4, target {TARGET:g}): the smallest "
                  f"degree reaching it, measured at n={first['n_error']}; both gradients "
                  f"timed at n={first['n']}; crossover = the n where fast = exact "
                  "(estimated: fast ~ n, exact ~ n^2):", "",
                  "| B | g | rank | error | error at n | fast s | exact s | speed-up | "
                  "crossover n |", "|---|---|---|---|---|---|---|---|---|"]
        for r in boundary:
            if r["degree"] is None:
                lines.append(f"| {r['bound']:g} | > {MAX_SEARCH_DEGREE} | | | | | | | |")
                continue
            lines.append(f"| {r['bound']:g} | {r['degree']} | {r['rank']} | {r['error']:.1e} "
                         f"| {r['error_n']:.1e} | {f(r['fast_s'])} | {f(r['exact_s'])} | "
                         f"{r['exact_s'] / r['fast_s']:.1f}x | {r['crossover_n']:.0f} |")
        losing = [r for r in boundary if r["degree"] is None or r["fast_s"] > r["exact_s"]]
        lines += ["", (f"At n={first['n']} the fast gradient stops beating the exact one at "
                       f"B={losing[0]['bound']:g}." if losing else
                       f"At n={first['n']} the fast gradient beats the exact one at every B "
                       "measured.")]
    d8 = [r for r in rows if r["table"] == "d8"]
    if d8:
        lines += ["", f"d = 8 (rotary, B=1): error at n={d8[0]['n_error']}, time at "
                  f"n={d8[0]['n']}; crossover = the n where fast = exact (estimated: fast ~ n, "
                  "exact ~ n^2):", "",
                  "| g | rank | rel. error | fast s | exact s | speed-up | crossover n |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['degree']} | {r['rank']} | {r['error']:.1e} | {f(r.get('fast_s'))} | "
                  f"{r['exact_s']:.3g} | "
                  + (f"{r['exact_s'] / r['fast_s']:.1f}x | {r['crossover_n']:.0f} |"
                     if "fast_s" in r else " | |") for r in d8]
        reach = []
        for target in D8_TARGETS:
            ok = [r for r in d8 if r["error"] <= target]
            reach.append(f"{target:g}: g={ok[0]['degree']} (rank {ok[0]['rank']})" if ok
                         else f"{target:g}: not reached by g={d8[-1]['degree']}")
        lines += ["", "d = 8, smallest degree reaching " + "; ".join(reach) + "."]
    general = [r for r in rows if r["table"] == "general"]
    if general:
        top = max(r["degree"] for r in general)
        lines += ["", f"General W_(i-j) form, FFT route against its exact closed form (d=4, "
                  f"|S|=8, B=1): fitted exponents over n >= 2^11 at g={top}: exact "
                  f"{slopes['general_exact']:.2f}, fast {slopes['general_fast']:.2f}.", "",
                  "| n | g | rank | rel. error | fast s | exact s | speed-up | spectra MiB |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['n']} | {r['degree']} | {r['rank']} | {r['error']:.1e} | "
                  f"{r['fast_s']:.3g} | {r['exact_s']:.3g} | {r['exact_s'] / r['fast_s']:.2f}x "
                  f"| {r['factor_mib']:.1f} |" for r in general]
        verdicts = []
        for degree in sorted({r["degree"] for r in general}):
            mine = [r for r in general if r["degree"] == degree]
            wins = [r["n"] for r in mine if r["fast_s"] < r["exact_s"]]
            verdicts.append(f"g={degree}: " + (f"from n={wins[0]}" if wins else
                                                f"not up to n={mine[-1]['n']}"))
        lines += ["", "The FFT route beats the exact general gradient (measured): "
                  + "; ".join(verdicts) + "."]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    fig, (left, right, third) = plt.subplots(1, 3, figsize=(16, 4.2))
    timing = [r for r in rows if r["table"] == "time"]
    measured = [r for r in timing if r.get("exact_measured")]
    if timing:
        left.loglog([r["n"] for r in measured], [r["exact_s"] for r in measured], "o-",
                    label="rotary exact (Lemma 5.3)")
        rest = [r for r in timing if not r.get("exact_measured")]
        if rest:
            left.loglog([measured[-1]["n"]] + [r["n"] for r in rest],
                        [measured[-1]["exact_s"]] + [r["exact_s"] for r in rest], "o--",
                        color="C0", alpha=0.5, label="rotary exact, extrapolated")
        left.loglog([r["n"] for r in timing], [r["fast_s"] for r in timing], "s-",
                    label=f"rotary fast, g={timing[0]['degree']}")
    general = [r for r in rows if r["table"] == "general"]
    if general:
        top = [r for r in general if r["degree"] == max(x["degree"] for x in general)]
        left.loglog([r["n"] for r in top], [r["exact_s"] for r in top], "^:",
                    label="general exact")
        for degree in sorted({r["degree"] for r in general}):
            mine = [r for r in general if r["degree"] == degree]
            left.loglog([r["n"] for r in mine], [r["fast_s"] for r in mine], "v:",
                        label=f"general FFT route, g={degree}")
    left.set(xlabel="n", ylabel="seconds", title="RoPE gradient time (d=4, B=1)")
    if timing or general:
        left.legend(fontsize=8)
    errors = [r for r in rows if r["table"] == "error"]
    for bound in sorted({r["bound"] for r in errors}):
        pts = [r for r in errors if r["bound"] == bound]
        right.semilogy([r["degree"] for r in pts], [max(r["error"], 1e-17) for r in pts], "o-",
                       label=f"B={bound:g}")
    right.axhline(TARGET, color="grey", linestyle=":", label="1e-6")
    right.set(xlabel="degree g", ylabel="relative error of dLoss/dX",
              title="fast vs exact gradient (d=4)")
    right.legend()
    boundary = [r for r in rows if r["table"] == "boundary" and r["degree"] is not None]
    if boundary:
        bounds = [r["bound"] for r in boundary]
        third.semilogy(bounds, [r["exact_s"] for r in boundary], "o-", label="exact")
        third.semilogy(bounds, [r["fast_s"] for r in boundary], "s-",
                       label=f"fast at the degree reaching {TARGET:g}")
        for r in boundary:
            third.annotate(f"g={r['degree']}", (r["bound"], r["fast_s"]),
                           textcoords="offset points", xytext=(0, 6), fontsize=8)
        third.set(xlabel="B (scores in [-B, B])", ylabel="seconds",
                  title=f"bounded-entry boundary (d=4, n={boundary[0]['n']})")
        third.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run(args: argparse.Namespace) -> int:
    """The chosen sweeps; args: out, quick, max_exact_n, degree, sections
    (`ltvm bench rope`)."""
    torch.set_num_threads(1)
    quick = args.quick
    top = 10 if quick else 16
    max_exact = min(args.max_exact_n, 1 << (top - 1) if quick else 1 << top)
    if "time" in args.sections and max_exact < MIN_EXACT_N:
        # one measured n fitted a meaningless exponent, which then extrapolated every
        # exact time of the table and the plot
        raise InputError(f"--max-exact-n must be at least {MIN_EXACT_N} when the time section "
                         "runs: the exponent that extrapolates the exact time is fitted to the "
                         f"sizes measured (256, 512, ...), and one size fits none; got "
                         f"{args.max_exact_n}")
    check_output_directory(args.out, OUTPUTS)  # before the sweeps, which take minutes
    rows: list[dict] = []
    slopes: dict[str, float] = {}
    if "time" in args.sections:
        slopes["fast"], slopes["exact"] = time_sweep([1 << p for p in range(8, top + 1)],
                                                     max_exact, 4, 1.0, args.degree, rows)
    if "error" in args.sections:
        error_sweep(128 if quick else 512, 4, [0.5, 1.0, 2.0, 4.0], list(range(0, 9)), rows)
    if "boundary" in args.sections:
        boundary_sweep(128 if quick else 512, 1 << (10 if quick else 14),
                       [0.5, 1.0, 2.0] if quick else BOUNDS, rows)
    if "d8" in args.sections:
        d8_sweep(128 if quick else 512, 1 << (9 if quick else 12),
                 (1e-2,) if quick else D8_TARGETS, rows)
    if "general" in args.sections:
        slopes["general_fast"], slopes["general_exact"] = general_sweep(
            [128, 256] if quick else [1 << p for p in range(8, 16)], GENERAL_DEGREES, rows)
    command = (f"ltvm bench rope --out {args.out} --max-exact-n {args.max_exact_n} "
               f"--degree {args.degree} --sections {','.join(args.sections)}"
               + (" --quick" if quick else ""))
    keys = sorted({key for row in rows for key in row})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with staged_files(args.out, OUTPUTS) as staging:  # all three files or none
        (staging / "rope_gradient.md").write_text(markdown(rows, slopes, command))
        with open(staging / "rope_gradient.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows)
        plot(rows, staging / "rope_gradient.png")
    print((args.out / "rope_gradient.md").read_text())
    return 0
