"""The SUBLEQ machine's weights: geometry-only, layer counts, the temperature rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vm.machines.subleq.punchcard import geometry_for
from assembler.subleq import assemble
from vm.blocks.adder_plan import ONE_LEVEL_MAX_BITS
from vm.common.encoding import pm1_codes
from vm.common.errors import InputError
from vm.common.geometry import Geometry
from vm.machines.subleq.machine import (DEFAULT_TARGET_ERROR, default_temperature, read_error_bound,
                                subleq_machine, temperature_is_safe)


def all_arrays(machine):
    for layer in machine.weights.layers:
        for head in layer.heads:
            yield from (head.Q, head.K, head.V, np.array(head.lam))
        yield from (layer.ffn.W1, layer.ffn.b1, layer.ffn.W2, layer.ffn.b2)


def test_two_programs_of_one_geometry_run_on_byte_identical_weights():
    first = assemble(".data\nx: 1\ny: 2\n.code\nsubleq x, y\nhalt\n", "a.sq")
    second = assemble(".data\np: -7\nq: 100\n.code\nl: subleq q, p, l\ngoto l\n", "b.sq")
    assert geometry_for(first) == geometry_for(second)
    subleq_machine.cache_clear()
    a = subleq_machine(geometry_for(first))
    subleq_machine.cache_clear()
    b = subleq_machine(geometry_for(second))
    assert a is not b
    for x, y in zip(all_arrays(a), all_arrays(b), strict=True):
        assert x.tobytes() == y.tobytes()


@pytest.mark.parametrize("bits,layers", [(2, 4), (8, 4), (ONE_LEVEL_MAX_BITS, 4),
                                         (ONE_LEVEL_MAX_BITS + 1, 5), (64, 5)])
def test_layer_and_head_counts_against_the_paper(bits, layers):
    machine = subleq_machine(Geometry(1, 8, 20, bits))
    assert len(machine.weights.layers) == layers <= 9
    assert max(machine.weights.heads) == 2


def test_every_layer_is_eq1_shaped_with_column_independent_biases():
    machine = subleq_machine(Geometry(2, 10, 30, 16))
    rows = machine.layout.rows
    for layer in machine.weights.layers:
        assert layer.ffn.b1.ndim == 1 and layer.ffn.b2.shape == (rows,)
        assert layer.ffn.W1.shape[1] == rows and layer.ffn.W2.shape[0] == rows
        for head in layer.heads:
            assert head.Q.shape[1] == head.K.shape[1] == rows and head.V.shape == (rows, rows)


@pytest.mark.parametrize("columns", [4, 64, 4096])
def test_default_temperature_makes_the_matching_weight_exactly_one(columns):
    lam = default_temperature(columns)
    bits = max(2, (columns - 1).bit_length())
    codes = pm1_codes(np.arange(columns), bits)
    scores = lam * codes @ codes[columns // 2]
    weights = np.exp(scores - scores.max())
    assert (weights / weights.sum())[columns // 2] == 1.0
    looser = default_temperature(columns, DEFAULT_TARGET_ERROR * 1e6)
    scores = looser * codes @ codes[columns // 2]
    weights = np.exp(scores - scores.max())
    assert (weights / weights.sum())[columns // 2] < 1.0


def test_temperature_rule_and_safety_bound():
    assert default_temperature(65) == pytest.approx(math.log(64 / 2.0 ** -54) / 2)
    assert read_error_bound(37, 3.3) < 0.1 < read_error_bound(37, 3.2)
    geometry = Geometry(1, 10, 26, 16)
    assert temperature_is_safe(subleq_machine(geometry))
    assert temperature_is_safe(subleq_machine(geometry, 3.3))
    assert not temperature_is_safe(subleq_machine(geometry, 3.2))


def test_a_fleq_program_on_the_subleq_machine_is_an_input_error():
    """It failed encoding with "'FleqProgram' object has no attribute 'memory'"."""
    from vm.isa import FLEQ
    from vm.runtime.executor import TransformerExecutor
    executor = TransformerExecutor(geometry_for(assemble(".data\nx: 1\n.code\nhalt\n", "x.sq")))
    with pytest.raises(InputError, match="the SUBLEQ machine runs SUBLEQ programs, got Fleq"):
        executor.load([FLEQ.assemble_text(".data\na: 1.0\n.code\n halt\n")])
