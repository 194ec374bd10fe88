"""`vm.functions`: a block made or asked with a wrong argument says so, naming it."""

from __future__ import annotations

import numpy as np
import pytest

from vm.common.errors import InputError
from vm.functions import REGISTRY, make_block
from vm.functions.base import Domain
from vm.tools.block_errors import shape_pairs


@pytest.mark.parametrize("name", sorted(REGISTRY))
@pytest.mark.parametrize("dtype", ["float16", None, "bfloat16"])
def test_every_bound_refuses_a_dtype_it_is_not_documented_for(name, dtype):
    """'float16' gave 0.0, which reads as exact, for add and inv, and a KeyError for mul."""
    block = make_block(name)
    for bound in (block.error_bound, block.relative_error_bound,
                  lambda dtype: block.bound_at(dtype, 1.0)):
        with pytest.raises(InputError, match="error bounds are for dtype float32 or float64"):
            bound(dtype)


@pytest.mark.parametrize("value", [None, [1], True, "abc"])
def test_a_parameter_that_is_not_a_number_is_an_input_error(value):
    """None and [1] raised float()'s TypeError; True was taken as 1; 'abc' said only "could
    not convert string to float", naming no parameter."""
    with pytest.raises(InputError, match="inv.steps must be a number"):
        make_block("inv", steps=value)


@pytest.mark.parametrize("name, listed", [("mul", "anchor, scale, span"), ("add", "none")])
def test_an_unknown_parameter_names_the_block_s_parameters_as_words(name, listed):
    """They were a Python list: "parameters: ['anchor', 'scale', 'span']"."""
    with pytest.raises(InputError) as caught:
        make_block(name, bogus=1)
    assert str(caught.value) == f"{name} has no parameter 'bogus'; parameters: {listed}"


def test_bound_at_refuses_a_result_that_is_no_number():
    """'1' failed with numpy's UFuncTypeError inside np.abs."""
    block = make_block("sqrt")
    with pytest.raises(InputError, match="sqrt.bound_at: result must be a number"):
        block.bound_at("float64", "1")
    assert block.bound_at("float64", 1.0) == block.bound_at("float64", np.ones(2))[0]


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_bound_at_refuses_nan_and_answers_inf_for_an_infinite_result(name):
    """NaN answered a NaN bound, which no error exceeds; an infinite result answered NaN
    (absolute bounds: 0 * inf) or, for the attention oracle, its finite domain-wide bound."""
    block = make_block(name)
    for result in (np.nan, np.array([1.0, np.nan])):
        with pytest.raises(InputError, match=f"{name}.bound_at: result is NaN"):
            block.bound_at("float64", result)
    assert np.all(block.bound_at("float64", -np.inf) == np.inf)
    bounds = block.bound_at("float64", np.array([1.0, np.inf]))
    assert np.isfinite(bounds[0]) and bounds[1] == np.inf


@pytest.mark.parametrize("d", [1.5, 0, -1, None, True])
def test_every_block_refuses_a_block_size_that_is_no_whole_number_from_1(d):
    """hadamard's extra_columns(1.5) was 4.25 columns, depth(-1) or depth(None) a layer
    count, and some blocks failed on None with a TypeError."""
    for name in REGISTRY:
        block = make_block(name)
        for method in (block.depth, block.extra_columns, block.private_fields,
                       block.constant_fields):
            with pytest.raises(InputError, match="the block size d must be a whole number"):
                method(d)
        assert block.depth(np.int64(2)) >= 1 and block.extra_columns(2) >= 0


@pytest.mark.parametrize("a, b", [((-1, 2), (2, 2)), ((0, 0), (0, 0)), (None, None),
                                  ((1, 1), (1.5, 1)), ([1, 1], None)])
def test_every_block_refuses_operand_shapes_that_are_no_rows_and_columns(a, b):
    """add's output_shape((-1, 2), (2, 2)) answered (-1, 2), (0, 0) a shape of nothing, and
    output_shape(None, None) failed with "'NoneType' object is not subscriptable"."""
    for name in REGISTRY:
        block = make_block(name)
        with pytest.raises(ValueError, match="operand shape . must be \\(rows, columns\\)"):
            block.output_shape(a, b)
    assert make_block("add").output_shape((2, 1), (2, 1)) == (2, 1)


