"""Assembler for labelled standard SUBLEQ (.vsq): source text -> the word list of a `.dec`
image, plus the address of every label.

Standard SUBLEQ keeps code and data in one memory, and the only way to index is for code
to rewrite its own operands; labels that name any word (code or data) let such programs be
written without counting addresses by hand. Two passes over the lark tree: the first gives
every label its address, the second evaluates the words. Every error names file:line:col.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import lark

from assembler.dec import MAX_WORDS
from assembler.diagnostics import (MAX_NESTING, SourceError, as_read_from_file,
                                  check_source_text, check_token_count, check_word_size,
                                  deepest, error_at, parse_located, read_source)
from assembler.subleq import parse_number

DEFAULT_BITS = 16
"""Word size unless `.bits` or --bits says otherwise (that of `.dec` images)."""
MAX_BITS = 64
ZERO_NAME = "Z"
"""The zero cell the assembler appends when the source uses it (or halt, goto) undefined."""
OPERAND_COUNTS = {"subleq": (2, 3), "goto": (1, 1), "halt": (0, 0)}
STRUCTURE_DEPTH = 4
"""Levels of the parse tree above an expression (start, line, item, operand list)."""


@lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    grammar = resources.files("assembler").joinpath("vsq.lark").read_text()
    return lark.Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=False)


@dataclass(frozen=True)
class VsqProgram:
    """An assembled `.vsq` file: the words in memory order, the word size, the labels."""

    words: list[int]
    bits: int
    symbols: dict[str, int]


class _Assembler:
    def __init__(self, text: str, file: str, bits: int | None) -> None:
        self.text, self.file, self.bits_override = text, file, bits
        self.labels: dict[str, tuple[int, lark.Token]] = {}
        self.items: list[tuple[int, lark.Tree]] = []
        self.size = 0
        self.declared_bits: int | None = None
        self.zero_use: lark.Token | lark.Tree | None = None
        """Where the implicit zero cell is first used (a `Z`, a halt or a goto), if it is."""

    def error(self, message: str, where: lark.Token | lark.Tree) -> SourceError:
        return error_at(message, self.file, self.text, where)

    # -- pass 1: addresses ------------------------------------------------------
    def layout(self, tree: lark.Tree) -> None:
        for line in tree.children:
            for node in line.children:
                if node.data == "label":
                    self.define(node.children[0])
                elif node.data == "bits":
                    self.bits_directive(node)
                else:
                    words = self.word_count(node)
                    if self.size + words > MAX_WORDS:
                        raise self.error(f"the image would be longer than {MAX_WORDS} words",
                                         node)
                    self.items.append((self.size, node))
                    self.size += words

    def define(self, name: lark.Token) -> None:
        if name in self.labels:
            first = self.labels[name][1]
            raise self.error(f"duplicate label '{name}' (first defined at "
                             f"{self.file}:{first.line}:{first.column})", name)
        self.labels[str(name)] = (self.size, name)

    def bits_directive(self, node: lark.Tree) -> None:
        value = self.constant(node.children[1])
        if not 2 <= value <= MAX_BITS:
            raise self.error(f"word size must be between 2 and {MAX_BITS} bits, got {value}",
                             node.children[1])
        if self.declared_bits is not None:
            raise self.error("word size declared twice", node)
        self.declared_bits = value

    def word_count(self, node: lark.Tree) -> int:
        if node.data == "words":
            return len(node.children) - 1
        if node.data == "zero":
            count = self.constant(node.children[1])
            if count < 1:
                raise self.error(f"'.zero' needs a positive count, got {count}",
                                 node.children[1])
            return min(count, MAX_WORDS + 1)
        return 3

    def constant(self, node: lark.Tree) -> int:
        """A count or size, known in pass 1: numbers only (no labels, no '?')."""
        if node.data == "number":
            return parse_number(node.children[0], self.file, self.text)
        if node.data == "negate":
            return -self.constant(node.children[1])
        if node.data == "binary":
            left, op, right = node.children
            sign = 1 if op == "+" else -1
            return self.constant(left) + sign * self.constant(right)
        raise self.error("expected a number (labels and '?' are not known here)", node)

    # -- pass 2: words ----------------------------------------------------------
    def evaluate(self, node: lark.Tree, here: int) -> int:
        """The value of an expression in the word at address `here` - 1 ('?' is `here`)."""
        if node.data == "number":
            return parse_number(node.children[0], self.file, self.text)
        if node.data == "here":
            return here
        if node.data == "negate":
            return -self.evaluate(node.children[1], here)
        if node.data == "name":
            return self.lookup(node.children[0])
        left, op, right = node.children
        sign = 1 if op == "+" else -1
        return self.evaluate(left, here) + sign * self.evaluate(right, here)

    def lookup(self, name: lark.Token, where: lark.Tree | None = None) -> int:
        """A label's address; `Z` undefined is the zero cell after the last word (`where`
        names the halt or goto that uses it)."""
        if name in self.labels:
            return self.labels[name][0]
        if name == ZERO_NAME:
            self.zero_use = self.zero_use or where or name
            return self.size
        raise self.error(f"undefined label '{name}'", name)

    def emit(self, address: int, node: lark.Tree) -> list[tuple[int, lark.Tree]]:
        """The words of one item, each with the expression it came from (for range errors)."""
        if node.data == "zero":
            return [(0, node.children[1])] * self.word_count(node)
        if node.data == "words":
            return [(self.evaluate(expr, address + i + 1), expr)
                    for i, expr in enumerate(node.children[1:])]
        mnemonic_token, operands = node.children[0], node.children[1:]
        mnemonic = mnemonic_token.lower()
        if mnemonic not in OPERAND_COUNTS:
            hint = (" (labels end with ':')" if mnemonic_token in self.labels
                    else " (expected subleq, goto or halt)")
            raise self.error(f"unknown mnemonic '{mnemonic_token}'{hint}", mnemonic_token)
        low, high = OPERAND_COUNTS[mnemonic]
        if not low <= len(operands) <= high:
            expected = str(low) if low == high else f"{low} or {high}"
            raise self.error(f"'{mnemonic}' takes {expected} operand"
                             f"{'' if expected == '1' else 's'}, got {len(operands)}", node)
        if mnemonic != "subleq":
            zero = self.lookup(lark.Token("NAME", ZERO_NAME), node)
            target = ([(self.evaluate(operands[0], address + 3), operands[0])]
                      if mnemonic == "goto" else [(-1, node)])
            return [(zero, node), (zero, node)] + target
        words = [(self.evaluate(expr, address + i + 1), expr) for i, expr in enumerate(operands)]
        if len(words) == 2:
            words.append((address + 3, node))
        return words

    def run(self) -> VsqProgram:
        tree = parse(self.text, self.file)
        self.layout(tree)
        if not self.items:
            raise SourceError("empty program: no instructions or data", self.file, self.text,
                              1, 1)
        words = [word for address, node in self.items for word in self.emit(address, node)]
        if self.zero_use is not None:
            if self.size >= MAX_WORDS:
                raise self.error(f"no room for the zero cell '{ZERO_NAME}' after the image's "
                                 f"{MAX_WORDS} words: halt, goto and an undefined Z use it "
                                 "(define Z: among the words)", self.zero_use)
            words.append((0, tree))
        bits = self.bits_override or self.declared_bits or DEFAULT_BITS
        low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        for value, node in words:
            if not low <= value <= high:
                raise self.error(f"value {value} does not fit in {bits}-bit words "
                                 f"(range {low}..{high})", node)
        symbols = {name: address for name, (address, _) in self.labels.items()}
        if self.zero_use is not None:
            symbols[ZERO_NAME] = self.size
        return VsqProgram([value for value, _ in words], bits, symbols)


def parse(text: str, file: str) -> lark.Tree:
    """Parse `.vsq` source, turning lark's exceptions into located `SourceError`s."""
    check_token_count(text, file)
    tree = parse_located(_parser(), text, file, ".word, .zero or .bits", EXPECTED_NAMES)
    depth, node = deepest(tree)
    if depth > MAX_NESTING + STRUCTURE_DEPTH:
        raise SourceError(f"expression nested more than {MAX_NESTING} levels deep",
                          file, text, node.meta.line, node.meta.column)
    return tree


