"""`ltvm bench attention`: time and peak memory of full attention against its simulations.

For each N, full attention (one head, the N x N scores in one buffer) runs unless its
estimated memory, N^2 * itemsize plus the inputs, exceeds `full_limit_gib`; then the
estimate is printed and the row is marked skipped. For each N and M the exact simulation
(Lemma 3.1, 2 ceil(N/(M-1))^2 calls), the sliding-window simulation (Theorem 5.1, window
M/4) and the sampled estimator (Theorem 4.1) run.

Both sides use the same number of torch threads, one by default: on a small shared machine
a second intra-op thread mostly waits for a busy core, which made timings erratic.
Every configuration runs in a fresh Python process (`python -m vm.attention.chunked.bench WORKER`),
which builds its input first and then measures only the computation with `memory.measure`:
peak RSS growth after resetting the kernel's high-water mark. A fresh process keeps one
configuration's allocator caches and page-table state from inflating the next one's peak.
For N <= `error_limit` the worker then compares the result with a float64 direct
computation (after the measurement, so it costs neither time nor memory in the table).

Before any measurement the sizes are checked against `limits` (those of `ltvm attention`'s
exact mode, which runs at every N) and the output directory against what can be written;
a worker that fails is reported as its last error line.
"""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from vm.attention.chunked.limits import MAX_M, MAX_N, SIZE_LIMITS, check_calls
from vm.attention.chunked.memory import measure
from vm.attention.chunked.model import Mask, random_instance
from vm.attention.chunked.reference import direct_forward, head_attention, relative_error
from vm.attention.chunked.simulate import expected_calls, mode_mask, simulate
from vm.common.errors import InputError, LtvmError, RunFailure, shown_path
from vm.common.limits import check_threads
from vm.common.outputs import check_output_directory, staged_files

GIB = 2 ** 30
SIMULATIONS = ("exact", "window", "sampled")


@dataclass(frozen=True)
class Config:
    """One measured configuration; `m` is 0 for full attention."""

    method: str
    n: int
    m: int
    head_dim: int
    window: int
    seed: int
    error_limit: int
    threads: int = 1


@dataclass(frozen=True)
class Row:
    """One line of the result table; None where a value was not measured."""

    method: str
    n: int
    m: int | None
    calls: int | None
    seconds: float | None
    peak_bytes: int | None
    error: float | None
    note: str


def full_attention_bytes(n: int, head_dim: int, itemsize: int = 4) -> int:
    """Estimated peak of full attention: the N x N scores plus input, q, k, v and output."""
    return n * n * itemsize + 5 * n * head_dim * itemsize


def measure_config(config: Config) -> dict:
    """Build the input, then measure the computation (run inside the worker process)."""
    torch.set_num_threads(config.threads)
    mode = "exact" if config.method == "full" else config.method
    mask = mode_mask(mode, config.window)
    x, model = random_instance(config.n, 1, 1, config.head_dim, mask, torch.float32, config.seed)
    if config.method == "full":
        (output, _), taken = measure(
            lambda: head_attention(x, model.layers[0][0], Mask("none")))
        calls = None
    else:
        result, taken = measure(lambda: simulate(model, x, mode, config.m, seed=config.seed))
        output, calls = result.output, result.calls
    error = None
    if config.n <= config.error_limit:
        reference, _ = direct_forward(model.to(torch.float64), x.double(), row_chunk=2048)
        error = relative_error(output, reference)
    return {"calls": calls, "seconds": taken.seconds, "peak_bytes": taken.peak_bytes,
            "error": error, "method": taken.method}


def run_worker_process(config: Config) -> dict:
    """`measure_config` in a fresh Python process."""
    process = subprocess.run(
        [sys.executable, "-m", "vm.attention.chunked.bench", json.dumps(asdict(config))],
        capture_output=True, text=True, check=False)
    if process.returncode != 0:
        raise worker_failure(config, process.returncode, process.stderr)
    return json.loads(process.stdout)


OUT_OF_MEMORY = ("can't allocate memory", "MemoryError", "OutOfMemoryError")
"""What a worker's last error line says when torch or Python ran out of memory."""


