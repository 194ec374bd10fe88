"""The calculator of Section 7: an arithmetic expression compiled to FLEQ and checked.

Every operator becomes one FLEQ instruction that calls a function block (add,
sub, mul, inv, sqrt, percentage), each intermediate in its own cell, so the
program reads like the paper's Algorithm 3. Division is mul after inv, except
`1/x` (inv alone) and `x/100` (percentage, Corollary 3).

The result comes with a bound: each block's documented error on its domain,
carried through the later operations by their Lipschitz constants over the
interval the operand can lie in. An operand whose interval leaves a block's
domain is reported with a caret, never computed on.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from assembler.diagnostics import SourceError
from assembler.fleq import UNDERFLOW, underflows
from assembler.expression import SOURCE_NAME, Name, Node, Number, Operation, parse_expression
from vm.isa import FLEQ
from assembler.fleq_program import FleqProgram
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.common.errors import InputError, RunFailure
from vm.common.signatures import MAGNITUDE, MAGNITUDE_BITS
from vm.runtime.compare import check_exact
from vm.runtime.executor import EngineConfig, run_transformer
from vm.machines.fleq.reference import run_fleq_reference
from vm.functions import REGISTRY, FunctionBlock, dtype_parameters, make_block
from vm.machines.fleq.machine import FleqMachine
from vm.routines import ROUTINES

KEYWORDS = {"if", "goto", "halt", "eof"}
GENERATED = re.compile(r"^[tk][0-9]+$")


@dataclass(frozen=True)
class Step:
    """One instruction of the compiled program: `destination = function(operands)`."""

    node: Node
    function: str
    destination: str
    operands: tuple[str, ...]


@dataclass
class Compiled:
    expression: str
    source: str
    """The FLEQ program text."""
    result: str
    """The cell that holds the expression's value."""
    steps: list[Step]
    leaves: dict[str, float] = field(default_factory=dict)
    """Every input and constant cell with its exact value."""


OVERFLOW = f"the number is too large for float64 (at most {np.finfo(np.float64).max:.4g})"




BEYOND = (f"values must lie within |x| <= 2^{MAGNITUDE_BITS} (about {MAGNITUDE:.3g}), the "
          f"magnitudes the machine keeps exact (docs/fleq_machine.md)")


class _Compiler:
    def __init__(self, expression: str, inputs: dict[str, float]) -> None:
        self.expression, self.inputs = expression, inputs
        self.data: dict[str, float] = {}
        self.constants: dict[float, str] = {}
        self.steps: list[Step] = []

    def error(self, message: str, node: Node) -> SourceError:
        return SourceError(message, SOURCE_NAME, self.expression, 1, node.column, node.width)

    def number(self, node: Number) -> str:
        """A literal's constant cell; a literal float64 cannot hold is refused at itself."""
        if not math.isfinite(node.value):
            raise self.error(OVERFLOW, node)
        text = self.expression[node.column - 1:node.column - 1 + node.width]
        if underflows(text, node.value):
            raise self.error(UNDERFLOW, node)
        if abs(node.value) > MAGNITUDE:  # at the literal, not in the generated program
            raise self.error(BEYOND, node)
        return self.constant(node.value)

    def constant(self, value: float) -> str:
        if value not in self.constants:
            self.constants[value] = f"k{len(self.constants) + 1}"
            self.data[self.constants[value]] = value
        return self.constants[value]

    def emit(self, node: Node, function: str, *operands: str) -> str:
        destination = f"t{len(self.steps) + 1}"
        self.steps.append(Step(node, function, destination, operands))
        return destination

    def cell(self, node: Node) -> str:
        if isinstance(node, Number):
            return self.number(node)
        if isinstance(node, Name):
            return self.name(node)
        assert isinstance(node, Operation)
        op, operands = node.op, node.operands
        if op == "div" and isinstance(operands[0], Number) and operands[0].value == 1:
            return self.emit(operands[1], "inv", self.cell(operands[1]))  # at the divisor
        if op == "div" and isinstance(operands[1], Number) and operands[1].value == 100:
            return self.emit(node, "percentage", self.cell(operands[0]))
        if op == "div":
            numerator = self.cell(operands[0])
            reciprocal = self.emit(operands[1], "inv", self.cell(operands[1]))
            return self.emit(node, "mul", numerator, reciprocal)
        if op == "neg":
            return self.emit(node, "sub", self.constant(0.0), self.cell(operands[0]))
        function = {"percent": "percentage"}.get(op, op)
        return self.emit(node, function, *(self.cell(o) for o in operands))

    def name(self, node: Name) -> str:
        name = node.name
        if (name.lower() in KEYWORDS or GENERATED.match(name) or name in REGISTRY
                or name in ROUTINES):
            raise self.error(f"'{name}' is a reserved name (a function, keyword, or a name "
                             f"like t1/k1 the calculator generates); rename the input", node)
        if name not in self.inputs:
            raise self.error(f"no value for '{name}' (give --set {name}=VALUE)", node)
        self.data[name] = self.inputs[name]
        return name

    def compile(self, tree: Node) -> Compiled:
        result = self.cell(tree)
        if not self.steps:
            result = self.emit(tree, "add", result, self.constant(0.0))
        data = [f"{name}: {value!r}" for name, value in self.data.items()]
        data += [f"{step.destination}: 0.0" for step in self.steps]
        code = [f"    {s.destination} = {s.function}({', '.join(s.operands)})" for s in self.steps]
        source = "\n".join([f"; ltvm calc: {self.expression}", ".data", *data, ".code", *code,
                            "    halt", ""])
        return Compiled(self.expression, source, result, self.steps, dict(self.data))


