"""Error of the linear algebra routines on the transformer, beside the same algorithm run exactly.

First the product blocks alone (max error on random operands against their documented
bound). Then, for `X = inverse(A, iters=T)` (Newton-Schulz) and
`v = power_iteration(A, iters=T)` with `lam = rayleigh(A, v)`, in float64 (products at
eps = 1e-5) and float32 (eps = 1e-3):

- error against the iteration count: one traced run per routine and dtype gives every
  iterate; each is compared with numpy.linalg (relative max-abs error), for the transformer
  and for the exact algorithm (the reference interpreter: the same program, numpy blocks);
  power iterates are compared by direction (v / ||v||, sign-aligned), since rsqrt leaves
  their length a few percent off until the final normalization;
- error against the condition number (inverse, 4 x 4, sigma in [1/kappa, 1]) and against
  the eigenvalue ratio |lam2 / lam1| (power iteration, symmetric 4 x 4), at a fixed T,
  with the documented bound on the transformer's own error (for the inverse it holds once
  the iteration has converged: before, rsqrt's 3 % start value eps makes the transformer's
  trajectory differ from the exact one).

Writes linalg.md (tables), iterations.png and condition.png to --out (default out/linalg).

    python examples/linalg_errors.py            # the full measurement (about 5 min, one core)
    python examples/linalg_errors.py --quick    # fewer points, a smoke run
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import matplotlib  # noqa: E402
import matplotlib.ticker  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from vm.isa import FLEQ  # noqa: E402
from vm.machines.fleq.punchcard import fleq_geometry_for  # noqa: E402
from vm.cli.linalg import linalg_source, relative_error, solve  # noqa: E402
from vm.runtime.executor import EngineConfig, run_traced, run_transformer  # noqa: E402
from vm.machines.fleq.reference import run_fleq_reference  # noqa: E402
from vm.functions import dtype_parameters, make_block  # noqa: E402
from vm.routines.base import matrix_literal  # noqa: E402

DTYPES = ("float64", "float32")
N = 4


def orthogonal(rng: np.random.Generator, n: int) -> np.ndarray:
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return q


def conditioned(kappa: float, seed: int = 0) -> np.ndarray:
    """U diag(1 .. 1/kappa) V^T: condition number kappa, ||A||_2 = 1."""
    rng = np.random.default_rng(seed)
    return orthogonal(rng, N) @ np.diag(np.geomspace(1.0, 1.0 / kappa, N)) @ \
        orthogonal(rng, N).T


def symmetric(ratio: float, seed: int = 1) -> np.ndarray:
    """Q diag(2, 2 ratio, ...) Q^T: dominant eigenvalue 2, |lam2 / lam1| = ratio."""
    rng = np.random.default_rng(seed)
    values = np.array([2.0, 2.0 * ratio, 0.6 * ratio, -0.3 * ratio])
    q = orthogonal(rng, N)
    return q @ np.diag(values) @ q.T


def direction(vector: np.ndarray, top: np.ndarray) -> np.ndarray:
    unit = vector.reshape(-1) / np.linalg.norm(vector)
    return unit * (1.0 if unit @ top >= 0 else -1.0)


def iterates(kind: str, matrix: np.ndarray, iters: int, dtype: str) -> tuple[list, list]:
    """The destination's value after every write, on the transformer and exactly."""
    source = linalg_source(kind, matrix, iters)
    program = FLEQ.assemble_text(source, defaults=dtype_parameters(dtype))
    target = program.variables["X" if kind == "inverse" else "v"].cell
    traced = run_traced(program, fleq_geometry_for(program), 100_000, EngineConfig(dtype=dtype))
    exact = run_fleq_reference(program, 100_000, trace=True)
    pick = lambda trace: [s.new for s in trace if s.written == target]  # noqa: E731
    return pick(traced.trace), pick(exact.trace)


def iteration_curves(iters: int) -> dict:
    """{(kind, dtype): (transformer errors, exact errors)} per iterate."""
    curves = {}
    inverse_matrix = conditioned(4.0)
    eig_matrix = symmetric(0.7)
    values, vectors = np.linalg.eigh(eig_matrix)
    top = vectors[:, np.argmax(np.abs(values))]
    for dtype in DTYPES:
        got, exact = iterates("inverse", inverse_matrix, iters, dtype)
        want = np.linalg.inv(inverse_matrix)
        curves["inverse", dtype] = ([relative_error(x[:N, :N], want) for x in got],
                                    [relative_error(x[:N, :N], want) for x in exact])
        got, exact = iterates("eig", eig_matrix, iters, dtype)
        curves["eig", dtype] = ([relative_error(direction(v[:N, :1], top), top)
                                 for v in got[:-1]],
                                [relative_error(direction(v[:N, :1], top), top)
                                 for v in exact[:-1]])
    return curves


