"""Assembler for the FLEQ dialect (.fleq): source text -> FleqProgram.

Checks function names against the registry, arity, operand shapes against
each block's signature, that integer counters only receive integer results,
and that branches test integer counters; every error names file:line:col.

Conveniences the machine lacks are lowered here: a numeric literal operand becomes a
read-only constant cell (`_const_2.0` for a real, `_const_3` for a counter), `c = a`
becomes the exact `add(a, @zero)`, and `if n <= k goto L` (k an integer literal or a
counter, not 0) becomes `_cmp = sub(n, k)` followed by the instruction branching on
`_cmp <= 0`: one step more, and the comparison sees n before the instruction writes.
A comparison of reals, `if x <= y goto L` or `if x <= 0 goto L` with x, y real scalars or
a real literal, becomes `_diff = sub(x, y)` and `_cmp = relu_prime(_diff)` (exactly 1 when
x - y is above relu_prime's ramp, exactly 0 when x <= y; docs/fleq_machine.md), two steps.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Callable

import lark
import numpy as np

from assembler.diagnostics import (SourceError, as_read_from_file, check_progress,
                                  check_source_text, check_token_count, error_at, int_literal,
                                  parse_located, read_source, shown_integer, source_lines)
from assembler.fleq_program import (ONE_CELL, RESERVED, ZERO_CELL, FleqInstruction, FleqProgram,
                                    Variable, padded)
from assembler.program import SourcePos
from vm.common.errors import InputError
from vm.common.geometry import MAX_COLUMNS
from vm.common.signatures import (MAGNITUDE, MAGNITUDE_BITS, Catalogue, Operand, Routine,
                                  RoutineCall)

MAX_BLOCK = 16
COMPARE_CELL = "_cmp"
"""The counter cell an `if n <= k` comparison writes n - k into."""
DIFFERENCE_CELL = "_diff"
"""The real cell a comparison of reals writes x - y into."""
LABEL_LINE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\s*:")
"""A code line holding only a label (it takes no column)."""
SMALLEST_NORMAL = float(np.finfo(np.float64).tiny)
"""Below it a double is subnormal, and the machine's passes flush subnormals to 0."""


@lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    grammar = resources.files("assembler").joinpath("fleq.lark").read_text()
    return lark.Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=True)


@lru_cache(maxsize=1)
def _number_patterns() -> tuple[re.Pattern, ...]:
    parser = _parser()
    return tuple(re.compile(parser.get_terminal(name).pattern.to_regexp())
                 for name in ("SIGNED_FLOAT", "SIGNED_INT"))


def is_number(text: str) -> bool:
    """Whether `text` is a number as a .fleq source writes one (the grammar's SIGNED_FLOAT or
    SIGNED_INT): what other readers of typed values (the REPL's `set`) accept."""
    return any(pattern.fullmatch(text) for pattern in _number_patterns())


UNDERFLOW = (f"the number is too small for float64 (it rounds to 0, or lies below the "
             f"smallest normal number {SMALLEST_NORMAL:.4g}, which the machine flushes to 0)")
"""Why a typed value `underflows` refuses is refused (calc's --set, --param)."""


def underflows(text: str, value: float) -> bool:
    """Whether the decimal `text`, read as `value`, is nonzero and below float64's smallest
    normal number: 1e-400 reads as 0 and 1e-310 is subnormal, and the machine flushes both
    to 0, so sources, the calculator and the REPL refuse them."""
    return (abs(value) < SMALLEST_NORMAL
            and re.search(r"[1-9]", re.split(r"[eE]", text)[0]) is not None)


@dataclass
class _Statement:
    """A code statement waiting for pass 2: its tree, the labels naming it, and the
    source it came from (the file, or a routine's expansion)."""

    node: lark.Tree
    labels: list[lark.Token]
    file: str
    text: str
    index: int = 0