@pytest.mark.parametrize("name", sorted(n for n in REGISTRY if make_block(n).arity == 2))
def test_a_two_operand_block_refuses_output_shape_without_b(name):
    """add's output_shape((1, 1), None) failed with "'NoneType' object is not subscriptable"
    while it formatted its own message."""
    with pytest.raises(ValueError, match=f"^{name}: operand shape b must be \\(rows, columns"):
        make_block(name).output_shape((1, 1), None)


@pytest.mark.parametrize("arguments, message", [
    (("float16",), "dtype must be one of float32, float64"),
    ((None,), "dtype must be one of float32, float64"),
    (("float32", "mul"), "functions must be a list of block names"),
    (("float32", None), "functions must be a list of block names"),
    (("float64", ["nope"]), "unknown function 'nope'")])
def test_dtype_parameters_refuse_a_dtype_or_names_they_have_no_parameters_for(arguments,
                                                                             message):
    """'float16' or None answered float64's {} (no float32 parameters, silently), 'mul' read
    as the names 'm', 'u', 'l' and unknown names gave {}, None failed with a TypeError."""
    from vm.functions import dtype_parameters
    with pytest.raises(InputError, match=message):
        dtype_parameters(*arguments)
    assert dtype_parameters("float32", ["mul"]) == {"mul": {"scale": 0.005}}


GAPPED = Domain("gapped", -1.0, 1.0, exclude_low=-0.1, exclude_high=0.1)


@pytest.mark.parametrize("values", ["x", None, True, [1, "a"], [[1.0], [1.0, 2.0]], 1j])
def test_domain_contains_refuses_what_is_no_number(values):
    """'x' failed inside numpy ("could not convert string to float"), None was taken as NaN
    (outside) and True as 1 (inside)."""
    with pytest.raises(TypeError, match="Domain.contains: values must be a number"):
        GAPPED.contains(values)


@pytest.mark.parametrize("values, inside", [
    (np.array([0.5, -1.0]), True), (np.array([0.5], dtype=np.float32), True),
    (np.int64(1), True), ([0.5, 2.0], False), (0.0, False), (np.nan, False),
    (np.array([0.5, np.nan]), False)])
def test_domain_contains_answers_for_every_kind_of_number(values, inside):
    assert GAPPED.contains(values) is inside


@pytest.mark.parametrize("low, high", [(0.5, 0.2), (np.nan, 0.5), (0.2, np.nan)])
def test_domain_contains_interval_refuses_an_interval_that_is_none(low, high):
    """[0.5, 0.2] (low > high) answered True, as if every value in it were inside."""
    with pytest.raises(ValueError, match="an interval needs low <= high and no NaN end"):
        GAPPED.contains_interval(low, high)


@pytest.mark.parametrize("end", ["a", None, True])
def test_domain_contains_interval_refuses_ends_that_are_no_numbers(end):
    for low, high in ((end, 0.5), (0.2, end)):
        with pytest.raises(TypeError, match="the ends must be real numbers"):
            GAPPED.contains_interval(low, high)


@pytest.mark.parametrize("low, high", [(0.2, 0.5), (-0.5, 0.5), (-np.inf, -0.5), (0.5, 0.5),
                                       (-0.5, -0.2)])
def test_domain_contains_interval_answers_for_a_real_interval(low, high):
    """Inside only when both ends are and the interval does not cross the excluded gap."""
    expected = (-1.0 <= low and high <= 1.0) and (high <= -0.1 or low >= 0.1)
    assert GAPPED.contains_interval(low, high) is expected