def compile_expression(expression: str, inputs: dict[str, float]) -> Compiled:
    """FLEQ source computing `expression`, each operator one block call. Through the Python
    API an expression that is no str, or inputs that are no {name: value} dict, failed with
    a TypeError (None, bytes) or named a tuple as an input (a list of pairs)."""
    if not isinstance(expression, str):
        raise InputError(f"the expression must be a str, got {type(expression).__name__}")
    if not isinstance(inputs, dict) or not all(isinstance(name, str) for name in inputs):
        raise InputError(f"the inputs must map names (str) to numbers, got {inputs!r:.60}")
    tree = parse_expression(expression)
    unused = sorted(set(inputs) - _names(tree))
    if unused:
        raise InputError(f"--set {unused[0]}: the expression has no input '{unused[0]}'")
    return _Compiler(expression, {name: input_value(name, value)
                                  for name, value in inputs.items()}).compile(tree)


def input_value(name: str, value: object) -> float:
    """An input as the float the program holds, or InputError: a numpy scalar was written
    into the program as `np.float32(2.5)`, True as `True`, 1e-320 computed on as 0 and 1e16
    refused inside the generated program, none of them where the user gave them."""
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
        raise InputError(f"--set {name}: expected a real number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int past 1.8e308
        raise InputError(f"--set {name}: the number is too large for float64") from None
    if not math.isfinite(number):
        raise InputError(f"--set {name}: the value must be finite, got {number}")
    if 0 < abs(number) < np.finfo(np.float64).tiny:
        raise InputError(f"--set {name}={number:g}: {UNDERFLOW}")
    if abs(number) > MAGNITUDE:
        raise InputError(f"--set {name}={number:g}: {BEYOND}")
    return number


def _names(node: Node) -> set[str]:
    if isinstance(node, Name):
        return {node.name}
    if isinstance(node, Operation):
        return set().union(*(_names(o) for o in node.operands))
    return set()


Propagation = Callable[[list[float], list[float]], float]
"""Bound on |f(x') - f(x)| for |x'_i - x_i| <= e_i, given exact operands x and bounds e."""


def _inv(x: list[float], e: list[float]) -> float:
    return e[0] / (abs(x[0]) * (abs(x[0]) - e[0]))


def _sqrt(x: list[float], e: list[float]) -> float:
    if x[0] <= 0:
        return math.sqrt(e[0])
    return min(math.sqrt(e[0]), e[0] / math.sqrt(x[0]))


PROPAGATION: dict[str, Propagation] = {
    "add": lambda x, e: e[0] + e[1],
    "sub": lambda x, e: e[0] + e[1],
    "mul": lambda x, e: abs(x[1]) * e[0] + abs(x[0]) * e[1] + e[0] * e[1],
    "inv": _inv,
    "sqrt": _sqrt,
    "percentage": lambda x, e: 0.01 * e[0],
}


@dataclass
class Calculation:
    compiled: Compiled
    program: FleqProgram
    dtype: str
    transformer: float
    exact: float
    bound: float
    steps: int

    @property
    def error(self) -> float:
        return abs(self.transformer - self.exact)

    @property
    def relative_error(self) -> float | None:
        """None when the exact value is 0, against which no error is relative (sqrt(0) gave
        the absolute error, 3.6e-14, under this name)."""
        return self.error / abs(self.exact) if self.exact else None

    @property
    def within_bound(self) -> bool:
        return self.error <= self.bound

    def as_dict(self) -> dict[str, object]:
        return {"expression": self.compiled.expression, "transformer": self.transformer,
                "exact": self.exact, "error": self.error,
                "relative_error": self.relative_error, "bound": self.bound,
                "within_bound": self.within_bound, "dtype": self.dtype, "steps": self.steps}


def error_bound(compiled: Compiled, blocks: dict[str, FunctionBlock], exact: dict[str, float],
                dtype: str) -> float:
    """Bound on the transformer's error in the result (module docstring); SourceError at the
    operator whose operand interval leaves its block's domain, or whose result leaves the
    machine's (2^50 + 2^50 came back at exit 0 'within the bound', where `ltvm run` of the
    same program reports that the bound does not hold)."""
    bounds = {name: _stored_rounding(value, dtype) for name, value in compiled.leaves.items()}
    for step in compiled.steps:
        block = blocks[step.function]
        x = [exact[name] for name in step.operands]
        e = [bounds[name] for name in step.operands]
        flushed = _flushed(step.function, x, exact[step.destination], dtype)
        if flushed is not None:
            raise SourceError(flushed, SOURCE_NAME, compiled.expression, 1, step.node.column,
                              step.node.width)
        if step.function == "inv" and x[0] == 0:  # inv's domain, 'in [0, 0]', said it
            raise SourceError("division by zero: the divisor is exactly 0", SOURCE_NAME,
                              compiled.expression, 1, step.node.column, step.node.width)
        domain = block.domain()
        if domain.applies_to == "operands":
            intervals = [(v - w, v + w) for v, w in zip(x, e)]
        else:
            spread = PROPAGATION[step.function](x, e)
            intervals = [(exact[step.destination] - spread, exact[step.destination] + spread)]
        if not all(domain.contains_interval(low, high) for low, high in intervals):
            shown = ", ".join(f"[{low:.6g}, {high:.6g}]" for low, high in intervals)
            raise SourceError(f"{step.function} is accurate only for {domain.explained()}; "
                              f"here its {domain.applies_to} can lie in {shown}", SOURCE_NAME,
                              compiled.expression, 1, step.node.column, step.node.width)
        if not abs(exact[step.destination]) <= MAGNITUDE:  # NaN too
            raise SourceError(f"the result here is {exact[step.destination]:.6g}: {BEYOND}",
                              SOURCE_NAME, compiled.expression, 1, step.node.column,
                              step.node.width)
        propagated = PROPAGATION[step.function](x, e)
        own = block.bound_at(dtype, abs(exact[step.destination]) + propagated)
        bounds[step.destination] = propagated + float(own)
    return bounds[compiled.result]


def _flushed(function: str, operands: list[float], result: float, dtype: str) -> str | None:
    """Why a step's exact values are ones the machine flushes to 0, as literals below the
    smallest normal number are refused: 1e-150*1e-150*1e-10 gave `exact: 1e-310` and a
    relative error of 4e297 at exit 0, and the blocks' bounds assume normal numbers. A
    nonzero value below it, or a product of nonzero operands that rounds to 0 (1e-200 *
    1e-200, the only block whose normal operands can underflow to 0); None otherwise."""
    tiny = float(np.finfo(dtype).tiny)
    below = (f"below the smallest normal {dtype} number {tiny:.4g}, which the machine "
             f"flushes to 0")
    for operand in operands:
        if 0 < abs(operand) < tiny:
            return f"an operand here is {operand:.6g}, {below}"
    if 0 < abs(result) < tiny:
        return f"the result here is {result:.6g}, {below}"
    if function == "mul" and result == 0 and 0 not in operands:
        return (f"the result here, {operands[0]:.6g} * {operands[1]:.6g}, rounds to 0: it "
                f"lies {below}")
    return None


def _stored_rounding(value: float, dtype: str) -> float:
    """Error of writing `value` into a punchcard of `dtype`."""
    return abs(float(np.dtype(dtype).type(value)) - value)


def calculate(expression: str, inputs: dict[str, float],
              parameters: dict[str, dict[str, float]] | None = None,
              config: EngineConfig = EngineConfig(),
              progress: Callable[[int], None] | None = None) -> Calculation:
    """Compile, run on the transformer and on the reference, and bound the difference;
    `progress` hears of every transformer step (and may stop the run: --max-seconds). The
    config must be an exact one: None failed on `.dtype`, and stochastic reads returned 6 for
    2 * 3 as 9e-166, outside a bound that holds only for exact reads."""
    check_exact(config, "calc")
    compiled = compile_expression(expression, inputs)
    dtype = config.dtype or FleqMachine.default_dtype
    program = FLEQ.assemble_text(compiled.source, "<calc>", parameters=parameters or {},
                            defaults=dtype_parameters(dtype))
    geometry = fleq_geometry_for(program)
    limit = len(program.instructions) + 1
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        blocks = {name: make_block(name, **dict(values)) for name, values in program.functions}
        reference = run_fleq_reference(program, limit)
        exact = {name: float(value)
                 for name, value in program.named_memory(reference.cells).items()}
        bound = error_bound(compiled, blocks, exact, dtype)
    if not bound <= MAGNITUDE:  # inf, NaN, or wider than every value the machine holds
        raise InputError(f"the blocks' error bound on these operands is {bound:.3g} (see the "
                         "--param values): no result they could promise, so none is computed")
    result = run_transformer(program, geometry, limit, config, progress)
    if not result.halted:  # a straight-line program: only values that are not numbers stop it
        raise RunFailure(f"the compiled program did not halt on the transformer within its "
                         f"{limit} instructions: its state is no longer numbers (see the "
                         "--param values)")
    transformer = float(program.named_memory(result.memory)[compiled.result])
    return Calculation(compiled, program, dtype, transformer, exact[compiled.result], bound,
                       result.steps)