def product_errors(sizes: list[int], cases: int) -> list[dict]:
    """Max |transformer - numpy| of each product block on random d x d operands (entries in
    [-2, 2]; scale by s in [-3, 3]), and its largest ratio to the documented bound."""
    rows = []
    for name in ("matmul", "matmul_tn", "matmul_nt", "scale", "sumsq"):
        for dtype in DTYPES:
            parameters = dtype_parameters(dtype).get("matmul_tn", {})
            block = make_block(name, **parameters)
            worst = ratio = 0.0
            for d in sizes:
                rng = np.random.default_rng(d)
                operands = [(rng.uniform(-2, 2, (d, d)),
                             rng.uniform(-3, 3, (1, 1)) if name == "scale" else
                             None if name == "sumsq" else rng.uniform(-2, 2, (d, d)))
                            for _ in range(cases)]
                data, code = [], []
                for i, (a, b) in enumerate(operands):
                    want = block.reference(a, b)
                    data += [f"a{i}: {matrix_literal(a)}",
                             f"c{i}: .zeros {want.shape[0]}x{want.shape[1]}"]
                    data += [f"b{i}: {matrix_literal(b)}"] if b is not None else []
                    code.append(f"c{i} = {name}(a{i}{f', b{i}' if b is not None else ''})")
                source = f".d {d}\n.data\n" + "\n".join(data) + "\n.code\n" + \
                    "\n".join(code) + "\nhalt\n"
                program = FLEQ.assemble_text(source, parameters={name: parameters})
                result = run_transformer(program, fleq_geometry_for(program), 100,
                                         EngineConfig(dtype=dtype))
                memory = program.named_memory(result.memory)
                for i, (a, b) in enumerate(operands):
                    want = block.reference(a, b)
                    got = np.asarray(memory[f"c{i}"], dtype=float).reshape(want.shape)
                    error = np.abs(got - want)
                    worst = max(worst, float(error.max()))
                    ratio = max(ratio, float((error / block.bound_at(dtype, want)).max()))
            rows.append({"block": name, "dtype": dtype, "scale": block.values["scale"],
                         "error": worst, "ratio": ratio,
                         "bound1": float(block.bound_at(dtype, 1.0))})
    return rows


def sweep(kind: str, points: list[float], iters: int) -> list[dict]:
    rows = []
    for point in points:
        matrix = conditioned(point) if kind == "inverse" else symmetric(point)
        for dtype in DTYPES:
            result = solve(kind, matrix, iters, EngineConfig(dtype=dtype))
            rows.append({"point": point, "dtype": dtype, "bound": result.bound,
                         "steps": result.steps, "converged": result.converged,
                         **result.errors})
    return rows


