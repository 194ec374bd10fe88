"""mul and percentage (Lemma 7, Corollaries 2-3) measured on the transformer: the shared
Richardson head pairs make them accurate to about 1e-11 in float64, within the documented
bound in both dtypes; the bound's truncation term is real, not padding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vm.tools.block_errors import measure
from vm.common.errors import InputError
from vm.functions import make_block
from vm.functions.linalg import MatrixProduct
from vm.functions.products import LinearizedProduct

torch.set_num_threads(1)

POINTS = 40
FLOAT32_SCALES = {"mul": 5e-3, "percentage": 0.1}
"""The eps the documentation recommends for float32 runs."""


def edge_operands(name: str) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Operands at the domain's edge and inside it, both signs."""
    if name == "mul":
        pairs = [(4.0, 5.0), (-2.5, 8.0), (20.0, -1.0), (0.3, 0.7), (-3.0, -1e-3)]
        return [(np.full((1, 1), a), np.full((1, 1), b)) for a, b in pairs]
    return [(np.full((1, 1), a), None) for a in (100.0, -100.0, 37.5, -0.25, 1e-3)]


@pytest.mark.parametrize("name", ["mul", "percentage"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_measured_error_is_within_the_bound_at_the_documented_settings(name, dtype):
    parameters = {"scale": FLOAT32_SCALES[name]} if dtype == "float32" else {}
    random = measure(name, dtype=dtype, d=2, count=POINTS, seed=7, **parameters)
    edges = measure(name, dtype=dtype, d=1, operands=edge_operands(name), **parameters)
    assert random.within_bound and edges.within_bound
    assert max(random.max_error, edges.max_error) > 0, "the pass really computes"


@pytest.mark.parametrize("name, dtype, largest", [
    ("mul", "float64", 2e-9), ("percentage", "float64", 2e-11),
    ("mul", "float32", 1e-2), ("percentage", "float32", 5e-5)])
def test_the_bound_at_the_domain_edge_is_small(name, dtype, largest):
    """Relative to the edge for mul (|a b| up to 1e6), absolute for percentage."""
    parameters = {"scale": FLOAT32_SCALES[name]} if dtype == "float32" else {}
    block = make_block(name, **parameters)
    edge = block.values["span"] * getattr(block, "factor", 1.0)
    relative_to = edge if name == "mul" else 1.0
    assert float(block.bound_at(dtype, edge)) / relative_to < largest


@pytest.mark.parametrize("dtype, relative", [("float64", 1e-8), ("float32", 1e-3)])
def test_mul_is_accurate_up_to_a_million(dtype, relative):
    """Products at and around every level switch (10, 1000, 1e5) and the 1e6 edge: within
    the bound, and relatively accurate above 1 (float64 1e-8; float32 1e-3)."""
    parameters = {"scale": FLOAT32_SCALES["mul"]} if dtype == "float32" else {}
    products = [1.0, 9.7, 10.0, 12.0, 15.0, 977.0, 1000.0, 1300.0, 1e5, 1.2e5, 6e5, 1e6]
    operands = [(np.full((1, 1), sign * p / 3.0), np.full((1, 1), 3.0))
                for p in products for sign in (1.0, -1.0)]
    errors = measure("mul", dtype=dtype, d=1, operands=operands, **parameters)
    assert errors.within_bound
    for sample in errors.samples:
        exact = float(sample.a[0, 0]) * 3.0
        assert abs(float(sample.computed[0, 0]) - exact) <= relative * abs(exact)


def test_mul_keeps_its_fine_eps_below_ten():
    """Below the first switch mul is the eps = 1e-4 product: bound 6.9e-11 + tiny |f|."""
    block = make_block("mul")
    assert float(block.bound_at("float64", 9.0)) < 1e-10
    assert len(block.levels) == 3 and block.depth(1) == 4
    assert len(make_block("mul", span=20.0).levels) == 1


def test_mul_is_a_thousand_times_better_than_one_head_pair_at_eps_1e3():
    """One ±eps pair at eps = 1e-3 is off by eps^2 s^3 / 6 = 1.3e-3 at s = 20; the two
    pairs with the coupling correction leave about 1e-11 (span 20: one level, eps = 1e-4)."""
    errors = measure("mul", d=1, operands=edge_operands("mul"), span=20.0)
    assert errors.max_error < 2e-11
    assert errors.max_error < 1e-6 * (1e-3 ** 2 * 20 ** 3 / 6)


def test_the_truncation_term_of_the_bound_is_measured():
    """At eps = 0.01 the eps^4 s^5 / 30 truncation dominates at s = 9, below mul's first
    level switch (2e-5): the measured error is a good part of it and stays within the
    bound."""
    block = make_block("mul", scale=0.01, span=20.0)
    errors = measure(block, d=1, operands=[(np.full((1, 1), 3.0), np.full((1, 1), 3.0))])
    leading = 0.01 ** 4 * 9 ** 5 / 30
    assert 0.5 * leading < errors.max_error <= float(block.bound_at("float64", 9.0))


def test_a_smaller_eps_trades_truncation_for_rounding():
    """Rounding grows as 1/eps: at eps = 1e-6 the error at s = 20 exceeds eps = 1e-4's."""
    operands = edge_operands("mul")
    fine = measure("mul", d=1, operands=operands, scale=1e-6)
    assert fine.within_bound
    assert fine.max_error > measure("mul", d=1, operands=operands).max_error


def test_matrix_products_share_the_scalar_construction():
    assert issubclass(MatrixProduct, LinearizedProduct)
    for name in ("mul", "percentage", "matmul_tn", "scale", "sumsq"):
        block = make_block(name)
        assert type(block).product_heads is LinearizedProduct.product_heads
        assert type(block).emit_product is LinearizedProduct.emit_product


@pytest.mark.parametrize("name, parameters, message", [
    ("mul", {"span": 0.0}, "mul.span must be positive"),
    ("mul", {"scale": 0.0}, "mul.scale must be in (0, 1]"),
    ("mul", {"anchor": 100.0}, "mul.anchor must be in (0, 60]"),
    # the matrix products' own limits: the scalar products' (0, 1] and (0, 60] were named
    ("matmul", {"scale": 0.0}, "matmul.scale must be in (0, 0.1]"),
    ("matmul_tn", {"anchor": 0.0}, "matmul_tn.anchor must be in (0, 30]"),
    ("mul", {"anchor": 12.0}, "mul.anchor=12 is too large for 3 levels (at most 10)"),
    ("mul", {"span": 1e16}, "mul.span=1e+16 needs 7 levels"),  # it named the default anchor
    ("percentage", {"span": -1.0}, "percentage.span must be positive")])
def test_bad_parameters_are_refused(name, parameters, message):
    with pytest.raises(InputError) as caught:
        make_block(name, **parameters)
    assert message in str(caught.value)


@pytest.mark.parametrize("name", ["matmul", "scale", "sumsq"])
def test_a_span_too_large_for_any_bound_has_an_infinite_one(name):
    """(eps * span)^4 overflowed with OverflowError: `ltvm inspect` of a program run with
    --param matmul.span=1e300 ended in a traceback."""
    block = make_block(name, span=1e300)
    assert block.relative_error_bound("float64") == float("inf")