def worker_failure(config: Config, returncode: int, stderr: str) -> LtvmError:
    """One line for a failed worker: its last error line, not its traceback. Out of memory
    (an error or the kernel's SIGKILL) and a refused input are InputError (exit 2, as the
    command line treats both), anything else RunFailure."""
    what = f"bench worker for {config.method} N={config.n}" + (
        f" M={config.m}" if config.m else "")
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else "no error message"
    if returncode == -signal.SIGKILL or any(text in last for text in OUT_OF_MEMORY):
        cause = ("was killed (SIGKILL: most likely the kernel's out-of-memory killer)"
                 if returncode == -signal.SIGKILL else f"ran out of memory ({last})")
        return InputError(f"{what} {cause}: use smaller --n-values, --m-values or "
                          "--head-dim")
    if returncode < 0:
        return RunFailure(f"{what} was killed by signal {signal.Signals(-returncode).name}")
    if returncode == InputError.exit_code:
        return InputError(f"{what}: {last}")
    return RunFailure(f"{what} failed: {last}")


def _configs(n_values: list[int], m_values: list[int], head_dim: int, seed: int,
             error_limit: int, threads: int) -> list[Config]:
    configs = []
    for n in n_values:
        configs.append(Config("full", n, 0, head_dim, 0, seed, error_limit, threads))
        for m in m_values:
            if m <= n:
                configs.extend(Config(method, n, m, head_dim, max(1, m // 4), seed, error_limit,
                                      threads) for method in SIMULATIONS)
    return configs


def _check_sizes(option: str, values: list[int]) -> None:
    """Every N (or M) of `option` at least 2, and one at least: 'bench sizes must be at
    least 2 and the head dimension positive' named neither the option nor the value."""
    if not values:
        raise InputError(f"{option} names no size: give comma-separated integers")
    small = [value for value in values if value < 2]
    if small:
        raise InputError(f"{option} must be at least 2, got {','.join(map(str, small))}")


def run_bench(out_dir: Path, n_values: list[int], m_values: list[int],
              full_limit_gib: float = 4.0, head_dim: int = 16, seed: int = 0,
              error_limit: int = 4096, threads: int = 1,
              worker: Callable[[Config], dict] = run_worker_process) -> list[Row]:
    """Measure every configuration, write attention.md, attention.csv and attention.png.

    `worker` measures one configuration; the default runs it in a fresh process.
    """
    for option, values in (("--n-values", n_values), ("--m-values", m_values)):
        _check_sizes(option, values)
    if head_dim < 1:
        raise InputError(f"--head-dim must be positive, got {head_dim}")
    if not 0 < full_limit_gib < math.inf:
        raise InputError(f"--full-limit-gib must be positive and finite, got {full_limit_gib}")
    check_threads(threads, "--threads")
    above = sorted({m for m in m_values if m > max(n_values)})
    if above:  # no simulation runs at an M above N: such an M was dropped without a word
        raise InputError(f"--m-values {','.join(map(str, above))} "
                         f"{'is' if len(above) == 1 else 'are'} above every N of --n-values "
                         f"(at most {max(n_values)}): no simulation would run at "
                         f"{'it' if len(above) == 1 else 'them'}")
    # a repeated N or M measured the same configuration twice, in two rows of the table
    configs = _configs(sorted(set(n_values)), sorted(set(m_values)), head_dim, seed,
                       error_limit, threads)
    check_bench_sizes(configs)
    check_output_directory(out_dir, OUTPUTS)
    rows = []
    for index, config in enumerate(configs, 1):
        label = f"[{index}/{len(configs)}] {config.method} N={config.n}" + (
            f" M={config.m}" if config.m else "")
        estimate = full_attention_bytes(config.n, head_dim)
        if config.method == "full" and estimate > full_limit_gib * GIB:
            note = (f"skipped: estimated {estimate / GIB:.3g} GiB > "
                    f"{full_limit_gib:.3g} GiB limit")
            print(f"{label}: {note}", file=sys.stderr, flush=True)
            rows.append(Row("full", config.n, None, None, None, None, None, note))
            continue
        print(f"{label} ...", file=sys.stderr, flush=True)
        measured = worker(config)
        print(f"{label}: {measured['seconds']:.2f} s, peak "
              f"{measured['peak_bytes'] / 2 ** 20:.1f} MiB", file=sys.stderr, flush=True)
        note = f"window {config.window}" if config.method == "window" else ""
        rows.append(Row(config.method, config.n, config.m or None, measured["calls"],
                        measured["seconds"], measured["peak_bytes"], measured["error"], note))
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with staged_files(out_dir, OUTPUTS) as staging:  # the three files, or none of them
        write_tables(rows, staging)
        plot(rows, staging / "attention.png", head_dim)
    return rows


def check_bench_sizes(configs: list[Config]) -> None:
    """InputError unless every configuration is feasible: the limits of `ltvm attention`
    for the exact simulation, which runs at every N and is the costliest of the three."""
    largest = max(config.n for config in configs)
    if largest > MAX_N:
        raise InputError(f"--n-values {largest} exceeds the limit of {MAX_N} (the bench runs "
                         "the exact simulation at every N, whose work grows as N^2: 65536 "
                         "takes minutes)")
    if configs[0].head_dim > SIZE_LIMITS["head_dim"]:
        raise InputError(f"--head-dim {configs[0].head_dim} exceeds the limit of "
                         f"{SIZE_LIMITS['head_dim']}")
    widest = max(config.m for config in configs)
    if widest > MAX_M:
        raise InputError(f"--m-values {widest} exceeds the limit of {MAX_M} (one oracle call "
                         "holds M x M scores and their softmax: 2 GiB in float32 at the limit)")
    for config in configs:
        if config.m:
            check_calls(f"the {config.method} simulation at N={config.n}, M={config.m}",
                        expected_calls(config.method, config.n, config.m, 1, 1,
                                       window_size=config.window),
                        "raise --m-values or lower --n-values")


OUTPUTS = ("attention.md", "attention.csv", "attention.png")


def _cell(value: float | None, spec: str) -> str:
    """`value` in `spec` ("r": in full, as Python writes it), two significant digits where
    `spec` would round a figure that is not zero to 0 (a full attention of 0.4 ms read 0.00
    s), or "" for None."""
    if value is None:
        return ""
    if spec == "r":
        return repr(value)
    text = format(value, spec)
    if value != 0 and float(text) == 0:
        return format(value, ".2g")
    return text


def write_tables(rows: list[Row], out_dir: Path) -> None:
    """attention.csv (raw numbers) and attention.md (the same table for reading)."""
    with open(out_dir / "attention.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["method", "n", "m", "calls", "seconds", "peak_bytes", "error", "note"])
        for row in rows:
            writer.writerow([row.method, row.n, _cell(row.m, "d"), _cell(row.calls, "d"),
                             _cell(row.seconds, "r"), _cell(row.peak_bytes, "d"),
                             _cell(row.error, ".3e"), row.note])
    lines = ["| method | N | M | oracle calls | time (s) | peak memory (MiB) | error | note |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        memory = None if row.peak_bytes is None else row.peak_bytes / 2 ** 20
        lines.append(f"| {row.method} | {row.n} | {_cell(row.m, 'd')} | {_cell(row.calls, 'd')} "
                     f"| {_cell(row.seconds, '.2f')} | {_cell(memory, '.1f')} "
                     f"| {_cell(row.error, '.2e')} | {row.note} |")
    (out_dir / "attention.md").write_text("\n".join(lines) + "\n")


def plot(rows: list[Row], path: Path, head_dim: int) -> None:
    """Time and peak memory against N, one line per method and M (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (time_axes, memory_axes) = pyplot.subplots(1, 2, figsize=(12, 4.5))
    series: dict[str, list[Row]] = {}
    for row in rows:
        name = row.method if row.m is None else f"{row.method} M={row.m}"
        series.setdefault(name, []).append(row)
    for name, members in series.items():
        measured = [row for row in members if row.seconds is not None]
        if measured:
            ns = [row.n for row in measured]
            time_axes.plot(ns, [row.seconds for row in measured], marker="o", label=name)
            memory_axes.plot(ns, [row.peak_bytes / 2 ** 20 for row in measured], marker="o",
                             label=name)
    skipped = [row.n for row in rows if row.method == "full" and row.seconds is None]
    if skipped:
        memory_axes.plot(skipped, [full_attention_bytes(n, head_dim) / 2 ** 20 for n in skipped],
                         linestyle="none", marker="x", color="black",
                         label="full (skipped, estimate)")
    for axes, label in ((time_axes, "time (s)"), (memory_axes, "peak memory (MiB)")):
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.set_xlabel("sequence length N")
        axes.set_ylabel(label)
        axes.grid(True, which="both", alpha=0.3)
    memory_axes.legend(fontsize=7)
    figure.suptitle("Full attention vs. simulation by small-transformer oracle calls")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)


def _worker(argv: list[str]) -> int:
    """Entry point of a worker process: one JSON config in, one JSON result out; an error
    the tool reports is one line on stderr and its exit code (`worker_failure` reads both)."""
    config = Config(**json.loads(argv[0]))
    try:
        measured = measure_config(config)
    except LtvmError as error:
        print(error, file=sys.stderr)
        return error.exit_code
    print(json.dumps(measured))
    return 0


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