class _FleqAssembler:
    def __init__(self, text: str, file: str, d: int | None,
                 parameters: dict[str, dict[str, float]], functions: list[str] | None,
                 defaults: dict[str, dict[str, float]], catalogue: Catalogue,
                 progress: Callable[[int], None] | None = None) -> None:
        self.text, self.file, self.catalogue = text, file, catalogue
        check_progress(progress)
        self.progress, self.lines_parsed = progress, 0
        if d is not None and (isinstance(d, bool) or not isinstance(d, numbers.Integral)):
            raise InputError(f"block size d must be an integer, got {d!r:.40}")  # 1.5: TypeError
        if d is not None and not 1 <= d <= MAX_BLOCK:  # 100000 allocated d x d cells first
            raise InputError(f"block size d must be between 1 and {MAX_BLOCK}, got "
                             f"{shown_integer(d)}")
        self.d_override, self.cli_parameters = d, parameters
        self.default_parameters = defaults
        self.forced_functions = functions or []
        self.declared_d: int | None = None
        self.function_parameters: dict[str, dict[str, float]] = {}
        self.header_lines: dict[str, int] = {}
        self.variables: dict[str, Variable] = {}
        self.values: dict[str, np.ndarray] = {}
        self.labels: dict[str, int] = {}
        self.label_pos: dict[str, SourcePos] = {}
        self.statements: list[_Statement] = []
        self.pending_labels: list[lark.Token] = []
        self.source = (file, text)
        self.expansions = 0
        self.constants: dict[tuple[bool, float], Variable] = {}

    # -- errors ---------------------------------------------------------------------
    def error(self, message: str, where: lark.Token | lark.Tree) -> SourceError:
        file, text = self.source
        return error_at(message, file, text, where)

    def pos(self, where: lark.Token | lark.Tree) -> SourcePos:
        line = where.line if isinstance(where, lark.Token) else where.meta.line
        column = where.column if isinstance(where, lark.Token) else where.meta.column
        return SourcePos(self.source[0], line, column)

    # -- pass 1 ---------------------------------------------------------------------
    def collect(self, tree: lark.Tree) -> None:
        for node in tree.children:
            if node.data == "header":
                self.header(node.children[0])
            elif node.data == "data_section":
                for line in node.children[1:]:
                    self.data_line(line)
            else:
                for line in node.children[1:]:
                    self.code_line(line)

    def header(self, node: lark.Tree) -> None:
        key = ".d" if node.data == "block_size" else f".function {node.children[1]}"
        if key in self.header_lines:
            raise self.error(f"{key} given twice (first on line {self.header_lines[key]})",
                             node.children[0])
        self.header_lines[key] = node.children[0].line
        if node.data == "block_size":
            value = int_literal(node.children[1], 10, self.file, self.text, node.children[1])
            if not 1 <= value <= MAX_BLOCK:
                raise self.error(f"block size must be between 1 and {MAX_BLOCK}",
                                 node.children[1])
            self.declared_d = value
            return
        name = node.children[1]
        if name in self.catalogue.routines:
            raise self.error(_not_a_block(self.catalogue, str(name)), name)
        if name not in self.catalogue.blocks:
            raise self.error(f"unknown function '{name}' (registered: "
                             f"{self.catalogue.block_names()})", name)
        values = {}
        for parameter in node.children[2:]:
            key, literal = parameter.children
            if str(key) in values:
                raise self.error(f"{name}.{key} is given twice", key)
            values[str(key)] = self.number(literal)
            if not np.isfinite(values[str(key)]):  # as --param: no block takes inf
                raise self.error("a parameter must be a finite number", literal)
        try:
            self.catalogue.make_block(str(name), **values)
        except InputError as error:
            # at the `key=value` that fails alone (an unknown key, a value out of range), at
            # the directive when only the values together fail: it was always the directive
            where = next((parameter for parameter in node.children[2:]
                          if not self.block_takes(str(name), parameter)), node)
            raise self.error(str(error), where) from None
        self.function_parameters[str(name)] = values

    def block_takes(self, name: str, parameter: lark.Tree) -> bool:
        """Whether block `name` takes the one setting `parameter` (key=value) alone."""
        key, literal = parameter.children
        try:
            self.catalogue.make_block(name, **{str(key): self.number(literal)})
        except InputError:
            return False
        return True

    def parameters(self, name: str) -> dict[str, float]:
        """Block `name`'s parameters as the run builds it: the defaults, then the file's
        `.function` header, then --param. Operand shapes are checked against this block:
        against the header's alone, `--param attention_oracle.dim=5` passed a dim=4 program
        and the run failed in a traceback."""
        return {**self.default_parameters.get(name, {}), **self.function_parameters.get(name, {}),
                **self.cli_parameters.get(name, {})}

    def check_new_name(self, name: lark.Token) -> None:
        first = (self.variables[name].pos if name in self.variables
                 else self.label_pos.get(name))
        if first is not None:
            raise self.error(f"duplicate definition of '{name}' (first defined at {first})",
                             name)
        generated = self.source[0] != self.file
        if name.upper() == "EOF" or (name.startswith("_") and not generated):
            raise self.error(f"'{name}' is reserved", name)
        if name in self.catalogue.blocks:
            raise self.error(f"'{name}' is a function name", name)

    def number(self, node: lark.Tree) -> float:
        """A literal's value; one too small for a normal double (1e-310, or 1e-400, which
        Python reads as 0) is an error: the machine flushes such values to 0."""
        text = str(node.children[0])
        value = float(text)
        if underflows(text, value):
            raise self.error(f"{text} is below {SMALLEST_NORMAL:.3g}, the smallest normal "
                             "double: the machine flushes it to 0 (write 0)", node)
        return value

    def literal_value(self, node: lark.Tree) -> float:
        """A value's literal (a cell's, an entry's, an operand's), refused at itself when
        float64 cannot hold it or the machine cannot keep it exact: a matrix's 1e999 was
        marked under the whole matrix."""
        value = self.number(node)
        if not np.isfinite(value):  # the grammar has no inf: a literal past float64's range
            raise self.error("the number is too large for float64 (at most "
                             f"{np.finfo(np.float64).max:.4g})", node)
        self.check_magnitude(np.array([value]), node)
        return value

    def data_line(self, line: lark.Tree) -> None:
        name, value = line.children
        self.check_new_name(name)
        integer = False
        if value.data == "scalar":
            literal = value.children[0]
            array = np.array([[self.literal_value(literal)]])
            integer = literal.data == "integer"
        elif value.data == "zeros":
            array = np.zeros(self.shape(value.children[1]))
        elif value.data == "vector":
            entries = value.children[1]
            self.fitting_shape(len(entries.children), 1, entries)
            array = np.array([[self.literal_value(n)] for n in entries.children])
        else:
            rows = [[self.literal_value(n) for n in row.children] for row in
                    value.children[2].children]
            shape = self.shape(value.children[1])
            if len(rows) != shape[0] or any(len(row) != shape[1] for row in rows):
                raise self.error(f"matrix literal does not have the declared shape "
                                 f"{shape[0]}x{shape[1]}", value.children[2])
            array = np.array(rows)
        cell = len(RESERVED) + len(self.variables)
        self.variables[str(name)] = Variable(str(name), cell, array.shape, integer,
                                             self.pos(name))
        self.values[str(name)] = array

    def shape(self, token: lark.Token) -> tuple[int, int]:
        rows, columns = (int_literal(part, 10, self.file, self.text, token)
                         for part in token.lower().split("x"))
        if rows < 1 or columns < 1:
            raise self.error("shapes need at least one row and one column", token)
        return self.fitting_shape(rows, columns, token)

    def fitting_shape(self, rows: int, columns: int, where: lark.Token | lark.Tree
                      ) -> tuple[int, int]:
        """(rows, columns), or a located error when no block size holds a variable of that
        shape (a declared shape, or the length of a .vector literal)."""
        if rows > MAX_BLOCK or columns > MAX_BLOCK:
            raise self.error(f"a variable is at most {MAX_BLOCK}x{MAX_BLOCK} (the largest block "
                             f"size), got {rows}x{columns}", where)
        return rows, columns

    def code_line(self, line: lark.Tree) -> None:
        for node in line.children:
            if node is None:
                continue
            if node.data == "label":
                name = node.children[0]
                self.check_new_name(name)
                self.label_pos[str(name)] = self.pos(name)
                self.pending_labels.append(name)
            else:
                self.statements.append(_Statement(node, self.pending_labels, *self.source))
                self.pending_labels = []

    # -- routines ---------------------------------------------------------------------
    def expand_routines(self) -> None:
        """Replace every routine call by the statements of its expansion.

        Labels after the file's last statement name its end: they are set aside first, or
        an expansion's code lines took them as the labels of its first instruction (a
        `goto end` ran the routine). Labels that name no generated instruction (an empty
        expansion, or labels after an expansion's last line) pass to the next statement."""
        expanded: list[_Statement] = []
        trailing, carried = self.pending_labels, []
        for statement in self.statements:
            statement.labels = carried + statement.labels
            node = statement.node
            function = (node.children[0].children[1] if node.data == "assign" and
                        node.children[0].data == "assignment" else None)
            if function is None or function not in self.catalogue.routines:
                expanded.extend(self.lower_comparison(statement))
                carried = []
                self.check_columns(expanded, statement)
                continue
            self.source = (statement.file, statement.text)
            self.pending_labels = []
            generated = self.expansion(self.catalogue.routines[str(function)], node)
            carried = self.pending_labels
            if generated:
                generated[0].labels = statement.labels + generated[0].labels
            else:
                carried = statement.labels + carried
            # an expansion's `if n <= 3 goto L` needs its comparison step as the file's
            # does: without it the branch tested a _cmp no step had written
            expanded.extend(lowered for generated_statement in generated
                            for lowered in self.lower_comparison(generated_statement))
            self.check_columns(expanded, statement)
        self.pending_labels = carried + trailing
        self.statements = expanded
        self.source = (self.file, self.text)
        for index, statement in enumerate(self.statements):
            statement.index = index
            for label in statement.labels:
                self.labels[str(label)] = index
        for label in self.pending_labels:
            self.labels[str(label)] = len(self.statements)

    def check_columns(self, statements: list[_Statement], statement: _Statement) -> None:
        """Refuse, at `statement`, the first statement whose expansion or comparison steps take
        the program past the machine's columns (at least one for each instruction and cell):
        here, not after minutes of expanding the 170,000 routine calls a 4 MiB source holds,
        nor by the geometry without a line for 40,000 comparisons of reals (3 steps each)."""
        if len(statements) + len(RESERVED) + len(self.variables) > MAX_COLUMNS:
            self.source = (statement.file, statement.text)
            raise self.error(f"the routine calls and comparisons expand to more than "
                             f"{MAX_COLUMNS} instructions and memory cells, the machine's "
                             "columns", statement.node)

    def expansion(self, routine: Routine, node: lark.Tree) -> list[_Statement]:
        assignment, branch = node.children
        if branch is not None:
            raise self.error(f"'{routine.name}' is a routine; it cannot branch on the same line",
                             branch)
        destination, _, *arguments = assignment.children
        arguments = [a for a in arguments if a is not None]
        positional = [a for a in arguments if a.data == "positional"]
        for argument in [destination] + [a.children[0] for a in positional]:
            if self.literal(argument) is not None:
                raise self.error(f"'{routine.name}' is a routine: its operands must be "
                                 "variables (define the value in .data)", argument)
        keywords, given = {}, {}
        for argument in arguments:
            if argument.data != "keyword":
                continue
            key = str(argument.children[0])
            if key in given:
                raise self.error(f"'{routine.name}': {key} is given twice", argument)
            if key not in routine.keywords:
                raise self.error(f"'{routine.name}' has no argument '{key}' (it takes "
                                 f"{', '.join(routine.keywords) or 'none'})", argument)
            keywords[key] = self.number(argument.children[1])
            given[key] = argument
        if len(positional) != routine.arity:
            raise self.error(f"'{routine.name}' takes {routine.arity} operand"
                             f"{'s' if routine.arity != 1 else ''}, got {len(positional)}",
                             assignment)
        for argument in positional:
            # an expansion may write its destination while it still reads the operands:
            # `A = inverse(A)` overwrote A with X_0 and then read it as A, a wrong inverse
            if argument.children[0].children[0] == destination.children[0]:
                raise self.error(f"'{destination.children[0]}' is both the destination and an "
                                 f"operand of the routine '{routine.name}', whose expansion "
                                 "may write the destination before it has read the operands; "
                                 "write the result to another variable", argument)
        operand = lambda v: Operand(v.name, v.shape, v.integer)  # noqa: E731
        self.expansions += 1
        call = RoutineCall(operand(self.operand(destination)),
                           tuple(operand(self.operand(a.children[0])) for a in positional),
                           {**routine.keywords, **keywords},
                           f"_{routine.name}{self.expansions}")
        try:
            result = routine.expand(call)
        except ValueError as error:
            # a routine's KeywordError names the keyword: point at it when the user gave it;
            # its OperandError holds one of the call's operands: point at that one
            culprit = getattr(error, "operand", None)
            where = next((node for operand, node in zip((call.destination, *call.arguments),
                                                        (destination, *positional))
                          if operand is culprit),
                         given.get(getattr(error, "keyword", ""), assignment))
            raise self.error(f"{routine.name}: {error}", where) from None
        # after the routine's own checks, so `iters=1e27` (or 1e999, inf) gets the keyword's
        # range rather than the machine's; a keyword the routine lets through must still fit
        for key, argument in given.items():
            if not abs(keywords[key]) <= MAGNITUDE:
                raise self.error(f"{routine.name}: {key} must lie within |x| <= "
                                 f"2^{MAGNITUDE_BITS} (about {MAGNITUDE:.3g}), the magnitudes "
                                 f"the machine keeps exact, got {keywords[key]:g}", argument)
        origin, caller = self.pos(assignment), self.source
        text = ".data\n" + "\n".join(result.data) + "\n.code\n" + "\n".join(result.code) + "\n"
        file = f"<{routine.name} expanded at {origin}>"
        tree = self.parse(text, file)
        self.source = (file, text)
        before = len(self.statements)
        for section in tree.children:
            if section.data == "data_section":
                for line in section.children[1:]:
                    self.data_line(line)
        saved, self.statements = self.statements, []
        for section in tree.children:
            if section.data == "code_section":
                for line in section.children[1:]:
                    self.code_line(line)
        generated, self.statements = self.statements, saved
        assert len(self.statements) == before
        self.source = caller
        self.check_aliases(routine, positional, generated)
        return generated

    def check_aliases(self, routine: Routine, positional: list[lark.Tree],
                      generated: list[_Statement]) -> None:
        """Refuse a variable passed as two operands of a routine whose expansion writes it:
        `l = sgd_step(W1, W2, W2, y)` updated W2 in place and then read the new W2 as the
        input x, a wrong W1 without a word."""
        written = {str(statement.node.children[0].children[0].children[0])
                   for statement in generated if statement.node.data == "assign"}
        seen: set[str] = set()
        for argument in positional:
            name = str(argument.children[0].children[0])
            if name in seen and name in written:
                raise self.error(f"'{name}' is passed as two operands of the routine "
                                 f"'{routine.name}', whose expansion updates it in place "
                                 "and may then read the new value as the other; pass a copy",
                                 argument)
            seen.add(name)

    # -- pass 2 ---------------------------------------------------------------------
    def variable(self, token: lark.Token) -> Variable:
        if token in self.variables:
            return self.variables[token]
        # label_pos, not labels: branches are lowered before the labels get their indices
        if token in self.label_pos:
            raise self.error(f"'{token}' is a label, not a variable", token)
        raise self.error(f"undefined variable '{token}'", token)

    @staticmethod
    def literal(node: lark.Tree) -> lark.Tree | None:
        """The number an `operand` node holds, or None for a name."""
        child = node.children[0]
        return child if isinstance(child, lark.Tree) else None

    def operand(self, node: lark.Tree) -> Variable:
        """The variable an operand names, or the constant cell of its literal."""
        literal = self.literal(node)
        return self.variable(node.children[0]) if literal is None else self.constant(literal)

    def check_magnitude(self, values: np.ndarray, where: lark.Tree) -> None:
        if np.abs(values).max() > MAGNITUDE:
            raise self.error(f"values must lie within |x| <= 2^{MAGNITUDE_BITS} (about "
                             f"{MAGNITUDE:.3g}), the magnitudes the machine keeps exact "
                             f"(docs/fleq_machine.md)", where)

    def constant(self, literal: lark.Tree) -> Variable:
        """The read-only cell holding `literal` (one per distinct value and kind)."""
        integer = literal.data == "integer"
        value = self.literal_value(literal)
        key = (integer, value)
        if key not in self.constants:
            name = f"_const_{int(value) if integer else repr(value)}"
            cell = len(RESERVED) + len(self.variables)
            self.variables[name] = Variable(name, cell, (1, 1), integer, self.pos(literal))
            self.values[name] = np.array([[value]])
            self.constants[key] = self.variables[name]
        return self.constants[key]

    def destination(self, node: lark.Tree) -> Variable:
        """The variable an instruction writes: not a literal, not a constant."""
        literal = self.literal(node)
        if literal is not None:
            raise self.error(f"cannot assign to the literal {literal.children[0]}; the "
                             "destination must be a variable", literal)
        variable = self.variable(node.children[0])
        if variable in self.constants.values() or variable.name in (COMPARE_CELL,
                                                                      DIFFERENCE_CELL):
            raise self.error(f"'{variable.name}' is the assembler's own read-only cell", node)
        return variable

    def compare_cell(self) -> Variable:
        """The counter cell comparisons write n - k into (allocated on first use)."""
        return self.hidden_cell(COMPARE_CELL, integer=True)

    def hidden_cell(self, name: str, integer: bool) -> Variable:
        """One of the assembler's own 1x1 cells, allocated on first use."""
        if name not in self.variables:
            cell = len(RESERVED) + len(self.variables)
            self.variables[name] = Variable(name, cell, (1, 1), integer)
            self.values[name] = np.zeros((1, 1))
        return self.variables[name]

    def is_real_comparison(self, branch: lark.Tree) -> bool:
        """Whether a branch compares reals: a real variable on either side or a real literal
        on the right."""
        left, right = branch.children[1], branch.children[2]
        if self.literal(left) is not None:
            return False
        literal = self.literal(right)
        right_real = (literal.data != "integer" if literal is not None
                      else not self.variable(right.children[0]).integer)
        return not self.variable(left.children[0]).integer or right_real

    @staticmethod
    def branch_of(node: lark.Tree) -> lark.Tree | None:
        if node.data == "branch":
            return node
        return node.children[1] if node.data == "assign" else None

    def is_zero_bound(self, branch: lark.Tree) -> bool:
        literal = self.literal(branch.children[2])
        return literal is not None and literal.data == "integer" and self.number(literal) == 0

    def lower_comparison(self, statement: _Statement) -> list[_Statement]:
        """`if n <= k goto L` with k not the literal 0: a `compare` statement (n - k into
        the comparison cell) first, carrying the labels, then the statement itself."""
        branch = self.branch_of(statement.node)
        if branch is None:
            return [statement]
        self.source = (statement.file, statement.text)
        if self.is_real_comparison(branch):
            kinds = ["difference", "decision"]
        elif self.is_zero_bound(branch):
            return [statement]
        else:
            kinds = ["compare"]
        lowered = [_Statement(lark.Tree(kind, [branch], branch.meta), [], statement.file,
                              statement.text) for kind in kinds]
        lowered[0].labels, statement.labels = statement.labels, []
        return lowered + [statement]

    def target(self, token: lark.Token) -> int:
        if token in self.labels:
            return self.labels[token]
        if token.upper() == "EOF":
            return len(self.statements)
        if token in self.variables:
            raise self.error(f"'{token}' is a variable, not a label", token)
        raise self.error(f"undefined label '{token}'", token)

    def tested(self, node: lark.Tree) -> tuple[Variable, Variable | None]:
        """The counter a branch tests and what it is compared with (None for 0)."""
        left, right = node.children[1], node.children[2]
        if self.literal(left) is not None:
            raise self.error("a branch tests a counter variable, not a literal (write "
                             "`if n <= k goto L`)", left)
        flag = self.variable(left.children[0])
        if not flag.integer:
            raise self.error(f"'{flag.name}' is not an integer counter; a branch tests one",
                             left)
        literal = self.literal(right)
        if literal is not None:
            if literal.data != "integer":
                raise self.error(f"a counter is compared with an integer; {literal.children[0]}"
                                 " is a real literal", literal)
            return flag, None if self.number(literal) == 0 else self.constant(literal)
        bound = self.variable(right.children[0])
        if not bound.integer:
            raise self.error(f"'{bound.name}' is not an integer counter; `if n <= k` compares "
                             "two counters, or a counter and an integer literal", right)
        return flag, bound

    def branch(self, node: lark.Tree | None) -> tuple[int, int]:
        """(flag cell, target) of an `if n <= k goto L`, or never-branch. k other than 0
        tests the comparison cell its `compare` statement wrote just before."""
        if node is None:
            return ONE_CELL, 0
        if self.is_real_comparison(node):
            return self.compare_cell().cell, self.target(node.children[4])
        flag, bound = self.tested(node)
        cell = flag.cell if bound is None else self.compare_cell().cell
        return cell, self.target(node.children[4])

    def comparison(self, node: lark.Tree, index: int, pos: SourcePos) -> FleqInstruction:
        """`_cmp = sub(n, k)` for the branch `node`, falling through to the next statement."""
        flag, bound = self.tested(node)
        result = self.compare_cell()
        text = f"{result.name} = sub({flag.name}, {bound.name})"
        return FleqInstruction("sub", flag.cell, bound.cell, result.cell, ONE_CELL, index + 1,
                               (1, 1), (1, 1), (1, 1), pos, text)

    def difference(self, node: lark.Tree, index: int, pos: SourcePos) -> FleqInstruction:
        """`_diff = sub(x, y)` for a comparison of reals (y the zero cell for `x <= 0`)."""
        left, right = node.children[1], node.children[2]
        if self.literal(left) is not None:
            raise self.error("a branch tests a variable, not a literal", left)
        x = self.variable(left.children[0])
        y = (None if self.is_zero_bound(node) else self.operand(right))
        for side, variable in ((left, x), (right, y)):
            if variable is not None and variable.shape != (1, 1):
                raise self.error(f"a comparison takes scalars; '{variable.name}' is "
                                 f"{variable.shape[0]}x{variable.shape[1]}", side)
        result = self.hidden_cell(DIFFERENCE_CELL, False)
        text = f"{result.name} = sub({x.name}, {y.name if y else '0'})"
        return FleqInstruction("sub", x.cell, y.cell if y else ZERO_CELL, result.cell,
                               ONE_CELL, index + 1, (1, 1), (1, 1), (1, 1), pos, text)

    def instruction(self, statement: _Statement) -> FleqInstruction:
        node, index = statement.node, statement.index
        self.source = (statement.file, statement.text)
        text = self.source_text(node)
        pos = self.pos(node)
        if node.data == "halt":
            return FleqInstruction(None, 0, 0, 0, ZERO_CELL, len(self.statements), (1, 1),
                                   pos=pos, text=text)
        if node.data == "goto":
            return FleqInstruction(None, 0, 0, 0, ZERO_CELL, self.target(node.children[1]),
                                   (1, 1), pos=pos, text=text)
        if node.data == "compare":
            return self.comparison(node.children[0], index, pos)
        if node.data == "difference":
            return self.difference(node.children[0], index, pos)
        if node.data == "decision":
            difference, result = self.hidden_cell(DIFFERENCE_CELL, False), self.compare_cell()
            return FleqInstruction("relu_prime", difference.cell, ZERO_CELL, result.cell,
                                   ONE_CELL, index + 1, (1, 1), (1, 1), (1, 1), pos,
                                   f"{result.name} = relu_prime({difference.name})")
        if node.data == "branch":
            flag, target = self.branch(node)
            return FleqInstruction(None, 0, 0, 0, flag, target, (1, 1), pos=pos, text=text)
        assignment, branch = node.children
        flag, target = self.branch(branch)
        if flag == ONE_CELL:
            target = index + 1
        result = self.destination(assignment.children[0])
        if branch is not None:
            for side in branch.children[1:3]:
                if self.literal(side) is None and side.children[0] == result.name:
                    raise self.error(f"'{result.name}' is written by this instruction and "
                                     "tested by its branch; the machine reads the flag before "
                                     "the write, so test it on the next line", side)
        if assignment.data == "copy":
            return self.copy(assignment, result, flag, target, pos, text)
        destination, function, *arguments = assignment.children
        arguments = [a for a in arguments if a is not None]
        if function not in self.catalogue.blocks:
            raise self.error(f"unknown function '{function}' (registered: "
                             f"{self.catalogue.block_names()})", function)
        block = self.catalogue.make_block(str(function), **self.parameters(str(function)))
        if any(a.data == "keyword" for a in arguments):
            keyword = next(a for a in arguments if a.data == "keyword")
            raise self.error(f"'{function}' is a function block and takes no keyword "
                             "arguments", keyword)
        if len(arguments) != block.arity:
            raise self.error(f"'{function}' takes {block.arity} operand"
                             f"{'s' if block.arity != 1 else ''}, got {len(arguments)}",
                             assignment)
        operands = [self.operand(a.children[0]) for a in arguments]
        if result.integer and block.integer_preserving:
            for argument in arguments:
                literal = self.literal(argument.children[0])
                if literal is not None and literal.data != "integer":
                    raise self.error(f"'{result.name}' is an integer counter; write the "
                                     f"integer literal {literal.children[0]} without a "
                                     "fraction or exponent", literal)
        a = operands[0]
        b = operands[1] if block.arity == 2 else None
        try:
            shape = block.output_shape(a.shape, b.shape if b else None)
        except ValueError as error:
            raise self.error(f"{function}: {error}", assignment) from None
        if shape != result.shape:
            raise self.error(f"{function}(...) is {shape[0]}x{shape[1]} but '{result.name}' is "
                             f"{result.shape[0]}x{result.shape[1]}", destination)
        if result.integer and not (block.integer_result or (
                block.integer_preserving and all(o.integer for o in operands))):
            raise self.error(f"'{result.name}' is an integer counter; {function} of these "
                             "operands gives a real number", destination)
        return FleqInstruction(str(function), a.cell, b.cell if b else ZERO_CELL, result.cell,
                               flag, target, shape, a.shape, b.shape if b else (1, 1), pos, text)

    def copy(self, node: lark.Tree, result: Variable, flag: int, target: int,
             pos: SourcePos, text: str) -> FleqInstruction:
        """`c = a` as `add(a, @zero)`: the zero cell is zero in every entry, so the sum is
        exact whatever a's shape, and add keeps counters integer."""
        source = self.operand(node.children[1])
        literal = self.literal(node.children[1])
        if source.shape != result.shape:
            raise self.error(f"'{source.name}' is {source.shape[0]}x{source.shape[1]} but "
                             f"'{result.name}' is {result.shape[0]}x{result.shape[1]}",
                             node.children[0])
        if result.integer and not source.integer:
            what = (f"{literal.children[0]} is a real literal" if literal is not None
                    else f"'{source.name}' is real")
            raise self.error(f"'{result.name}' is an integer counter; {what}", node.children[1])
        return FleqInstruction("add", source.cell, ZERO_CELL, result.cell, flag, target,
                               source.shape, source.shape, source.shape, pos, text)

    def source_text(self, node: lark.Tree) -> str:
        line = _lines(self.source[1])[node.meta.line - 1]
        return line[node.meta.column - 1:node.meta.end_column - 1].strip()

    def check_line_count(self) -> None:
        """Refuse a source with more lines that take a column (a data line's cell or a
        statement) than the machine has columns before parsing it: lark took minutes over
        the 200,000 lines a 4 MiB source holds before the geometry refused them."""
        count = 0
        for number, line in enumerate(source_lines(self.text), start=1):
            line = re.split("[;#]", line, maxsplit=1)[0].strip()
            if line and not line.startswith(".") and not LABEL_LINE.fullmatch(line):
                count += 1
                if count + len(RESERVED) > MAX_COLUMNS:
                    raise SourceError(f"more than {MAX_COLUMNS - len(RESERVED)} data lines "
                                      f"and statements: the machine has {MAX_COLUMNS} columns",
                                      self.file, self.text, number, 1)

    def parse(self, text: str, file: str) -> lark.Tree:
        """`parse_fleq`, telling `progress` the lines parsed so far: the file's, then each
        routine call's expansion's (one call may expand to 37,000 lines)."""
        before = self.lines_parsed
        report = None if self.progress is None else (lambda line: self.progress(before + line))
        tree = parse_fleq(text, file, report)
        self.lines_parsed += text.count("\n")
        return tree

    def run(self) -> FleqProgram:
        check_parameters(self.catalogue, self.cli_parameters)  # before the blocks are built
        self.check_line_count()
        check_token_count(self.text, self.file)
        tree = self.parse(self.text, self.file)
        self.collect(tree)
        self.expand_routines()
        if not self.statements:
            raise SourceError("empty program: no instructions (a .code section with at least "
                              "one statement is needed)", self.file, self.text, 1, 1)
        instructions = [self.instruction(s) for s in self.statements]
        self.source = (self.file, self.text)
        largest = max((max(v.shape) for v in self.variables.values()), default=1)
        d = self.d_override or self.declared_d or largest
        if largest > d:
            widest = max(self.variables.values(), key=lambda v: max(v.shape))
            message = (f"'{widest.name}' is {widest.shape[0]}x{widest.shape[1]}, larger than "
                       f"the block size d={d}")
            if widest.pos is not None and widest.pos.file == self.file:
                raise SourceError(message, self.file, self.text, widest.pos.line,
                                  widest.pos.column, len(widest.name))
            raise InputError(f"{self.file}: {message}")
        used = {i.function for i in instructions if i.function} | set(self.forced_functions)
        functions = []
        for name in sorted(used):
            block = self.catalogue.make_block(name, **self.parameters(name))
            functions.append((name, tuple(sorted(block.values.items()))))
        cells = [padded(0.0, d), padded(1.0, d)] + \
            [padded(self.values[name], d) for name in self.variables]
        return FleqProgram(instructions, cells, dict(self.variables), dict(self.labels), d,
                           tuple(functions), self.file)


