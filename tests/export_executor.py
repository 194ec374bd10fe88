"""An independent executor of `ltvm export` directories, shared by the export tests.

It imports nothing from the project: it is what a reader of README's "Exported weights"
and `ltvm export --help` would write. It reads the weights from weights.npz or
weights.safetensors (the same tensors; safetensors keeps `meta` in its header's metadata).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def load_export(directory: Path) -> tuple[dict[str, np.ndarray], dict, dict, np.ndarray]:
    """(weights, meta, layout, punchcard) of an npz or safetensors export."""
    if (directory / "weights.safetensors").exists():
        from safetensors import safe_open
        from safetensors.numpy import load_file
        weights = load_file(directory / "weights.safetensors")
        with safe_open(directory / "weights.safetensors", framework="numpy") as handle:
            meta = json.loads(handle.metadata()["meta"])
    else:
        weights = dict(np.load(directory / "weights.npz", allow_pickle=False))
        meta = json.loads(str(weights.pop("meta")))
    layout = json.loads((directory / "layout.json").read_text())
    return weights, meta, layout, np.load(directory / "punchcard.npy", allow_pickle=False)


def eq1_pass(weights: dict[str, np.ndarray], meta: dict, X: np.ndarray) -> np.ndarray:
    """X <- TF(X): every layer of Eq. (1) in order (scores keys x queries, softmax over keys)."""
    for l in range(meta["layers"]):
        A = X.copy()
        for h in range(meta["heads"][l]):
            w = {k: weights[f"l{l}.h{h}.{k}"] for k in ("Q", "K", "V", "lam")}
            S = w["lam"] * (w["K"] @ X).T @ (w["Q"] @ X)
            S = S + weights[f"l{l}.h{h}.mask"] if f"l{l}.h{h}.mask" in weights else S
            P = np.exp(S - S.max(axis=0))
            A += w["V"] @ X @ (P / P.sum(axis=0))
        W1, b1, W2, b2 = (weights[f"l{l}.{k}"] for k in ("W1", "b1", "W2", "b2"))
        X = A + W2 @ np.maximum(W1 @ A + b1[:, None], 0) + b2[:, None]
    return X


def code(values: np.ndarray) -> int:
    """The integer of a ±1 code, MSB first."""
    return int("".join("1" if b > 0 else "0" for b in values), 2)


def pc_code(X: np.ndarray, layout: dict) -> int:
    return code(X[slice(*layout["fields"][layout["pc_field"]]), layout["pc_column"]])


def run_passes(step, X: np.ndarray, layout: dict, max_steps: int) -> tuple[np.ndarray, int]:
    """Apply `step` to X while the pc code differs from halt_pc; (final X, passes)."""
    passes = 0
    while pc_code(X, layout) != layout["halt_pc"] and passes < max_steps:
        X, passes = step(X), passes + 1
    return X, passes


def run_exported(directory: Path, max_steps: int) -> tuple[np.ndarray, dict, int]:
    """(final X, layout, passes) of an npz or safetensors export run by `eq1_pass`."""
    weights, meta, layout, X = load_export(directory)
    X, passes = run_passes(lambda X: eq1_pass(weights, meta, X), X, layout, max_steps)
    return X, layout, passes


def subleq_memory(X: np.ndarray, layout: dict) -> list[int]:
    """The SUBLEQ memory words: ±1 two's complement, `bits` bits, MSB first."""
    words = X[slice(*layout["fields"][layout["memory_field"]]),
              slice(*layout["regions"]["memory"])]
    top = 1 << (layout["bits"] - 1)
    return [v - 2 * top if v >= top else v
            for v in (code(words[:, j]) for j in range(words.shape[1]))]


def fleq_variable(X: np.ndarray, layout: dict, name: str) -> np.ndarray:
    """A FLEQ variable: its cell's d x d block cut to the variable's shape."""
    variable = layout["memory_names"][name]
    start = layout["cell_start"] + variable["cell"] * layout["d"]
    rows, columns = variable["shape"]
    cell = X[slice(*layout["fields"][layout["memory_field"]]), start:start + layout["d"]]
    return cell[:rows, :columns]
