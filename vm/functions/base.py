"""What a FLEQ function block is, and the context it is built in (Definition 1).

A block is a transformer sub-network with hardcoded weights that computes
C = f(A, B) inside its own scratch columns: A in the first d columns, B in
the next d, C in the next d, then any extra columns the block needs. Every
block of a machine runs on every pass; the machine writes only the selected
block's C to memory.

Blocks are built against a `BlockContext` that keeps them inside their own
columns, exactly:

- every ReLU unit a block adds gets the block's gate offset field (0 in the
  block's columns, -GATE_BIG elsewhere) added to its argument, so it is off
  outside the block whatever other columns hold;
- every attention head gets the same field as a key component, so a block's
  queries only ever see the block's own keys;
- heads write only the block's private rows; the result reaches the shared
  `res` rows through `emit_result`, whose units also carry the d_h x d_w
  result mask of the instruction.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from vm.common.errors import InputError
from vm.common.limits import is_whole_number
from vm.common.signatures import Shape
from vm.blocks.ffn import FeedForwardBuilder, Form, form_sum
from vm.transformer.layout import Layout
from vm.transformer.weights import HeadWeights

BOUND_DTYPES = ("float32", "float64")
"""The dtypes a block's bound is documented for: the ones the machine runs in."""


def _checked_dtype(bound: Callable[..., float]) -> Callable[..., float]:
    """`bound` refusing a dtype it has no bound for: 'float16' gave 0.0 (add, inv) or a
    KeyError (mul, matmul), and 0.0 reads as "exact"."""
    @functools.wraps(bound)
    def checked(self: "FunctionBlock", dtype: str) -> float:
        if dtype not in BOUND_DTYPES:
            raise InputError(f"{self.name}: error bounds are for dtype "
                             f"{' or '.join(BOUND_DTYPES)}, got {dtype!r}")
        return bound(self, dtype)
    return checked


BLOCK_SIZED = ("extra_columns", "private_fields", "constant_fields", "depth")
"""The methods that take the block size d (`_checked_block_size`)."""


def _checked_block_size(method: Callable) -> Callable:
    """`method` refusing a block size d that is no whole number from 1: d = 1.5 gave 4.25
    extra columns, -1 or None a depth, and None failed in some blocks with a TypeError."""
    @functools.wraps(method)
    def checked(self: "FunctionBlock", d: int, *args: Any) -> Any:
        if not is_whole_number(d) or d < 1:
            raise InputError(f"{self.name}: the block size d must be a whole number, at "
                             f"least 1, got {d!r:.40}")
        return method(self, d, *args)
    return checked


def _is_shape(shape: object) -> bool:
    """Whether `shape` is (rows, columns), each a whole number from 1."""
    return (isinstance(shape, tuple) and len(shape) == 2
            and all(is_whole_number(size) and size >= 1 for size in shape))


def _checked_shapes(output_shape: Callable) -> Callable:
    """`output_shape` refusing operand shapes that are no (rows, columns) of whole numbers
    from 1 (b may be None for a one-operand block): (-1, 2) gave a result of -1 rows, (0, 0)
    one of none, and None failed with "'NoneType' object is not subscriptable", as b = None
    did for add. A ValueError, as every refused shape is (the assembler places it in the
    source)."""
    @functools.wraps(output_shape)
    def checked(self: "FunctionBlock", a: Shape, b: Shape | None) -> Shape:
        for name, shape in (("a", a), ("b", b)):
            if not (_is_shape(shape) or name == "b" and shape is None and self.arity == 1):
                raise ValueError(f"{self.name}: operand shape {name} must be (rows, columns), "
                                 f"whole numbers from 1, got {shape!r:.40}")
        return output_shape(self, a, b)
    return checked


EXACT_INTEGERS = 2.0 ** 53
"""Integer operands must be below this in magnitude: float64 holds every such integer."""


