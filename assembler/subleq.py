"""Assembler for the SUBLEQ dialect (.sq): source text -> `Program`.

Two passes over the lark tree: the first lays out memory (reserved cells,
then data in source order) and numbers the instructions, so labels and data
names are known everywhere; the second resolves operands. Every error names
its file:line:col.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Callable

import lark

from assembler.diagnostics import (MAX_NESTING, SourceError, as_read_from_file,
                                  check_progress, check_source_text, check_token_count,
                                  check_word_size, deepest, error_at, int_literal, parse_located,
                                  read_source)
from assembler.program import (
    MINUS_ONE_CELL,
    RESERVED_NAMES,
    ZERO_CELL,
    Instruction,
    Program,
    SourcePos,
    Symbol,
    bits_needed,
    word_range,
)
from vm.common.errors import InputError
from vm.common.geometry import MAX_COLUMNS

DEFAULT_MIN_BITS = 8
"""Word size used when neither `.bits` nor `--bits` is given and literals fit."""
MAX_BITS = 64
STRUCTURE_DEPTH = 5
"""Levels of the parse tree above an expression (start, section, line, statement, list)."""
TOKENS_PER_COLUMN = 10
"""Tokens a .sq line may spend on each column it fills: `L1: subleq a, b, L2 ; why` is 10."""
MAX_SQ_TOKENS = TOKENS_PER_COLUMN * MAX_COLUMNS
"""The most tokens a .sq source may hold, 655,360: enough for a program of the largest
machine, every one of its 65,536 columns a labelled, commented three-operand instruction
(the assemblers' MAX_SOURCE_TOKENS, 100,000, held only 14,000 such lines). Measured on 2
shared cores: 65,529 labelled instructions (590,000 tokens) took 15 s of CPU and 470 MB;
hostile sources at this limit at most 17 s and 600 MB (unary minus chains, a tree node a
token), where a 4 MiB source of one-character tokens is refused by the count in 0.1 s."""
OPERAND_COUNTS = {"subleq": (2, 3), "goto": (1, 1), "halt": (0, 0)}


@lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    grammar = resources.files("assembler").joinpath("subleq.lark").read_text()
    return lark.Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=False)


@dataclass(frozen=True)
class _Value:
    """An evaluated expression: a number, a data address or an instruction index."""

    kind: str  # "number" | "data" | "label"
    value: int
    symbol: Symbol | None = None  # the data block an address points into


@dataclass
class _Constant:
    value: int
    pos: SourcePos
    width: int


class _Assembler:
    def __init__(self, text: str, file: str, bits: int | None,
                 progress: Callable[[int], None] | None = None) -> None:
        self.text, self.file, self.bits_override = text, file, bits
        check_progress(progress)
        self.progress = progress
        # lark counts lines by '\n' alone; splitlines() also splits at a form feed or
        # U+2028 in a comment, which gave later instructions another line's text
        self.lines = text.split("\n")
        self.constants: dict[str, _Constant] = {}
        self.symbols: dict[str, Symbol] = {}
        self.labels: dict[str, int] = {}
        self.label_pos: dict[str, SourcePos] = {}
        self.memory: list[int] = [0, -1]
        self.literals: list[tuple[int, lark.Token | lark.Tree]] = []
        self.declared_bits: int | None = None
        self.code: list[lark.Tree] = []
        self.definitions: dict[str, SourcePos] = {}  # every name defined, for messages

    # -- errors ---------------------------------------------------------------
    def error(self, message: str, where: lark.Token | lark.Tree) -> SourceError:
        return error_at(message, self.file, self.text, where)

    def pos(self, where: lark.Token | lark.Tree) -> SourcePos:
        if isinstance(where, lark.Token):
            return SourcePos(self.file, where.line, where.column)
        return SourcePos(self.file, where.meta.line, where.meta.column)

    # -- pass 1 ---------------------------------------------------------------
    def layout(self, tree: lark.Tree) -> None:
        for node in tree.children:
            if node.data == "header":
                self.directive(node.children[0])
            elif node.data == "data_section":
                for line in node.children[1:]:
                    self.data_line(line.children[0])
            else:
                for line in node.children[1:]:
                    self.code_line(line)

    def directive(self, node: lark.Tree) -> None:
        if node.data == "bits_directive":
            value = self.number(node.children[1])
            if not 2 <= value <= MAX_BITS:
                raise self.error(f"word size must be between 2 and {MAX_BITS} bits, got {value}",
                                 node.children[1])
            if self.declared_bits is not None:
                raise self.error("word size declared twice", node)
            self.declared_bits = value
        else:
            name = node.children[1]
            self.check_new_name(name)
            value = self.number(node.children[2])
            self.constants[str(name)] = _Constant(value, self.pos(name), len(name))

    def data_line(self, node: lark.Tree) -> None:
        if node.data in ("bits_directive", "const_directive"):
            self.directive(node)
            return
        name = node.children[0]
        self.check_new_name(name)
        if node.data == "cell":  # checked too: a file of cells was refused at its code
            self.check_room(1, node)
            values = [self.literal(node.children[1])]
        elif node.data == "array":
            values = [self.literal(expr) for expr in node.children[2:]]
            self.check_room(len(values), node)
        else:
            size_node = node.children[2]
            size = self.number(size_node)
            if size < 1:
                raise self.error(f"'.zero' needs a positive size, got {size}", size_node)
            self.check_room(size, size_node)
            values = [0] * size
        self.symbols[str(name)] = Symbol(str(name), len(self.memory), len(values), self.pos(name))
        self.memory.extend(values)

    def code_line(self, line: lark.Tree) -> None:
        for node in line.children:
            if node.data == "label":
                name = node.children[0]
                self.check_new_name(name)
                self.labels[str(name)] = len(self.code)
                self.label_pos[str(name)] = self.pos(name)
            else:
                self.check_room(1, node)
                self.code.append(node)

    def check_room(self, words: int, where: lark.Tree) -> None:
        """Refuse, where it happens, the first definition that takes the program past the
        columns a machine can have (scratch, memory, code and the EOF instruction)."""
        used = 1 + len(self.memory) + len(self.code) + 1
        if used + words > MAX_COLUMNS:
            raise self.error(f"the program would need more than {MAX_COLUMNS} columns "
                             f"({len(self.memory)} memory words and {len(self.code)} "
                             f"instructions so far, {words} more here)", where)

    def check_new_name(self, name: lark.Token) -> None:
        first = self.first_definition(name)
        if first is not None:
            raise self.error(f"duplicate definition of '{name}' (first defined at {first})", name)
        if name.upper() == "EOF":
            raise self.error("'EOF' is reserved for the end-of-program instruction", name)

    def first_definition(self, name: str) -> SourcePos | None:
        if name in self.symbols:
            return self.symbols[name].pos
        if name in self.constants:
            return self.constants[name].pos
        return self.label_pos.get(name)

    # -- expressions ----------------------------------------------------------
    def evaluate(self, node: lark.Tree) -> _Value:
        if node.data == "number":
            return _Value("number", parse_number(node.children[0], self.file, self.text))
        if node.data == "negate":
            inner = self.evaluate(node.children[1])
            if inner.kind != "number":
                raise self.error(f"cannot negate a {self.kind_name(inner)}", node)
            return _Value("number", -inner.value)
        if node.data == "name":
            return self.lookup(node.children[0])
        left, op, right = node.children
        a, b = self.evaluate(left), self.evaluate(right)
        sign = 1 if op == "+" else -1
        if a.kind == b.kind == "number":
            return _Value("number", a.value + sign * b.value)
        if b.kind == "number":
            return _Value(a.kind, a.value + sign * b.value, a.symbol)
        if a.kind == "number" and sign == 1:
            return _Value(b.kind, a.value + b.value, b.symbol)
        raise self.error(f"cannot combine a {self.kind_name(a)} and a {self.kind_name(b)} "
                         f"with '{op}'", node)

    def lookup(self, name: lark.Token) -> _Value:
        if name in self.constants:
            return _Value("number", self.constants[name].value)
        if name in self.symbols:
            symbol = self.symbols[name]
            return _Value("data", symbol.address, symbol)
        if name in self.labels:
            return _Value("label", self.labels[name])
        if name.upper() == "EOF":
            return _Value("label", len(self.code))
        later = self.definitions.get(str(name))
        if later is not None:  # 'undefined name' for a name the file defines misled
            where = ("used in its own definition" if later.line == name.line
                     else f"defined only below, at {later}")  # `x: x` said 'only below'
            raise self.error(f"'{name}' is {where}; constants and data values can use only "
                             "the names defined above them", name)
        raise self.error(f"undefined name '{name}'", name)

    @staticmethod
    def kind_name(value: _Value) -> str:
        return {"number": "number", "data": "data address", "label": "label"}[value.kind]

    def number(self, node: lark.Tree) -> int:
        value = self.evaluate(node)
        if value.kind != "number":
            raise self.error(f"expected a number, got a {self.kind_name(value)}", node)
        return value.value

    def literal(self, node: lark.Tree) -> int:
        value = self.number(node)
        self.literals.append((value, node))
        return value

    # -- pass 2 ---------------------------------------------------------------
    def instruction(self, node: lark.Tree, index: int) -> Instruction:
        mnemonic_token, operands = node.children[0], node.children[1:]
        mnemonic = mnemonic_token.lower()
        if mnemonic not in OPERAND_COUNTS:
            if mnemonic_token in self.symbols or mnemonic_token in self.labels:
                raise self.error(f"unknown mnemonic '{mnemonic_token}' (a name cannot start "
                                 "an instruction; labels end with ':')", mnemonic_token)
            raise self.error(f"unknown mnemonic '{mnemonic_token}' "
                             "(expected subleq, goto or halt)", mnemonic_token)
        low, high = OPERAND_COUNTS[mnemonic]
        if not low <= len(operands) <= high:
            expected = str(low) if low == high else f"{low} or {high}"
            raise self.error(f"'{mnemonic}' takes {expected} operand"
                             f"{'' if expected == '1' else 's'}, got {len(operands)}", node)
        pos = self.pos(node)
        text = self.source_text(node)
        if mnemonic == "halt":
            return Instruction(ZERO_CELL, ZERO_CELL, len(self.code), pos, text)
        if mnemonic == "goto":
            return Instruction(ZERO_CELL, ZERO_CELL, self.jump_target(operands[0]), pos, text)
        a, b = (self.data_address(operand) for operand in operands[:2])
        c = self.jump_target(operands[2]) if len(operands) == 3 else index + 1
        return Instruction(a, b, c, pos, text)

    def data_address(self, node: lark.Tree) -> int:
        value = self.evaluate(node)
        if value.kind == "label":
            raise self.error("a label cannot be a data operand; name a data cell", node)
        if value.kind == "number":
            raise self.error("a data operand must name a data cell, not a number", node)
        symbol = value.symbol
        if not symbol.address <= value.value < symbol.address + symbol.size:
            offset = value.value - symbol.address
            raise self.error(f"offset {offset} is outside '{symbol.name}' "
                             f"(size {symbol.size})", node)
        return value.value

    def jump_target(self, node: lark.Tree) -> int:
        value = self.evaluate(node)
        if value.kind == "data":
            raise self.error("a data name cannot be a jump target; use a label", node)
        if value.kind == "number":
            raise self.error("a jump target must be a label, not a number", node)
        if not 0 <= value.value <= len(self.code):
            raise self.error(f"jump target is outside the program "
                             f"(instruction {value.value} of {len(self.code)})", node)
        return value.value

    def source_text(self, node: lark.Tree) -> str:
        line = self.lines[node.meta.line - 1]
        return line[node.meta.column - 1:node.meta.end_column - 1].strip()

    def word_size(self) -> int:
        needed = max((bits_needed(value) for value, _ in self.literals), default=2)
        inferred = min(max(DEFAULT_MIN_BITS, needed), MAX_BITS)  # the literal past 64 bits
        bits = self.bits_override or self.declared_bits or inferred  # is then named below
        low, high = word_range(bits)
        for value, node in self.literals:
            if not low <= value <= high:
                raise self.error(f"value {value} does not fit in {bits}-bit words "
                                 f"(range {low}..{high})", node)
        return bits

    def run(self) -> Program:
        tree = parse(self.text, self.file, self.progress)
        self.definitions = {str(name): self.pos(name) for name in reversed(_defined_names(tree))}
        self.layout(tree)
        if not self.code:
            raise SourceError("empty program: no instructions (a .code section with at least "
                              "one instruction is needed)", self.file, self.text, 1, 1)
        instructions = [self.instruction(node, i) for i, node in enumerate(self.code)]
        bits = self.word_size()
        symbols = dict(self.symbols)
        return Program(instructions, self.memory, symbols, dict(self.labels), bits, self.file,
                       (ZERO_CELL, MINUS_ONE_CELL))


def _defined_names(tree: lark.Tree) -> list[lark.Token]:
    """Every name the source defines (constants, data, labels), in source order."""
    return [node.children[1] if node.data == "const_directive" else node.children[0]
            for node in tree.iter_subtrees_topdown()
            if node.data in ("const_directive", "cell", "array", "zero", "label")]


def parse_number(literal: lark.Token, file: str, text: str) -> int:
    """Decimal (leading zeros allowed), 0x hexadecimal or 0b binary; located errors in
    `file` (`text`) for a literal too long to convert."""
    prefix = literal[:2].lower()
    if prefix == "0x":
        return int_literal(literal[2:], 16, file, text, literal)
    if prefix == "0b":
        return int_literal(literal[2:], 2, file, text, literal)
    return int_literal(literal, 10, file, text, literal)


def parse(text: str, file: str, progress: Callable[[int], None] | None = None) -> lark.Tree:
    """Parse `.sq` source, turning lark's exceptions into located `SourceError`s; `progress`
    hears of each line parsed."""
    check_token_count(text, file, MAX_SQ_TOKENS,
                      f"{TOKENS_PER_COLUMN} for each of the largest machine's {MAX_COLUMNS:,} "
                      "columns")
    tree = parse_located(_parser(), text, file, ".data, .code, .array, .zero, .bits or .const",
                         EXPECTED_NAMES, progress)
    depth, node = deepest(tree)
    if depth > MAX_NESTING + STRUCTURE_DEPTH:
        raise SourceError(f"expression nested more than {MAX_NESTING} levels deep (each term "
                          f"of a + or - chain is a level); split it with .const",
                          file, text, node.meta.line, node.meta.column)
    return tree


EXPECTED_NAMES = {"NAME": "a name", "NUMBER": "a number", "_NEWLINE": "end of line",
             "COMMA": "','", "COLON": "':'", "EQUAL": "'='", "LPAR": "'('", "RPAR": "')'",
             "MINUS": "'-'", "PLUS": "'+'", "ARRAY": "'.array'", "ZERO": "'.zero'",
             "DATA": "'.data'", "CODE": "'.code'", "BITS": "'.bits'", "CONST": "'.const'",
             "$END": "end of file"}
"""How error messages name the grammar's terminals (lark's own '$END' was shown as is)."""


def assemble(text: str, file: str = "<source>", bits: int | None = None,
             progress: Callable[[int], None] | None = None) -> Program:
    """Assemble `.sq` source text into a `Program` (word size `bits` if given); `progress`
    is called with the number of each line parsed."""
    check_source_text(text)
    bits = check_word_size(bits, MAX_BITS)
    return _Assembler(as_read_from_file(text), file, bits, progress).run()


def assemble_file(path: str | Path, bits: int | None = None,
                  progress: Callable[[int], None] | None = None) -> Program:
    """Read and assemble a `.sq` file."""
    text = read_source(path)
    return assemble(text, str(path), bits, progress)


__all__ = ["assemble", "assemble_file", "parse", "RESERVED_NAMES", "DEFAULT_MIN_BITS"]