EXPECTED_NAMES = {"NAME": "a name", "NUMBER": "a number", "_NEWLINE": "end of line",
             "COMMA": "','", "COLON": "':'", "LPAR": "'('", "RPAR": "')'", "HERE": "'?'",
             "MINUS": "'-'", "PLUS": "'+'", "WORD": "'.word'", "ZERO": "'.zero'",
             "BITS": "'.bits'"}
"""How error messages name the grammar's terminals."""


BLANKS = str.maketrans({separator: " " for separator in "\v\f\x1c\x1d\x1e\x85\u2028\u2029"})
"""The characters besides newlines that end a line for str.splitlines (which places the
line an error shows) but not for the lexer (which counts lines): blanks, as in `.dec`
images, so a form feed (a page break) in a comment no longer shows the wrong line."""


def assemble(text: str, file: str = "<source>", bits: int | None = None) -> VsqProgram:
    """Assemble `.vsq` source text (word size `bits` if given, over any `.bits`)."""
    check_source_text(text)
    bits = check_word_size(bits, MAX_BITS)
    text = as_read_from_file(text).translate(BLANKS)
    return _Assembler(text, file, bits).run()


def assemble_file(path: str | Path, bits: int | None = None) -> VsqProgram:
    """Read and assemble a `.vsq` file."""
    text = read_source(path)
    return assemble(text, str(path), bits)


__all__ = ["VsqProgram", "assemble", "assemble_file", "parse", "DEFAULT_BITS", "ZERO_NAME"]