@lru_cache(maxsize=8)
def _lines(text: str) -> list[str]:
    """The lines of a source, split once (every instruction's text is cut from them)."""
    return source_lines(text)


EXPECTED_NAMES = {"NAME": "a name", "SIGNED_INT": "an integer", "SIGNED_FLOAT": "a real number",
                  "SHAPE": "a shape RxC", "_NEWLINE": "end of line", "$END": "end of file",
                  "BLOCK": "'.d'", "FUNCTION": "'.function'", "DATA": "'.data'",
                  "CODE": "'.code'", "MATRIX": "'.matrix'", "VECTOR": "'.vector'",
                  "ZEROS": "'.zeros'", "IF": "'if'", "GOTO": "'goto'", "HALT": "'halt'",
                  "EQUAL": "'='", "COLON": "':'", "COMMA": "','", "LSQB": "'['", "RSQB": "']'",
                  "LPAR": "'('", "RPAR": "')'", "__ANON_0": "'<='"}
"""How error messages name the grammar's terminals: a FLEQ parse error said only
"unexpected '.d'" (a header directive inside .data) where the .sq and .vsq ones say what
was expected."""


def parse_fleq(text: str, file: str, progress: Callable[[int], None] | None = None
               ) -> lark.Tree:
    """Parse `.fleq` source, turning lark's exceptions into located SourceErrors; `progress`
    hears of each line parsed."""
    return parse_located(_parser(), text, file,
                         ".d, .function, .data, .code, .matrix, .vector or .zeros",
                         EXPECTED_NAMES, progress)


