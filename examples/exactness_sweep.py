"""Where SUBLEQ execution on the looped transformer is exact (issue 3's table).

Sweeps word size N and column count n for float32 and float64 at the default
temperature, then the temperature at two widths, running batches of random
non-halting programs in lockstep with the reference interpreter (see
vm/tools/exactness.py for what each verdict means). Writes exactness.md and
exactness.csv to --out and exits 1 if any checked run returned a wrong state.

With --machine vsubleq: the standard SUBLEQ machine (issue 17), random self-modifying
programs with input and output at N = 8, 16, 32 and memory sizes up to 4096 words, in
checked mode, compared with the reference after every step (memory, pc, bytes read,
output); writes vsubleq.md and vsubleq.csv, and exits 1 on any divergence.

    python examples/exactness_sweep.py                 # the full table (about 10 minutes)
    python examples/exactness_sweep.py --quick         # a small smoke version
    python examples/exactness_sweep.py --machine vsubleq [--quick]
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import torch

from vm.tools.exactness import INPUT_BYTES, run_cell, run_vsubleq_cell
from vm.tools.workloads import workload_geometry
from vm.machines.subleq.machine import default_temperature

FULL = {"bits": [4, 8, 16, 17, 24, 32], "columns": [16, 64, 256, 1024, 4096],
        "temperatures": [0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0], "temperature_columns": [64, 1024]}
QUICK = {"bits": [4, 17], "columns": [16, 64], "temperatures": [1.0, 3.0],
         "temperature_columns": [16]}
DTYPES = ["float32", "float64"]
VSUBLEQ_FULL = [(8, 16, 4, 500), (8, 128, 8, 500), (16, 16, 4, 500), (16, 256, 8, 400),
                (16, 1024, 4, 200), (16, 4096, 4, 150), (32, 16, 4, 500), (32, 256, 8, 300),
                (32, 4096, 4, 100)]
"""(N, m, programs, steps per program): fewer steps where a step costs more."""
VSUBLEQ_QUICK = [(8, 16, 2, 30), (16, 64, 1, 30)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/exactness", help="output directory")
    parser.add_argument("--steps", type=int, default=1000, help="lockstep steps per cell")
    parser.add_argument("--batch", type=int, default=4, help="random programs per cell")
    parser.add_argument("--quick", action="store_true", help="a small grid, 50 steps")
    parser.add_argument("--machine", choices=["subleq", "vsubleq"], default="subleq",
                        help="subleq: the paper's machine (default); vsubleq: standard SUBLEQ "
                             "(--steps and --batch are then set per cell)")
    args = parser.parse_args()
    if args.machine == "vsubleq":
        return vsubleq_sweep(Path(args.out), VSUBLEQ_QUICK if args.quick else VSUBLEQ_FULL)
    grid = QUICK if args.quick else FULL
    steps = 50 if args.quick else args.steps
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records, wrong = [], False

    def cell(n: int, bits: int, dtype: str, temperature: float | None, checked: bool) -> str:
        nonlocal wrong
        start = time.perf_counter()
        outcome = run_cell(workload_geometry(n, bits), dtype, steps, args.batch, temperature,
                           checked=True if checked else False)
        wrong |= checked and outcome.verdict == "WRONG"
        records.append({"n": n, "N": bits, "dtype": dtype,
                        "temperature": "default" if temperature is None else temperature,
                        "checked": checked, "verdict": outcome.verdict, "steps": outcome.steps,
                        "detail": outcome.detail})
        print(f"n={n} N={bits} {dtype} lam={temperature or 'default'} "
              f"{'checked' if checked else 'unprotected'}: {outcome.cell()} "
              f"[{time.perf_counter() - start:.1f}s]", file=sys.stderr, flush=True)
        return outcome.cell()

    lines = [f"## Default temperature, checked mode ({steps} lockstep steps x {args.batch} "
             "random programs per cell)", "",
             "| N \\ n | " + " | ".join(str(n) for n in grid["columns"]) + " |",
             "|---" * (len(grid["columns"]) + 1) + "|"]
    for bits in grid["bits"]:
        for dtype in DTYPES:
            cells = [cell(n, bits, dtype, None, True) for n in grid["columns"]]
            lines.append(f"| {bits} ({dtype}) | " + " | ".join(cells) + " |")
    lines += ["", f"## Temperature, N = 8 (default lam: "
              + ", ".join(f"{default_temperature(n):.1f} at n={n}"
                          for n in grid["temperature_columns"]) + ")", "",
              "| lam | " + " | ".join(f"n={n} {d} checked | n={n} {d} unprotected"
                                     for n in grid["temperature_columns"] for d in DTYPES) + " |",
              "|---" * (4 * len(grid["temperature_columns"]) + 1) + "|"]
    for temperature in grid["temperatures"]:
        cells = [cell(n, 8, dtype, temperature, checked)
                 for n in grid["temperature_columns"] for dtype in DTYPES
                 for checked in (True, False)]
        lines.append(f"| {temperature} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    (out / "exactness.md").write_text(table)
    with open(out / "exactness.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    print(table)
    if wrong:
        print("a checked run returned a wrong state", file=sys.stderr)
    return 1 if wrong else 0


def vsubleq_sweep(out: Path, grid: list[tuple[int, int, int, int]]) -> int:
    """The standard SUBLEQ table: one row per (N, m) cell; exit 1 on any divergence."""
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"Random self-modifying programs with {INPUT_BYTES} input bytes, float32, "
             "default temperature, checked mode; memory, pc, halted, bytes read and output "
             "compared after every step.", "",
             "| N | m | programs | steps | halted | precision errors | divergences | time |",
             "|---|---|---|---|---|---|---|---|"]
    cells, started = [], time.perf_counter()
    for bits, memory, programs, steps in grid:
        start = time.perf_counter()
        cell = run_vsubleq_cell(memory, bits, programs, steps)
        seconds = time.perf_counter() - start
        cells.append(cell)
        lines.append(f"| {bits} | {memory} | {cell.programs} | {cell.steps:,} | {cell.halted} "
                     f"| {cell.precision_errors} | {cell.divergences} | {seconds:.0f} s |")
        print(lines[-1] + (f"  {cell.first_divergence}" if cell.divergences else ""),
              file=sys.stderr, flush=True)
    lines.append(f"\nTotal: {sum(c.steps for c in cells):,} steps in "
                 f"{time.perf_counter() - started:.0f} s.")
    table = "\n".join(lines) + "\n"
    (out / "vsubleq.md").write_text(table)
    with open(out / "vsubleq.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(vars(cells[0])))
        writer.writeheader()
        writer.writerows(vars(cell) for cell in cells)
    print(table)
    wrong = sum(cell.divergences for cell in cells)
    if wrong:
        print(f"{wrong} programs diverged", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