def _operand(block: "FunctionBlock", name: str, value: object) -> np.ndarray:
    """Operand `name` of `block.reference` as a float64 array, or an error naming the
    block. A float64 matrix, what the FLEQ reference interpreter passes at every step, costs
    three attribute tests (the full check made its steps about 10 % slower). Other numbers
    are computed in float64 too: mul of two int64 2^40 gave 0 (the product wrapped) and of
    two float32 1e30 gave inf; integers from 2^53 on, which float64 would round, are
    refused."""
    if (type(value) is np.ndarray and value.dtype.char == "d" and value.ndim == 2
            and value.size):
        return value
    array = _real_numbers(value)
    if array is None or array.ndim != 2 or array.size == 0:
        given = (f"an array of dtype {value.dtype} and shape {value.shape}"
                 if isinstance(value, np.ndarray) else f"{value!r:.40}")
        error = TypeError if array is None else ValueError
        raise error(f"{block.name}.reference: operand {name} must be a nonempty 2-D array of "
                    f"real numbers, got {given}")
    as_float = array.astype(np.float64)
    if array.dtype.kind in "iu" and np.abs(as_float).max() >= EXACT_INTEGERS:
        raise ValueError(f"{block.name}.reference: operand {name} has an integer of magnitude "
                         f"2^53 or more, which float64 cannot hold exactly; pass it as a float")
    return as_float