def check_parameters(catalogue: Catalogue, parameters: dict[str, dict[str, float]]) -> None:
    """--param settings name registered blocks and their parameters, used or not. A
    setting the block refuses alone is named with its value ('inv.terms must be an integer
    in 1..512' said neither that --param gave it nor what it gave)."""
    for name, values in parameters.items():
        if name in catalogue.routines:
            raise InputError(f"--param {name}.{next(iter(values), '')}: "
                             f"{_not_a_block(catalogue, name)}")
        if name not in catalogue.blocks:
            raise InputError(f"--param {name}.{next(iter(values), '')}: unknown function "
                             f"'{name}' (registered: {catalogue.block_names()})")
        try:
            catalogue.make_block(name, **values)
        except InputError as error:  # at the one setting that fails alone, if one does
            for key, value in values.items():
                try:
                    catalogue.make_block(name, **{key: value})
                except InputError as alone:
                    raise InputError(f"--param {name}.{key}={_setting(value)}: {alone}") \
                        from None
            given = ", ".join(f"{name}.{key}={_setting(value)}" for key, value in values.items())
            raise InputError(f"--param {given}: {error}") from None


def _setting(value: object) -> str:
    """A parameter's value as a refusal names it: a number to 15 digits, anything else as
    Python writes it ('x' from the Python API failed in the message's own format)."""
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return f"{value:.15g}"
    return f"{value!r:.40}"