def operands_for(name: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Operands of the first shapes the block takes at d = 2."""
    a, b = shape_pairs(make_block(name), 2)[0]
    return np.full(a, 0.5), None if b is None else np.full(b, 0.5)


@pytest.mark.parametrize("name", sorted(REGISTRY))
@pytest.mark.parametrize("value", ["x", None, True, np.array([[True]]),
                                   np.ones((1, 1), complex), np.array([["1"]])], ids=repr)
def test_reference_refuses_an_operand_that_is_no_array_of_real_numbers(name, value):
    """reference('x', None) and reference(None, None) failed inside numpy, True was taken as
    1 and a bool array as 0s and 1s, naming no block."""
    block = make_block(name)
    a, b = operands_for(name)
    calls = [("a", lambda: block.reference(value, b))]
    if block.arity == 2:
        calls.append(("b", lambda: block.reference(a, value)))
    for operand, call in calls:
        with pytest.raises(TypeError, match=f"^{name}.reference: operand {operand} must be a "
                           "nonempty 2-D array of real numbers"):
            call()


@pytest.mark.parametrize("name", sorted(REGISTRY))
@pytest.mark.parametrize("shape", [(4,), (), (0, 2), (1, 1, 1)], ids=str)
def test_reference_refuses_an_operand_that_is_no_nonempty_matrix(name, shape):
    """A 1-D array gave a result of the wrong shape (transpose: the array itself) or failed
    inside numpy; an empty one an empty result."""
    with pytest.raises(ValueError, match=f"^{name}.reference: operand a must be a nonempty "
                       f"2-D array of real numbers, got an array of dtype float64 and shape"):
        make_block(name).reference(np.ones(shape), operands_for(name)[1])


@pytest.mark.parametrize("name", sorted(n for n in REGISTRY if make_block(n).arity == 2))
def test_reference_refuses_operand_shapes_as_output_shape_does(name):
    """add of a 2x3 and a 5x7 raised numpy's "could not be broadcast", naming no block;
    scale of two 2x2 took b[0, 0] as the scalar."""
    block = make_block(name)
    a, b = np.ones((2, 3)), np.ones((5, 7))
    with pytest.raises(ValueError) as refused:
        block.output_shape(a.shape, b.shape)
    with pytest.raises(ValueError) as caught:
        block.reference(a, b)
    assert str(caught.value) == f"{name}.reference: {refused.value}"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_reference_takes_nested_lists_and_integers_as_the_arrays_they_are(name):
    block = make_block(name)
    a, b = operands_for(name)
    want = block.reference(a, b)
    listed = block.reference(a.tolist(), None if b is None else b.tolist())
    np.testing.assert_array_equal(listed, want)
    ones = block.reference(np.ones(a.shape, int), None if b is None else np.ones(b.shape, int))
    np.testing.assert_array_equal(ones, block.reference(np.ones(a.shape),
                                                        None if b is None else np.ones(b.shape)))
    if block.arity == 1:  # b is ignored, as the machine ignores it
        np.testing.assert_array_equal(block.reference(a, "unused"), want)


@pytest.mark.parametrize("a, b, expected", [
    (np.array([[2 ** 40]], dtype=np.int64), np.array([[2 ** 40]], dtype=np.int64), 2.0 ** 80),
    (np.array([[1e30]], dtype=np.float32), np.array([[1e30]], dtype=np.float32),
     float(np.float32(1e30)) ** 2),
    ([[3]], [[-5]], -15.0)])
def test_reference_computes_in_float64_whatever_numbers_it_is_given(a, b, expected):
    """int64 2^40 x 2^40 wrapped to 0 and float32 1e30 x 1e30 overflowed to inf."""
    result = make_block("mul").reference(a, b)
    assert result.dtype == np.float64
    assert result[0, 0] == expected


@pytest.mark.parametrize("integer", [2 ** 53, -(2 ** 53), 2 ** 63 - 1])
def test_reference_refuses_integers_float64_cannot_hold(integer):
    with pytest.raises(ValueError, match=r"^add.reference: operand b has an integer of "
                       r"magnitude 2\^53 or more"):
        make_block("add").reference([[1.0]], np.array([[integer]], dtype=np.int64))


@pytest.mark.parametrize("fields, refused", [
    (dict(low=2.0, high=1.0), "low must be at most high"),
    (dict(low=float("nan")), "low must be a real number"),
    (dict(high="1"), "high must be a real number"),
    (dict(low=True), "low must be a real number"),
    (dict(exclude_low=0.0), "exclude_low and exclude_high come together"),
    (dict(exclude_low=0.5, exclude_high=0.1), "exclude_low must be at most exclude_high"),
    (dict(applies_to="entries"), "applies_to must be 'operands' or 'result'"),
    (dict(description=""), "the description must be a nonempty string")])
def test_a_domain_that_holds_nothing_or_cannot_answer_is_refused(fields, refused):
    """Domain(low=2, high=1) answered False for every value and an exclude_low alone failed
    inside `contains` with numpy's comparison of None."""
    with pytest.raises(ValueError, match=f"^Domain: {refused}"):
        Domain(**{"description": "d", **fields})


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_block_s_own_domain_passes_the_domain_checks(name):
    """The checks above refuse no domain a block gives (each is built through them)."""
    domain = make_block(name).domain()
    assert domain.low <= domain.high