def _checked_operands(reference: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """`reference` refusing operands it has no meaning for, in words naming the block: 'x'
    or None failed inside numpy, True was added as 1, and add of a 2x2 and a 3x3 raised
    numpy's broadcast error. Operands are nonempty 2-D arrays (or nested lists) of real
    numbers, of shapes `output_shape` takes; one-operand blocks ignore b, as the machine
    does."""
    @functools.wraps(reference)
    def checked(self: "FunctionBlock", a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        a = _operand(self, "a", a)
        b = _operand(self, "b", b) if self.arity == 2 else None
        # output_shape unwrapped: an array's shape is (rows, columns) already, and
        # `_checked_shapes` costs 3 us a call, ten times add's own reference
        shape_of = type(self).output_shape
        shape_of = getattr(shape_of, "__wrapped__", shape_of)
        try:
            shape_of(self, a.shape, None if b is None else b.shape)
        except ValueError as error:
            raise ValueError(f"{self.name}.reference: {error}") from None
        return reference(self, a, b)
    return checked


GATE_BIG = float(2 ** 60)
"""Offset that switches a unit off: larger than any value a block can hold, and exact
to add to 0 in float32 and float64."""
MOVE_TEMPERATURE = 800.0
"""Temperature of heads that move data. Off-match weights are below e^(-800) and
underflow to exactly 0 in float64 (and float32), so moved reals arrive bit-exact."""


@dataclass(frozen=True)
class Parameter:
    """A tunable constant of a block, with its documented default and meaning."""

    name: str
    default: float
    doc: str


def _real_numbers(values: object) -> np.ndarray | None:
    """`values` as an array of integers or floats, or None where it is no such thing: a
    string, None, a bool, a complex number, a ragged nested list."""
    try:
        array = np.asarray(values)
    except (TypeError, ValueError):  # ragged nested lists
        return None
    return array if array.dtype.kind in "iuf" else None


@dataclass(frozen=True)
class Domain:
    """Where a block's error bound holds (operands and, for scalars, values)."""

    description: str
    low: float = -np.inf
    high: float = np.inf
    exclude_low: float | None = None
    exclude_high: float | None = None
    applies_to: str = "operands"
    """What low/high/exclude bound: "operands" (every entry of A and B) or "result"."""
    widen: str | None = None
    """The `--param` setting that widens the domain, named in domain errors."""

    def __post_init__(self) -> None:
        """Refuse what is no domain, naming the field: low > high or a NaN end held no
        value, and an exclude_low without an exclude_high failed inside `contains`."""
        if not isinstance(self.description, str) or not self.description:
            raise ValueError(f"Domain: the description must be a nonempty string, got "
                             f"{self.description!r:.40}")
        ends = {"low": self.low, "high": self.high, "exclude_low": self.exclude_low,
                "exclude_high": self.exclude_high}
        for name, end in ends.items():
            if end is None and name.startswith("exclude"):
                continue
            if isinstance(end, bool) or not isinstance(end, numbers.Real) or math.isnan(end):
                raise ValueError(f"Domain: {name} must be a real number, got {end!r:.40}")
        if not self.low <= self.high:
            raise ValueError(f"Domain: low must be at most high, got {self.low!r} > "
                             f"{self.high!r}")
        if (self.exclude_low is None) != (self.exclude_high is None):
            raise ValueError("Domain: exclude_low and exclude_high come together (the open "
                             "interval between them is left out)")
        if self.exclude_low is not None and not self.exclude_low <= self.exclude_high:
            raise ValueError(f"Domain: exclude_low must be at most exclude_high, got "
                             f"{self.exclude_low!r} > {self.exclude_high!r}")
        if self.applies_to not in ("operands", "result"):
            raise ValueError(f"Domain: applies_to must be 'operands' or 'result', got "
                             f"{self.applies_to!r:.40}")

    def explained(self) -> str:
        """The description, with how to widen the domain where a parameter can."""
        return self.description + (f" (widen it with {self.widen})" if self.widen else "")

    def contains(self, values: np.ndarray | float) -> bool:
        """True when every entry is inside (NaN is inside no domain). What is no number is
        refused: 'x' failed inside numpy, None was taken as NaN and True as 1. A float64
        array, as FLEQ runs pass every step, costs one dtype test."""
        if not (isinstance(values, np.ndarray) and values.dtype.char == "d"):
            array = _real_numbers(values)
            if array is None:
                raise TypeError(f"Domain.contains: values must be a number or an array of "
                                f"numbers, got {values!r:.40}")
            values = np.asarray(array, dtype=float)
        inside = (values >= self.low) & (values <= self.high)
        if self.exclude_low is not None:
            inside &= ~((values > self.exclude_low) & (values < self.exclude_high))
        return bool(inside.all())

    def contains_interval(self, low: float, high: float) -> bool:
        """True when every value in [low, high] is inside (no excluded gap crossed). Ends
        that are no numbers, NaN, or low > high are refused: [2, 1] answered True."""
        for end in (low, high):
            if isinstance(end, bool) or not isinstance(end, numbers.Real):
                raise TypeError(f"Domain.contains_interval: the ends must be real numbers, "
                                f"got {end!r:.40}")
        if not low <= high:  # NaN too
            raise ValueError(f"Domain.contains_interval: an interval needs low <= high and no NaN "
                             f"end, got [{low}, {high}]")
        if not self.contains(np.array([low, high])):
            return False
        return self.exclude_low is None or not (low < self.exclude_high and
                                                high > self.exclude_low)



def _parameter_value(value: object) -> float | None:
    """`value` as a float, or None where it is no number: None and [1] raised float()'s
    TypeError, True was taken as 1, and 'abc' said only "could not convert string to
    float", naming no parameter."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, np.number)):
        return None
    try:
        return float(value)
    except ValueError:
        return None


class FunctionBlock:
    """Base of every FLEQ function block; subclasses fill in the construction."""

    name: str = ""
    arity: int = 2
    summary: str = ""
    lemma: str = ""
    parameters: tuple[Parameter, ...] = ()
    integer_preserving: bool = False
    """True when integer operands give an integer result (counters may use the block)."""
    float32_values: dict[str, float] = {}
    """Parameter defaults float32 runs use instead (`vm.functions.dtype_parameters`)."""
    integer_result: bool = False
    """True when the result is an integer whatever the (real) operands, on the block's domain:
    a counter may hold it and a branch test it, which turns a real decision into control
    flow (relu_prime: x > 0)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("error_bound", "relative_error_bound"):
            if name in cls.__dict__:
                setattr(cls, name, _checked_dtype(cls.__dict__[name]))
        for name in BLOCK_SIZED:
            if name in cls.__dict__:
                setattr(cls, name, _checked_block_size(cls.__dict__[name]))
        if "output_shape" in cls.__dict__:
            cls.output_shape = _checked_shapes(cls.__dict__["output_shape"])
        if "reference" in cls.__dict__:
            cls.reference = _checked_operands(cls.__dict__["reference"])

    def __init__(self, **values: float) -> None:
        known = {p.name: p.default for p in self.parameters}
        unknown = set(values) - set(known)
        if unknown:
            raise ValueError(f"{self.name} has no parameter {sorted(unknown)[0]!r}; "
                             f"parameters: {', '.join(sorted(known)) or 'none'}")
        for key, value in values.items():  # inv.high = inf divided by zero in the bound
            number = _parameter_value(value)
            if number is None:
                raise ValueError(f"{self.name}.{key} must be a number, got {value!r}")
            if not math.isfinite(number):
                raise ValueError(f"{self.name}.{key} must be a finite number, got {value}")
        self.values = {**known, **{k: float(v) for k, v in values.items()}}

    # -- identity (weights depend on the name and the parameter values) -----------
    @property
    def key(self) -> tuple:
        return (self.name, tuple(sorted(self.values.items())))

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v:g}" for k, v in sorted(self.values.items()))
        return f"{self.name}({shown})"

    # -- what the assembler needs ---------------------------------------------------
    def output_shape(self, a: Shape, b: Shape | None) -> Shape:
        """Result shape for operand shapes, or ValueError with a readable reason."""
        raise NotImplementedError

    def reference(self, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        """The exact function in numpy, on the operands' true shapes."""
        raise NotImplementedError

    def domain(self) -> Domain:
        return Domain("all reals")

    def error_bound(self, dtype: str) -> float:
        """Absolute part of the documented error bound on `domain()` (module docstring of
        `bound_at`)."""
        raise NotImplementedError

    @_checked_dtype
    def relative_error_bound(self, dtype: str) -> float:
        """Relative part of the documented error bound (0 for purely absolute bounds)."""
        return 0.0

    def bound_at(self, dtype: str, result: np.ndarray | float) -> np.ndarray | float:
        """The documented bound on |transformer - exact| where the exact result is `result`:
        error_bound + relative_error_bound * |result| (asserted by tests on the domain); inf
        where the result is infinite, which has no finite bound (an absolute one was NaN)."""
        size = self._magnitude(result)
        with np.errstate(invalid="ignore"):  # 0 * inf
            bound = self.error_bound(dtype) + self.relative_error_bound(dtype) * size
        if np.isinf(size).any():
            return np.where(np.isinf(size), np.inf, bound)[()]
        return bound

    def _magnitude(self, result: np.ndarray | float) -> np.ndarray | float:
        """|result| for `bound_at`, refusing what is no number, and NaN, whose bound was NaN
        (which no error exceeds)."""
        if _real_numbers(result) is None:  # '1' failed with a UFuncTypeError in np.abs
            raise InputError(f"{self.name}.bound_at: result must be a number or an array of "
                             f"numbers, got {result!r:.40}")
        size = np.abs(result)
        if np.isnan(size).any():
            raise InputError(f"{self.name}.bound_at: result is NaN, which has no error bound")
        return size

    # -- what the machine builder needs -----------------------------------------------
    @_checked_block_size
    def extra_columns(self, d: int) -> int:
        """Columns beyond the 3d of A, B and C."""
        return 0

    @_checked_block_size
    def private_fields(self, d: int) -> list[tuple[str, int]]:
        """Rows of the residual stream only this block uses: (name, size)."""
        return []

    @_checked_block_size
    def constant_fields(self, d: int) -> dict[str, np.ndarray]:
        """Values of private constant fields in the block's columns: name -> (size, width)."""
        return {}

    @_checked_block_size
    def depth(self, d: int) -> int:
        """Number of transformer layers the block needs."""
        raise NotImplementedError

    def build(self, ctx: "BlockContext") -> None:
        """Add the block's heads and ReLU units to the context's layers."""
        raise NotImplementedError


@dataclass
class BlockLayer:
    """What one block contributes to one machine layer."""

    heads: list[HeadWeights] = field(default_factory=list)
    ffn: FeedForwardBuilder | None = None


class BlockContext:
    """A block's view of the FLEQ machine while it is being built.

    Field names a block may use: its private fields by the names it declared
    (`ctx.field("x")`), and the shared ones: `rd` (operand values in A and B
    columns), `res` (the result, write through `emit_result`), `one`, `isA`,
    `isB`, `isC` (role indicators), `kone` (one-hot of a column's index k
    within its operand), and the gate offsets `gA`, `gB`, `gC` (0 in A, B or C
    columns of any block, -GATE_BIG elsewhere).
    """

    def __init__(self, block: FunctionBlock, index: int, d: int, layout: Layout,
                 columns: range, layers: list[BlockLayer]) -> None:
        self.block, self.index, self.d, self.layout = block, index, d, layout
        self.columns, self.layers = columns, layers
        self.gate = layout.row(f"gblock{index}")

    def field(self, name: str) -> str:
        return f"b{self.index}.{name}"

    def row(self, name: str, index: int = 0) -> int:
        shared = name in ("rd", "res", "one", "isA", "isB", "isC", "kone", "gA", "gB", "gC",
                          "resmask")
        return self.layout.row(name if shared else self.field(name), index)

    def rows(self, name: str) -> range:
        shared = name in ("rd", "res", "kone", "resmask")
        span = self.layout[name if shared else self.field(name)]
        return range(span.start, span.stop)

    # -- ReLU units -----------------------------------------------------------------
    def ffn(self, layer: int) -> "GatedFeedForward":
        entry = self.layers[layer]
        if entry.ffn is None:
            entry.ffn = FeedForwardBuilder(self.layout)
        return GatedFeedForward(entry.ffn, self.gate)

    def emit_result(self, layer: int, row: int, form: Form) -> None:
        """res[row] += form in the block's C columns, masked by the instruction's d_h x d_w
        (units carry the `resmask` offset of that row): exact pass-through, 0 outside."""
        ffn = self.ffn(layer)
        mask = self.layout.row("resmask", row)
        target = self.layout.row("res", row)
        ffn.relu_into(form_sum(form, {mask: 1.0}), target, 1.0)
        ffn.relu_into(form_sum({r: -c for r, c in form.items()}, {mask: 1.0}), target, -1.0)

    # -- attention ------------------------------------------------------------------
    def add_head(self, layer: int, queries: dict[int, np.ndarray], keys: dict[int, np.ndarray],
                 values: dict[tuple[int, int], float], lam: float, role: str) -> None:
        """A head confined to the block: queries/keys as {source row: vector over dims},
        values as {(target row, source row): coefficient}; the block gate is added as one
        more key dimension (query 1, key = gate offset)."""
        dims = len(next(iter(queries.values())))
        rows = self.layout.rows
        Q, K = np.zeros((dims + 1, rows)), np.zeros((dims + 1, rows))
        for row, vector in queries.items():
            Q[:dims, row] += vector
        for row, vector in keys.items():
            K[:dims, row] += vector
        Q[dims, self.layout.row("one")] = 1.0
        K[dims, self.gate] = 1.0
        V = np.zeros((rows, rows))
        for (target, source), coefficient in values.items():
            V[target, source] += coefficient
        self.layers[layer].heads.append(
            HeadWeights(Q, K, V, lam, f"{self.block.name}: {role}"))


class GatedFeedForward:
    """A FeedForwardBuilder whose every unit also reads the block's gate offset."""

    def __init__(self, ffn: FeedForwardBuilder, gate: int) -> None:
        self.inner, self.gate = ffn, gate

    def unit(self, form: Form, bias: float = 0.0) -> int:
        return self.inner.unit(form_sum(form, {self.gate: 1.0}), bias)

    def emit(self, unit: int, row: int, coefficient: float) -> None:
        self.inner.emit(unit, row, coefficient)

    def relu_into(self, form: Form, row: int, coefficient: float, bias: float = 0.0) -> None:
        self.emit(self.unit(form, bias), row, coefficient)

    def copy(self, source: int, target: int, gate: int | None = None, sign: float = 1.0) -> None:
        """target += sign * source exactly, optionally also gated by an offset row."""
        extra = {gate: 1.0} if gate is not None else {}
        self.relu_into({source: 1.0, **extra}, target, sign)
        self.relu_into({source: -1.0, **extra}, target, -sign)


REGISTRY: dict[str, Callable[..., FunctionBlock]] = {}


def register(block: type[FunctionBlock]) -> type[FunctionBlock]:
    """Class decorator: make the block available to programs by its name."""
    if block.name in REGISTRY:
        raise ValueError(f"function block {block.name!r} registered twice")
    REGISTRY[block.name] = block
    return block