def _not_a_block(catalogue: Catalogue, routine: str) -> str:
    """Why a routine takes no block parameters and is no block to add: 'unknown function'
    (registered: ...) said that a routine the program calls did not exist."""
    keywords = "".join(f", {key}=..." for key in catalogue.routines[routine].keywords)
    return (f"'{routine}' is a routine, not a function block (its settings go in the call: "
            f"{routine}(...{keywords}))")


def _check_block_settings(settings: object, what: str) -> None:
    """InputError unless `settings` is None or {block name: {parameter: value}} with names
    as strings (the values are the blocks' to check): a list failed with an AttributeError,
    {'mul': 5} with a TypeError."""
    if settings is None:
        return
    if not isinstance(settings, dict) or not all(
            isinstance(name, str) and isinstance(values, dict)
            and all(isinstance(key, str) for key in values)
            for name, values in settings.items()):
        raise InputError(f"{what} must map block names to {{parameter: value}} dicts, got "
                         f"{settings!r:.60}")


def assemble_fleq(text: str, file: str = "<source>", *, catalogue: Catalogue,
                  d: int | None = None, parameters: dict[str, dict[str, float]] | None = None,
                  functions: list[str] | None = None,
                  defaults: dict[str, dict[str, float]] | None = None,
                  progress: Callable[[int], None] | None = None) -> FleqProgram:
    """Assemble FLEQ source against `catalogue` (the blocks and routines it may call; the
    FLEQ instruction set `vm.isa.FLEQ` passes the registered ones). `parameters` overrides
    block parameters ({name: {key: v}}); `defaults` sets them below the file's own
    `.function` headers (e.g. a dtype's eps); `functions` adds blocks the program does not
    call (to share weights with others); `progress` is called with the count of lines parsed,
    routine expansions included."""
    check_source_text(text)
    _check_block_settings(parameters, "parameters")
    _check_block_settings(defaults, "defaults")
    if functions is not None and (isinstance(functions, str) or not isinstance(
            functions, (list, tuple)) or not all(isinstance(n, str) for n in functions)):
        raise InputError(f"functions must be a list of block names, got {functions!r:.60}")
    for name in functions or []:
        if name in catalogue.routines:
            raise InputError(f"--functions {name}: {_not_a_block(catalogue, name)}")
        catalogue.make_block(name)
    return _FleqAssembler(as_read_from_file(text), file, d, parameters or {}, functions,
                          defaults or {}, catalogue, progress).run()


def assemble_fleq_file(path: str | Path, *, catalogue: Catalogue, **options) -> FleqProgram:
    text = read_source(path)
    return assemble_fleq(text, str(path), catalogue=catalogue, **options)
