"""Linear algebra blocks on the FLEQ transformer against numpy: each block's documented bound
on its domain in float64 and float32, shapes, and the heads and layers the blocks build."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from assembler.diagnostics import SourceError
from vm.isa import FLEQ
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.runtime.executor import EngineConfig, run_transformer
from vm.functions import make_block
from vm.routines.base import matrix_literal
from vm.machines.fleq.machine import fleq_machine

torch.set_num_threads(1)

FLOAT32_PRODUCT = {"scale": 1e-3}
"""Product parameters for float32 runs: eps = 1e-5 is for float64 (docs/linalg.md)."""
PRODUCTS = ("matmul", "matmul_tn", "matmul_nt", "scale", "sumsq")


def numpy_reference(name: str, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """The functions written independently of the blocks' own `reference`."""
    return {"transpose": lambda: a.T, "matmul": lambda: a @ b, "matmul_tn": lambda: a.T @ b,
            "matmul_nt": lambda: a @ b.T, "scale": lambda: b[0, 0] * a,
            "sumsq": lambda: np.array([[np.linalg.norm(a) ** 2]]),
            "trace": lambda: np.array([[np.trace(a)]]),
            "rsqrt": lambda: a ** -0.5}[name]()


def run_cases(name: str, cases: list[tuple[np.ndarray, np.ndarray | None]], d: int, dtype: str,
              parameters: dict[str, float] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """One program computing `name` on every case; (transformer, numpy) per case."""
    data, code = [], []
    for index, (a, b) in enumerate(cases):
        data.append(f"a{index}: {matrix_literal(a)}")
        arguments = f"a{index}"
        if b is not None:
            data.append(f"b{index}: {matrix_literal(b)}")
            arguments += f", b{index}"
        want = numpy_reference(name, a, b)
        data.append(f"c{index}: .zeros {want.shape[0]}x{want.shape[1]}")
        code.append(f"c{index} = {name}({arguments})")
    source = f".d {d}\n.data\n" + "\n".join(data) + "\n.code\n" + "\n".join(code) + "\nhalt\n"
    program = FLEQ.assemble_text(source, f"{name}.fleq", parameters={name: parameters or {}})
    result = run_transformer(program, fleq_geometry_for(program), 100, EngineConfig(dtype=dtype))
    assert result.halted
    memory = program.named_memory(result.memory)
    pairs = [numpy_reference(name, a, b) for a, b in cases]
    return [(np.asarray(memory[f"c{i}"], dtype=float).reshape(want.shape), want)
            for i, want in enumerate(pairs)]


def product_cases(name: str, d: int, rng: np.random.Generator) -> list:
    """Square, rectangular and vector operands of a product block, results well inside
    |result| <= 100."""
    def m(rows: int, columns: int, size: float = 1.0) -> np.ndarray:
        return rng.uniform(-size, size, (rows, columns))
    h = max(d - 1, 1)
    if name == "matmul":
        return [(m(d, d, 2), m(d, d, 2)), (m(h, d), m(d, 1)), (m(1, d), m(d, h, 3))]
    if name == "matmul_tn":
        return [(m(d, d, 2), m(d, d, 2)), (m(d, h), m(d, 1)), (m(d, 1, 3), m(d, 1, 3))]
    if name == "matmul_nt":
        return [(m(d, d, 2), m(d, d, 2)), (m(h, d), m(1, d)), (m(d, 1, 3), m(h, 1, 3))]
    if name == "scale":
        return [(m(d, d, 5), np.array([[-1.7]])), (m(d, 1, 5), np.array([[0.031]])),
                (m(h, d, 5), np.array([[9.0]]))]
    return [(m(d, d, 2), None), (m(h, 1, 3), None), (m(1, 1, 5), None)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("d", [2, 4])
@pytest.mark.parametrize("name", PRODUCTS)
def test_products_are_within_their_documented_bound(name, d, dtype):
    parameters = FLOAT32_PRODUCT if dtype == "float32" else {}
    block = make_block(name, **parameters)
    rng = np.random.default_rng(10 * PRODUCTS.index(name) + d)
    for got, want in run_cases(name, product_cases(name, d, rng), d, dtype, parameters):
        assert block.domain().contains(want)
        assert np.all(np.abs(got - want) <= block.bound_at(dtype, want)), (got - want)


@pytest.mark.parametrize("name", ["matmul", "matmul_nt"])
def test_products_at_d8_in_float64(name):
    block = make_block(name)
    rng = np.random.default_rng(8)
    cases = [(rng.normal(size=(8, 8)), rng.normal(size=(8, 8)))]
    for got, want in run_cases(name, cases, 8, "float64"):
        assert np.all(np.abs(got - want) <= block.bound_at("float64", want))


def test_float64_product_bound_is_tight_enough_to_matter():
    """The documented float64 bound is near 1e-9 at |result| = 10, not a vacuous number."""
    block = make_block("matmul")
    assert float(block.bound_at("float64", 10.0)) < 2e-9
    assert float(make_block("matmul", **FLOAT32_PRODUCT).bound_at("float32", 10.0)) < 1e-2


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("d", [2, 4, 8])
def test_transpose_and_trace_are_exact_moves(d, dtype):
    rng = np.random.default_rng(d)
    cases = [(rng.normal(size=(d, d)), None), (rng.normal(size=(max(d - 1, 1), d)), None)]
    cast = np.float32 if dtype == "float32" else np.float64
    for got, want in run_cases("transpose", cases, d, dtype):
        np.testing.assert_array_equal(got, want.astype(cast).astype(float))
    block = make_block("trace")
    for got, want in run_cases("trace", cases[:1], d, dtype):
        rounding = 4 * d * np.finfo(cast).eps * np.abs(cases[0][0]).sum()
        assert abs(got - want) <= min(block.bound_at(dtype, want), rounding + 1e-300)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_rsqrt_is_within_its_bound_on_its_domain(dtype):
    block = make_block("rsqrt")
    domain = block.domain()
    values = np.geomspace(domain.low, domain.high, 16).reshape(4, 4)
    (got, want), = run_cases("rsqrt", [(values, None)], 4, dtype)
    assert np.all(np.abs(got - want) <= block.bound_at(dtype, want))
    assert np.max(np.abs(got - want) / want) < 0.04, "a usable first guess for Newton steps"


@pytest.mark.parametrize("line, message", [
    ("P = matmul(A, V)", "A B needs A's columns to match B's rows, got 2x3 and 2x1"),
    ("P = matmul_tn(A, W)", "same number of rows, got 2x3 and 3x1"),
    ("P = matmul_nt(A, V)", "same number of columns, got 2x3 and 2x1"),
    ("P = scale(A, V)", "scalar (1x1), got 2x1"),
    ("s = trace(A)", "square matrix, got 2x3"),
])
def test_shape_errors_are_readable_and_located(line, message):
    source = (".d 3\n.data\nA: .matrix 2x3 [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]\n"
              "V: .vector [1.0, 2.0]\nW: .vector [1.0, 2.0, 3.0]\nP: .zeros 2x2\ns: 0.0\n"
              f".code\n{line}\nhalt\n")
    with pytest.raises(SourceError) as caught:
        FLEQ.assemble_text(source, "shapes.fleq")
    assert message in str(caught.value) and "shapes.fleq:9:" in str(caught.value)


@pytest.mark.parametrize("name, heads", [
    ("transpose", lambda d: d), ("trace", lambda d: 1), ("matmul_tn", lambda d: 1 + 4),
    ("matmul", lambda d: d + 1 + 4), ("matmul_nt", lambda d: 2 * d + 4),
    ("scale", lambda d: 2 + 4), ("sumsq", lambda d: d + 4),
    ("rsqrt", lambda d: 1 + 16 + d + 3 * (d + 12)),
])
@pytest.mark.parametrize("d", [2, 4])
def test_heads_and_layers_match_the_metadata(name, heads, d):
    program = FLEQ.assemble_text(f".d {d}\n.data\nx: 0.0\n.code\nhalt\n", functions=[name])
    machine = fleq_machine(fleq_geometry_for(program))
    block = make_block(name)
    own = [[h for h in layer.heads if h.role.startswith(f"{name}:")]
           for layer in machine.weights.layers]
    assert sum(len(layer) for layer in own) == heads(d)
    used = [i for i, layer in enumerate(own) if layer]
    assert used[0] >= 3 and used[-1] == 3 + block.depth(d) - 1
    assert len(machine.weights.layers) == 4 + block.depth(d)
