"""Measured error of every FLEQ function block against each of its parameters.

The measurement the paper announces as future work at the end of Section 8:
for every registered block, at its defaults (d = 1, 2, 4) and sweeping each
parameter in turn, the max absolute and max relative error on the block's
documented domain, measured on the transformer (vm/tools/block_errors.py), for
float32 and float64, next to the documented bound. Writes blocks.md (the
tables), blocks.csv and one PNG per block and parameter to --out. Exits 1 if
any measured point exceeds its documented bound.

    python examples/block_errors.py              # the full sweep (a few minutes, one core)
    python examples/block_errors.py --quick      # fewer points and values, a smoke run
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # idle BLAS threads spin on a busy CPU
os.environ.setdefault("OMP_NUM_THREADS", "1")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from vm.tools.block_errors import BlockErrors, measure, shape_pairs  # noqa: E402
from vm.functions import REGISTRY, dtype_parameters, make_block  # noqa: E402

DTYPES = ("float32", "float64")
SWEEPS = {
    "terms": [8, 16, 32, 64, 128, 256],
    "sharpness": [1.0, 1.5, 2.0, 3.0, 4.0, 6.0],
    "scale": [1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 1e-6],
    "anchor": [2.0, 5.0, 10.0, 20.0, 40.0, 60.0],
}
"""Values swept for known parameter names; any other parameter gets its default times
GENERIC_FACTORS (values the block refuses are left out)."""
GENERIC_FACTORS = [0.25, 0.5, 1.0, 2.0, 4.0]
QUICK_VALUES = 3


@dataclass(frozen=True)
class Row:
    block: str
    parameter: str
    value: float
    dtype: str
    d: int
    errors: BlockErrors

    @property
    def bound(self) -> float:
        return self.errors.max_bound

    def cells(self) -> list[str]:
        ratio = self.errors.worst_ratio
        verdict = "-" if not self.errors.bounded else ("yes" if ratio <= 1 else "**no**")
        shown = "-" if self.parameter == "defaults" else f"{self.value:g}"
        return [self.block, self.parameter, shown, self.dtype, str(self.d),
                str(self.errors.points), f"{self.errors.max_error:.3g}",
                f"{self.errors.max_relative_error:.3g}", f"{self.bound:.3g}", f"{ratio:.3g}",
                verdict]


HEADER = ["block", "parameter", "value", "dtype", "d", "points", "max error",
          "max rel. error", "bound", "error/bound", "within"]


def sweep_values(block: str, parameter: str, default: float, quick: bool) -> list[float]:
    values = SWEEPS.get(parameter, [default * f for f in GENERIC_FACTORS])
    valid = []
    for value in values:
        try:
            make_block(block, **{parameter: value})
        except Exception:  # the block refuses it (out of its parameter range)
            continue
        valid.append(value)
    if quick:
        picked = np.unique(np.linspace(0, len(valid) - 1, QUICK_VALUES).round().astype(int))
        valid = sorted({valid[i] for i in picked} | {default})
    return valid


def measure_row(block: str, parameter: str, value: float, dtype: str, d: int,
                points: int) -> Row | None:
    """One measurement; None when the block takes no operands of block size d with this
    parameter value."""
    own = dtype_parameters(dtype, [block]).get(block, {})
    settings = own if parameter == "defaults" else {**own, parameter: value}
    instance = make_block(block, **settings)
    if not shape_pairs(instance, d):
        return None
    return Row(block, parameter, value, dtype, d,
               measure(instance, dtype=dtype, d=d, count=points, seed=d))


def markdown(rows: list[Row], first: str) -> str:
    """One line per configuration, float64 and float32 side by side; `first` is "block"
    (defaults table) or "value" (a parameter sweep)."""
    header = [first, "d", "points", "f64 max error", "f64 max rel.", "f64 bound",
              "f64 error/bound", "f32 max error", "f32 max rel.", "f32 bound",
              "f32 error/bound"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    pairs: dict[tuple, dict[str, Row]] = {}
    for row in rows:
        pairs.setdefault((row.block, row.value, row.d), {})[row.dtype] = row
    for (block, value, d), by_dtype in pairs.items():
        label = block if first == "block" else f"{value:g}"
        cells = [label, str(d), str(next(iter(by_dtype.values())).errors.points)]
        for dtype in ("float64", "float32"):
            row = by_dtype.get(dtype)
            cells += row.cells()[6:10] if row else ["-"] * 4
            if row and row.errors.bounded and row.errors.worst_ratio > 1:
                cells[-1] = f"**{cells[-1]}**"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[Row], block: str, parameter: str, path: Path) -> None:
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for dtype, style in zip(DTYPES, ("o-", "s-")):
        mine = [r for r in rows if r.dtype == dtype]
        values = [r.value for r in mine]
        axes[0].plot(values, [max(r.errors.max_error, 1e-18) for r in mine], style,
                     label=f"measured, {dtype}")
        axes[0].plot(values, [r.bound for r in mine], style[0] + "--", alpha=0.6,
                     label=f"documented bound, {dtype}")
        axes[1].plot(values, [max(r.errors.max_relative_error, 1e-18) for r in mine], style,
                     label=dtype)
    for axis, title in zip(axes, ("max |error|", "max relative error (|f| >= 1e-3)")):
        axis.set_xlabel(parameter)
        axis.set_yscale("log")
        axis.set_title(f"{block}: {title}")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
        if min(r.value for r in rows) > 0 and \
                max(r.value for r in rows) / min(r.value for r in rows) > 20:
            axis.set_xscale("log")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/blocks", help="output directory (out/blocks)")
    parser.add_argument("--points", type=int, default=400,
                        help="operand samples per measurement (default 400)")
    parser.add_argument("--blocks", help="comma-separated block names (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="40 points, 3 values per parameter, d = 1 and 2 only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    points = 40 if args.quick else args.points
    names = args.blocks.split(",") if args.blocks else sorted(REGISTRY)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    defaults: list[Row] = []
    sweeps: list[tuple[str, str, list[Row]]] = []
    sizes = (1, 2) if args.quick else (1, 2, 4)
    for name in names:
        block = make_block(name)
        fitting = [d for d in (*sizes, 8) if shape_pairs(block, d)]
        for d in [d for d in sizes if d in fitting] or fitting[:1]:
            defaults += [measure_row(name, "defaults", 0.0, dtype, d, points)
                         for dtype in DTYPES]
        sweep_d = next((d for d in fitting if d >= 2), fitting[0] if fitting else 2)
        for parameter in block.parameters:
            rows = [row for value in sweep_values(name, parameter.name, parameter.default,
                                                  args.quick)
                    for dtype in DTYPES
                    if (row := measure_row(name, parameter.name, value, dtype, sweep_d,
                                           points)) is not None]
            if rows:
                sweeps.append((name, f"{parameter.name} (d = {sweep_d})", rows))
                plot(rows, name, parameter.name, out / f"{name}-{parameter.name}.png")
        print(f"{name}: done ({time.time() - started:.0f} s)", flush=True)
    command = "python examples/block_errors.py" + (" --quick" if args.quick else "") + \
        (f" --points {args.points}" if args.points != 400 and not args.quick else "")
    sections = [f"# FLEQ block errors, measured on the transformer\n\nProduced by `{command}` "
                f"in {time.time() - started:.0f} s. Error = |transformer - reference| per "
                "entry, max over every sampled operand of the block's documented domain; "
                "relative error over exact entries with |f| >= 1e-3; bound = the largest "
                "documented bound_at(dtype, f) over the points; error/bound <= 1 means "
                "within (**bold**: outside).\n", "## Defaults\n", markdown(defaults, "block")]
    for name, parameter, rows in sweeps:
        stem = f"{name}-{parameter.split()[0]}"
        sections += [f"\n## {name}: {parameter}\n", f"![{stem}]({stem}.png)\n",
                     markdown(rows, "value")]
    (out / "blocks.md").write_text("\n".join(sections) + "\n")
    all_rows = defaults + [row for _, _, rows in sweeps for row in rows]
    with open(out / "blocks.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        writer.writerows(row.cells() for row in all_rows)
    failures = [row for row in all_rows if row.errors.bounded and row.errors.worst_ratio > 1]
    print(f"wrote {out}/blocks.md, blocks.csv and {len(sweeps)} plots "
          f"in {time.time() - started:.0f} s")
    for row in failures:
        print(f"outside the documented bound: {row.block} {row.parameter}={row.value:g} "
              f"{row.dtype} d={row.d}: error/bound {row.errors.worst_ratio:.3g}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
