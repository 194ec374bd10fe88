"""Every registered block, measured on the transformer, stays within its documented bound.

The harness (vm/tools/block_errors.py) runs one-instruction programs through the FLEQ
machine's forward pass and compares with the block's numpy reference. New blocks
are covered by registering them: the tests are parametrized over the REGISTRY.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from vm.tools.block_errors import edge_values, measure, sample_operands, shape_pairs, summary_line
from vm.common.errors import InputError
from vm.functions import REGISTRY, dtype_parameters, make_block
from vm.functions.products import Mul

torch.set_num_threads(1)

POINTS = 60
KNOWN_VIOLATIONS: dict[str, str] = {}
"""Blocks whose measured error is known to break their bound: name -> why (strict xfail)."""


def takes_matrices(name: str, d: int) -> bool:
    return any(a != (1, 1) for a, _ in shape_pairs(make_block(name), d))


def cases():
    """Every block at d = 1 and 2, and at d = 4 when it takes matrices there."""
    for name in sorted(REGISTRY):
        for dtype in ("float64", "float32"):
            for d in (1, 2, 4) if takes_matrices(name, 4) else (1, 2):
                marks = ()
                if name in KNOWN_VIOLATIONS:
                    marks = pytest.mark.xfail(strict=True, reason=KNOWN_VIOLATIONS[name])
                elif not shape_pairs(make_block(name), d):
                    marks = pytest.mark.skip(reason=f"{name} takes no operands that fit d={d}")
                yield pytest.param(name, dtype, d, id=f"{name}-{dtype}-d{d}", marks=marks)


@pytest.mark.parametrize("name,dtype,d", list(cases()))
def test_measured_error_is_within_the_documented_bound(name, dtype, d):
    """At the parameters runs in `dtype` use (float32 commands tune some blocks' eps)."""
    parameters = dtype_parameters(dtype, [name]).get(name, {})
    errors = measure(name, dtype=dtype, d=d, count=POINTS if d < 4 else POINTS // 2, seed=d,
                     **parameters)
    assert errors.bounded, f"{name} documents no {dtype} bound"
    assert errors.points >= POINTS // 4
    shown = "; ".join(f"A={s.a.tolist()} B={None if s.b is None else s.b.tolist()} "
                      f"exact={s.exact.tolist()} got={s.computed.tolist()}"
                      for s in errors.violations()[:3])
    assert errors.within_bound, f"{summary_line(errors)}; e.g. {shown}"


FLOAT32_PRODUCTS = sorted(name for name, block in REGISTRY.items()
                          if getattr(block, "float32_scale", None) is not None)


@pytest.mark.parametrize("name", FLOAT32_PRODUCTS)
def test_float32_runs_eps_keeps_products_within_bound_and_beats_float64s(name):
    """The eps every float32 command uses (dtype_parameters) is measured too, not only the
    float64 default the registry-wide test runs: within its bound and more accurate."""
    parameters = dtype_parameters("float32", [name])[name]
    tuned = measure(name, dtype="float32", d=2, count=POINTS, seed=2, **parameters)
    default = measure(name, dtype="float32", d=2, count=POINTS, seed=2)
    assert tuned.bounded and tuned.within_bound, summary_line(tuned)
    assert tuned.max_relative_error < default.max_relative_error, (summary_line(tuned),
                                                                   summary_line(default))


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_samples_lie_in_the_domain_and_reach_its_edges(name):
    block = make_block(name)
    domain = block.domain()
    operands = sample_operands(block, 2, POINTS, np.random.default_rng(0))
    for a, b in operands:
        if domain.applies_to == "result":
            assert domain.contains(block.reference(a, b))
        else:
            assert domain.contains(a) and (b is None or domain.contains(b))
    if ((1, 1), (1, 1) if block.arity == 2 else None) in shape_pairs(block, 2) and \
            domain.applies_to == "operands":
        firsts = {float(a[0, 0]) for a, _ in operands if a.shape == (1, 1)}
        assert set(edge_values(domain).tolist()) <= firsts


def test_matrix_shapes_are_sampled_when_the_block_takes_them():
    shapes = {a.shape for a, _ in sample_operands(make_block("add"), 2, 40,
                                                  np.random.default_rng(0))}
    assert {(1, 1), (2, 2), (2, 1), (1, 2)} <= shapes


def test_a_point_outside_the_domain_is_detected():
    """inv's fit is for 0.1 <= |a| <= 100; at 0.01 the transformer is far off its bound
    (numpy would be exact, so this also shows the pass is really measured)."""
    outside = [(np.full((1, 1), 0.01), None), (np.full((1, 1), -0.02), None)]
    errors = measure("inv", operands=outside)
    assert len(errors.violations()) == 2 and errors.max_error > 1.0
    products = measure("mul", operands=[(np.full((1, 1), 1e5), np.full((1, 1), 1e5))])
    assert not products.within_bound and products.worst_ratio > 10


class FixedBoundMul(Mul):
    """mul documenting a fixed absolute bound, to check the harness against it."""

    fixed = 0.0

    def error_bound(self, dtype: str) -> float:
        return self.fixed

    def relative_error_bound(self, dtype: str) -> float:
        return 0.0


def test_a_too_small_bound_is_detected():
    """The same measured points against a bound half the largest measured error: caught;
    against a bound just above it: within."""
    honest = measure(Mul(), count=POINTS)
    assert honest.within_bound and honest.max_error > 0
    operands = [(s.a, s.b) for s in honest.samples]
    tight, loose = FixedBoundMul(), FixedBoundMul()
    tight.fixed, loose.fixed = honest.max_error / 2, honest.max_error * 1.001
    assert not measure(tight, operands=operands).within_bound
    assert measure(loose, operands=operands).within_bound


def test_a_wrong_reference_is_detected():
    """Measured against a reference that is off by 0.5, mul fails: the check compares the
    transformer's numbers, not the reference with itself."""

    class SkewedMul(Mul):
        def reference(self, a, b):
            return a * b + 0.5

    assert not measure(SkewedMul(), count=POINTS).within_bound


def test_float32_operands_are_rounded_before_the_reference_sees_them():
    errors = measure("add", dtype="float32", operands=[(np.full((1, 1), 0.1),
                                                         np.full((1, 1), 0.2))])
    sample = errors.samples[0]
    assert sample.a[0, 0] == float(np.float32(0.1))
    assert errors.within_bound


def test_unknown_block_and_parameter_are_input_errors():
    with pytest.raises(InputError):
        measure("nosuch")
    with pytest.raises(InputError):
        measure("mul", bogus=1.0)


def test_the_example_writes_tables_and_plots(tmp_path):
    """examples/block_errors.py --quick on two blocks: a table per parameter, a PNG each."""
    root = Path(__file__).resolve().parents[1]
    environment = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(root / "examples" / "block_errors.py"), "--quick",
                           "--blocks", "mul,transpose", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=environment, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(
        f"mul-{parameter.name}.png" for parameter in make_block("mul").parameters)
    table = (tmp_path / "blocks.md").read_text()
    assert "## mul: scale (d = 2)" in table and "| transpose | 4 |" not in table
    assert "| mul | 1 |" in table and "| transpose | 2 |" in table


@pytest.mark.parametrize("arguments,message", [
    (dict(count=0), "count must be a whole number from 1 to 100,000, got 0"),
    (dict(count=2.5), "count must be a whole number from 1 to 100,000, got 2.5"),
    (dict(count=10**9), "count must be a whole number from 1 to 100,000"),
    (dict(d=0), "d must be a whole number from 1 to 16, got 0"),
    (dict(d=2.5), "d must be a whole number from 1 to 16, got 2.5"),
    (dict(dtype="float16"), "dtype must be one of float32, float64"),
    (dict(seed=-1), "seed must be a whole number, at least 0")])
def test_measure_refuses_a_count_size_dtype_or_seed_it_cannot_use(arguments, message):
    """count = 0, -1 or 2.5 measured the edge values alone, 10**9 built operand pairs for
    minutes; d = 0 said 'accepts none of the shapes', 2.5 failed in numpy, float16 cast the
    operands to inf, seed = -1 failed in numpy's generator."""
    with pytest.raises(InputError, match=message):
        measure("mul", **{"count": 2, **arguments})
