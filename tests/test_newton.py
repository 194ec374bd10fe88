"""inv, sqrt and rsqrt refined by Newton steps inside their blocks (vm/functions/newton.py):
measured on the FLEQ machine against numpy's exact functions, never against the blocks'
own code."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vm.apps.calc import calculate
from assembler.diagnostics import SourceError
from vm.functions import dtype_parameters, make_block
from vm.isa import FLEQ
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.runtime.executor import EngineConfig, run_transformer
from vm.tools.block_errors import measure

EXACT = {"inv": lambda a: 1.0 / a, "sqrt": np.sqrt, "rsqrt": lambda a: 1.0 / np.sqrt(a)}
GRIDS = {"inv": np.concatenate([np.geomspace(0.1, 100, 40), -np.geomspace(0.1, 100, 40)]),
         "sqrt": np.concatenate([[0.0], np.geomspace(0.01, 100, 79)]),
         "rsqrt": np.geomspace(0.01, 100, 80)}


def run_block(name: str, values: np.ndarray, dtype: str, d: int = 1, **parameters: float):
    operands = [(np.full((1, 1), v), None) for v in values]
    if d == 2:
        operands = [(np.array([[v, w], [w, v]]), None) for v, w in zip(values, values[::-1])]
    return measure(name, dtype=dtype, d=d, operands=operands, **parameters)


def relative_errors(errors) -> np.ndarray:
    found = []
    for sample in errors.samples:
        exact = EXACT[errors.block.name](sample.a)
        nonzero = exact != 0
        found.append(np.abs(sample.computed - exact)[nonzero] / np.abs(exact[nonzero]))
    return np.concatenate([f.ravel() for f in found])


@pytest.mark.parametrize("name", sorted(EXACT))
@pytest.mark.parametrize("d", [1, 2])
def test_float64_is_within_1e_8_relative_over_the_domain(name, d):
    errors = run_block(name, GRIDS[name], "float64", d)
    assert relative_errors(errors).max() <= 1e-8
    assert errors.worst_ratio <= 1.0
    assert make_block(name).relative_error_bound("float64") <= 1e-8


@pytest.mark.parametrize("name", sorted(EXACT))
def test_float32_is_within_its_bound_and_better_than_the_fit(name):
    parameters = dtype_parameters("float32", [name])[name]
    errors = run_block(name, GRIDS[name], "float32", **parameters)
    assert errors.worst_ratio <= 1.0
    fit_only = make_block(name, steps=0).relative_error_bound("float32")
    assert make_block(name, **parameters).relative_error_bound("float32") < fit_only
    assert relative_errors(errors).max() < fit_only / 5


@settings(max_examples=20, deadline=None)
@given(st.floats(-2.0, 2.0), st.booleans())
def test_random_magnitudes_are_within_1e_8(exponent, negative):
    value = 10.0 ** exponent
    for name in ("inv", "sqrt", "rsqrt"):
        a = -value if negative and name == "inv" and value >= 0.1 else value
        if name == "inv" and not 0.1 <= abs(a) <= 100:
            continue
        errors = run_block(name, np.array([a]), "float64")
        assert relative_errors(errors).max() <= 1e-8


def test_sqrt_of_zero_is_zero_within_the_rounding_bound():
    errors = run_block("sqrt", np.array([0.0]), "float64")
    assert abs(errors.samples[0].computed[0, 0]) <= make_block("sqrt").error_bound("float64")


@pytest.mark.parametrize("name, steps, layers", [("inv", 3, 9), ("rsqrt", 3, 12),
                                                 ("sqrt", 3, 13), ("inv", 0, 3)])
def test_each_newton_step_adds_its_product_layers(name, steps, layers):
    assert make_block(name, steps=steps).depth(1) == layers


@pytest.mark.parametrize("expression", ["1/0.1", "sqrt(100)"])
def test_calc_gives_ten(expression):
    result = calculate(expression, {})
    assert abs(result.transformer - 10.0) <= 1e-8 * 10.0
    assert result.within_bound


def test_a_domain_error_names_the_parameter_that_widens_it():
    with pytest.raises(SourceError, match=r"--param inv\.low=L or --param inv\.high=H"):
        calculate("1/1000", {})
    widened = calculate("1/1000", {}, {"inv": {"high": 2000.0}})
    assert abs(widened.transformer - 1e-3) <= 1e-8 * 1e-3
    with pytest.raises(SourceError, match=r"--param mul\.span=N"):
        calculate("5000*500", {})


HERON = """
.data
a:    50.0
x:    1.0
q:    0.0
s:    0.0
half: 0.5
n:    12
one:  1
.code
loop: q = inv(x)
      q = mul(a, q)
      s = add(x, q)
      n = sub(n, one)
      x = mul(half, s) if n <= 0 goto done
      goto loop
done: halt
"""


def test_heron_settles_at_sqrt_50():
    program = FLEQ.assemble_text(HERON, "heron.fleq", parameters={"mul": {"span": 60.0}})
    result = run_transformer(program, fleq_geometry_for(program), 1000,
                             EngineConfig(dtype="float64"))
    x = program.named_memory(result.memory)["x"]
    assert abs(x - math.sqrt(50.0)) <= 1e-8


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("name, parameters", [("inv", {"high": 1e300}), ("sqrt", {"high": 1e300}),
                                              ("rsqrt", {"scale": 1e-300})])
def test_a_diverging_bound_is_infinite_without_a_warning(name, parameters):
    """The float32 error propagation overflowed in numpy scalars: RuntimeWarnings on stderr
    (ltvm linalg inverse --dtype float32 --param rsqrt.scale=1e-300) before the inf bound."""
    assert make_block(name, **parameters).relative_error_bound("float32") == math.inf