def plot_iterations(curves: dict, path: Path) -> None:
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    titles = {"inverse": f"Newton-Schulz inverse, {N}x{N}, kappa = 4",
              "eig": f"power iteration, {N}x{N}, |lam2/lam1| = 0.7 (direction of v)"}
    for axis, kind in zip(axes, ("inverse", "eig")):
        for dtype, color in zip(DTYPES, ("tab:blue", "tab:red")):
            got, _ = curves[kind, dtype]
            axis.semilogy(range(len(got)), np.maximum(got, 1e-17), "o-", color=color, ms=3,
                          label=f"transformer {dtype}")
        exact = curves[kind, "float64"][1]
        axis.semilogy(range(len(exact)), np.maximum(exact, 1e-17), "--", color="black",
                      alpha=0.7, label="exact algorithm (reference, float64 numpy)")
        axis.set_title(titles[kind], fontsize=10)
        axis.set_xlabel("iteration")
        axis.set_ylabel("relative error against numpy.linalg")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_sweeps(inverse_rows: list[dict], eig_rows: list[dict], path: Path) -> None:
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for axis, rows, label, log in ((axes[0], inverse_rows, "condition number kappa", True),
                                   (axes[1], eig_rows, "|lam2 / lam1|", False)):
        for dtype, color in zip(DTYPES, ("tab:blue", "tab:red")):
            mine = [r for r in rows if r["dtype"] == dtype]
            x = [r["point"] for r in mine]
            axis.plot(x, [max(r["error"], 1e-17) for r in mine], "o-", color=color,
                      label=f"transformer vs numpy, {dtype}")
            axis.plot(x, [r["bound"] for r in mine], ":", color=color,
                      label=f"bound on transformer vs exact, {dtype}")
        exact = [r for r in rows if r["dtype"] == "float64"]
        axis.plot([r["point"] for r in exact], [max(r["exact_algorithm_error"], 1e-17)
                                                for r in exact],
                  "--", color="black", alpha=0.7, label="exact algorithm vs numpy")
        axis.set_yscale("log")
        if log:
            axis.set_xscale("log")
            axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            axis.set_xticks([r["point"] for r in exact], [f"{r['point']:g}" for r in exact])
        axis.set_xlabel(label)
        axis.set_ylabel("relative error")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    axes[0].set_title("inverse, T fixed", fontsize=10)
    axes[1].set_title("power iteration (vector and eigenvalue), T fixed", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def markdown(blocks: list[dict], sizes: list[int], curves: dict, inverse_rows: list[dict],
             eig_rows: list[dict], iters: int, sweep_iters: int, seconds: float) -> str:
    out = [f"# Linear algebra on the FLEQ transformer: measured errors ({N}x{N})", "",
           "Relative max-abs errors against numpy.linalg. *exact*: the same FLEQ program "
           "on the reference interpreter (numpy blocks), i.e. the algorithm's own error. "
           "float64 products use eps = 1e-5, float32 eps = 1e-3.", "",
           f"## Product blocks (d = {', '.join(map(str, sizes))}, random operands)", "",
           "| block | dtype | eps | max abs error | max error / bound | bound at abs(f) = 1 |",
           "|---|---|---|---|---|---|"]
    out += [f"| {r['block']} | {r['dtype']} | {r['scale']:g} | {r['error']:.2e} | "
            f"{r['ratio']:.3f} | {r['bound1']:.2e} |" for r in blocks]
    out += ["", "## Error against the iteration count", "",
           "| iteration | inverse f64 | exact | inverse f32 | exact | eig f64 | exact | "
           "eig f32 | exact |", "|---|---|---|---|---|---|---|---|---|"]
    for k in range(iters + 1):
        cells = []
        for kind in ("inverse", "eig"):
            for dtype in DTYPES:
                got, exact = curves[kind, dtype]
                cells += [f"{got[k]:.2e}", f"{exact[k]:.2e}"] if k < len(got) else ["", ""]
        out.append(f"| {k} | " + " | ".join(cells) + " |")
    for title, rows, name in ((f"## Inverse against the condition number (T = {sweep_iters})",
                               inverse_rows, "kappa"),
                              (f"## Power iteration against |lam2/lam1| (T = {sweep_iters})",
                               eig_rows, "ratio")):
        out += ["", title, "", f"| {name} | dtype | error | exact_algorithm_error | "
                "transformer_error | bound | converged | steps |",
                "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            out.append(f"| {r['point']:g} | {r['dtype']} | {r['error']:.2e} | "
                       f"{r['exact_algorithm_error']:.2e} | {r['transformer_error']:.2e} | "
                       f"{r['bound']:.2e} | {'yes' if r['converged'] else 'no'} | "
                       f"{r['steps']} |")
    out += ["", f"Measured in {seconds:.0f} s by `python examples/linalg_errors.py`."]
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/linalg", help="output directory (out/linalg)")
    parser.add_argument("--quick", action="store_true", help="fewer points, a smoke run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    iters, sweep_iters = (6, 12) if args.quick else (25, 30)
    kappas = [2.0, 20.0] if args.quick else [1.5, 3.0, 10.0, 30.0, 80.0]
    ratios = [0.5] if args.quick else [0.3, 0.5, 0.7, 0.9]
    sizes = [4] if args.quick else [4, 8]
    blocks = product_errors(sizes, 2 if args.quick else 3)
    curves = iteration_curves(iters)
    inverse_rows = sweep("inverse", kappas, sweep_iters)
    eig_rows = sweep("eig", ratios, sweep_iters)
    plot_iterations(curves, out / "iterations.png")
    plot_sweeps(inverse_rows, eig_rows, out / "condition.png")
    exceeded = [r for r in inverse_rows + eig_rows
                if r["converged"] and r["transformer_error"] > r["bound"]]
    exceeded += [r for r in blocks if r["ratio"] > 1]
    (out / "linalg.md").write_text(markdown(blocks, sizes, curves, inverse_rows, eig_rows,
                                            iters, sweep_iters, time.time() - start))
    print(f"wrote {out / 'linalg.md'}, {out / 'iterations.png'}, {out / 'condition.png'} "
          f"in {time.time() - start:.0f} s")
    if exceeded:
        print(f"{len(exceeded)} runs exceed the documented bound")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
