"""hadamard: the elementwise product on the transformer, against numpy, within its bound;
the first-order decoupling of the shared softmax denominator is what makes it accurate."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from assembler.diagnostics import SourceError
from vm.isa import FLEQ
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.runtime.executor import EngineConfig, run_transformer
from vm.functions import make_block
from vm.functions.hadamard import SPAN
from vm.routines.base import matrix_literal

torch.set_num_threads(1)
RNG = np.random.default_rng(11)


def run_products(pairs: list[tuple[np.ndarray, np.ndarray]], d: int, dtype: str,
                 scale: float) -> list[np.ndarray]:
    data, code = [], []
    for i, (a, b) in enumerate(pairs):
        data += [f"A{i}: {matrix_literal(a)}", f"B{i}: {matrix_literal(b)}",
                 f"C{i}: .zeros {a.shape[0]}x{a.shape[1]}"]
        code.append(f"C{i} = hadamard(A{i}, B{i})")
    source = (f".d {d}\n.function hadamard scale={scale}\n.data\n" + "\n".join(data) +
              "\n.code\n" + "\n".join(code) + "\nhalt\n")
    program = FLEQ.assemble_text(source, "had.fleq")
    result = run_transformer(program, fleq_geometry_for(program), 20, EngineConfig(dtype=dtype))
    assert result.halted
    return [result.memory[program.variables[f"C{i}"].cell] for i in range(len(pairs))]


PAIRS = [(RNG.uniform(-SPAN, SPAN, (3, 3)), RNG.uniform(-SPAN, SPAN, (3, 3))),
         (RNG.uniform(-1, 1, (3, 1)), RNG.uniform(-1, 1, (3, 1))),
         (np.array([[SPAN, SPAN, 1e-3], [0.0, -SPAN, 2.0]]),
          np.array([[SPAN, -SPAN, SPAN], [5.0e-1, SPAN, -3.0]]))]


@pytest.mark.parametrize("dtype, scale", [("float64", 1e-5), ("float32", 1e-3)])
def test_products_within_bound_and_padding_untouched(dtype, scale):
    block = make_block("hadamard", scale=scale)
    for (a, b), got in zip(PAIRS, run_products(PAIRS, 3, dtype, scale), strict=True):
        rows, columns = a.shape
        error = np.abs(got[:rows, :columns] - a * b)
        assert (error <= block.error_bound(dtype)).all(), error.max()
        assert not got[rows:].any() and not got[:, columns:].any()


def test_float64_is_accurate_on_small_values_despite_large_row_neighbours():
    """Entry (0, 2), A[0, 2] B[0, 2] = 1e-2, shares its softmax with A[0, i] B[0, 2] = +-100:
    without the decoupling it would be off by about 200 e^-C = 3.7 (C = 4)."""
    (a, b), got = PAIRS[2], run_products(PAIRS, 3, "float64", 1e-5)[2]
    assert abs(got[0, 2] - a[0, 2] * b[0, 2]) < 1e-9
    small = run_products([PAIRS[1]], 3, "float64", 1e-5)[0]
    assert np.abs(small[:3, :1] - PAIRS[1][0] * PAIRS[1][1]).max() < 1e-10


def test_shapes_must_match():
    with pytest.raises(SourceError, match="same shape"):
        FLEQ.assemble_text(".d 2\n.data\na: .vector [1.0, 2.0]\nb: .zeros 2x2\nc: .zeros 2x2\n"
                      ".code\nc = hadamard(a, b)\nhalt\n")


def test_bound_covers_the_documented_domain():
    block = make_block("hadamard")
    assert block.domain().contains(np.array([-SPAN, SPAN]))
    assert not block.domain().contains(np.array([SPAN * 1.01]))
    assert block.error_bound("float64") < 1e-9
