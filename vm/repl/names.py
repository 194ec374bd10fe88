"""What the REPL's arguments name and how program state reads back to a user.

Memory is named as in the source (`n`, `xs`, `xs+2`, `xs[2]`) or by address;
instructions by label, `EOF` or index. Values, locations and the listing
around the program counter are formatted here, in one place, so every
command shows them the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from assembler.diagnostics import shown_integer
from assembler.fleq_program import FleqProgram
from assembler.program import RESERVED_NAMES, Program
from vm.common.errors import InputError, escaped

ELEMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(?:\+\s*(\d+)|\[\s*(\d+)\s*\])$", re.ASCII)
LISTING_CONTEXT = 5
"""Instructions shown on each side of the program counter by `list`."""
SHOWN_ERROR = 300
"""Most characters of an error line or an echoed typed line: what was typed can be megabytes."""


@dataclass(frozen=True)
class Location:
    """A span of memory a user named: one cell, a whole array, or one element."""

    name: str
    address: int
    size: int

    def read(self, memory: list[int]) -> int | list[int]:
        values = memory[self.address:self.address + self.size]
        return values if self.size > 1 else values[0]


def error_line(text: str) -> str:
    """The first line of an error message, as `shortened` shows it. Lines end at '\\n' only:
    a CR or another line separator typed inside a line ('print n\\rx') is shown escaped,
    not taken as the message's end ("no memory named 'n")."""
    return shortened(text.split("\n", 1)[0])


def shortened(line: str) -> str:
    """`line` with its control characters escaped ("unknown command 'foo<ESC>[31m'" and
    "executed t = add(a, b) ; <ESC>[31m" recoloured the terminal), cut to SHOWN_ERROR
    characters, saying how long it was."""
    line = escaped(line)
    if len(line) <= SHOWN_ERROR:
        return line
    return f"{line[:SHOWN_ERROR]}... ({len(line):,} characters)"


INTEGER = re.compile(r"[+-]?(0[xX][0-9a-fA-F]+|0[bB][01]+|[0-9]+)")
"""An integer as the assembler reads one (its NUMBER), with an optional sign."""


def parse_int(text: str) -> int:
    """A decimal, 0x or 0b integer with an optional sign, as typed by a user, in ASCII
    digits as the assembler reads them. int(text, 0) took more: other scripts' digits ('٣'
    was 3), underscores (`step 1_0` ran 10 steps) and 0o octal, and refused the leading
    zeros the assembler takes ('010')."""
    if not INTEGER.fullmatch(text):
        raise InputError(f"'{text}' is not a number")
    digits = text.lstrip("+-")
    base = {"0x": 16, "0b": 2}.get(digits[:2].lower(), 10)
    value = integer_value(digits[2:] if base != 10 else digits, base)
    return -value if text.startswith("-") else value


def integer_value(digits: str, base: int = 10) -> int:
    """int(digits, base) of unsigned ASCII digits, also past the 4,300 decimal digits int()
    converts (it raised ValueError, and 'break 999...' said the number was not a number):
    such a number keeps its first 20 digits and its magnitude, all that a range check needs
    and a message shows of it (shown_int: 'about 10^5000')."""
    significant = digits.lstrip("0") or "0"
    try:
        return int(significant, base)
    except ValueError:
        return int(significant[:20]) * 10 ** (len(significant) - 20)


def shown_int(value: int, grouped: bool = False) -> str:
    """An integer the user typed, for a message: its digits (`grouped` in thousands) up to
    100 of them, else its order of magnitude, 'about 10^5000' (str() raises ValueError past
    4,300 digits: "ValueError: Exceeds the limit" was the error line)."""
    if abs(value) >= 10 ** 100:
        return shown_integer(value)
    return f"{value:,}" if grouped else str(value)


def resolve_location(program: Program, text: str) -> Location:
    """NAME, NAME+K, NAME[K], @zero, @minus_one or an address -> the memory it names."""
    text = text.strip()
    if text[:1].isdigit() or text[:1] == "-":
        address = parse_int(text)
        if not 0 <= address < len(program.memory):
            raise InputError(f"address {shown_int(address)} outside memory "
                             f"(cells 0..{len(program.memory) - 1})")
        return Location(program.address_name(address), address, 1)
    reserved = {name: address for address, name in RESERVED_NAMES.items()}
    if text in reserved:  # `print 1` shows @minus_one: the name it shows reads it back
        return Location(text, reserved[text], 1)
    match = ELEMENT.match(text)
    name = match.group(1) if match else text
    symbol = program.symbols.get(name)
    if symbol is None:
        raise InputError(f"no memory named '{text}'")
    if match is None:
        return Location(name, symbol.address, symbol.size)
    offset = int(match.group(2) or match.group(3))
    if offset >= symbol.size:
        raise InputError(f"offset {offset} is outside '{name}' (size {symbol.size})")
    return Location(program.address_name(symbol.address + offset), symbol.address + offset, 1)


def resolve_instruction(program: Program | FleqProgram, text: str) -> int:
    """LABEL, EOF or an instruction index -> the instruction index."""
    text = text.strip()
    if text in program.labels:
        return program.labels[text]
    if text.upper() == "EOF":
        return program.eof
    if not (text[:1].isdigit() or text[:1] == "-"):
        raise InputError(f"no label '{text}'")
    index = parse_int(text)
    if not 0 <= index <= program.eof:
        raise InputError(f"instruction {shown_int(index)} outside the program "
                         f"(0..{program.eof})")
    return index


def format_value(value: int | list[int]) -> str:
    return f"[{', '.join(map(str, value))}]" if isinstance(value, list) else str(value)


def labels_at(program: Program | FleqProgram, index: int) -> list[str]:
    names = [name for name, at in program.labels.items() if at == index]
    return names + ["EOF"] if index == program.eof else names


def instruction_text(program: Program | FleqProgram, index: int) -> str:
    """The instruction as written in the source (or rebuilt from its operands)."""
    inside = 0 <= index <= program.eof
    return program.instruction_text(index) if inside else "(outside the program)"


def instruction_place(program: Program | FleqProgram, index: int) -> str:
    """`7` or `7 (loop)`: an instruction index with its labels."""
    names = labels_at(program, index)
    return f"{index} ({', '.join(names)})" if names else str(index)


def location_line(program: Program | FleqProgram, step: int, pc: int) -> str:
    """Where execution stands: step count, pc with labels, the instruction there."""
    return f"step {step}  pc {instruction_place(program, pc)}  {instruction_text(program, pc)}"


def listing(program: Program | FleqProgram, pc: int, breakpoints: set[int],
            context: int = LISTING_CONTEXT) -> list[str]:
    """The instructions around `pc`, labelled; `=>` marks pc and `b` a breakpoint."""
    centre = min(max(pc, 0), program.eof)
    lines = []
    for index in range(max(0, centre - context), min(program.eof, centre + context) + 1):
        mark = ("b" if index in breakpoints else " ") + ("=>" if index == pc else "  ")
        label = "".join(f"{name}: " for name in labels_at(program, index))
        lines.append(f"{mark} {index:>4}  {label:<12}{instruction_text(program, index)}")
    return lines


def changes(program: Program, before: list[int], after: list[int], limit: int = 8) -> list[str]:
    """`name = new (was old)` for every cell that changed, at most `limit` shown."""
    changed = [f"{program.address_name(address)} = {new} (was {old})"
               for address, (old, new) in enumerate(zip(before, after)) if old != new]
    if len(changed) > limit:
        changed = changed[:limit] + [f"... and {len(changed) - limit} more"]
    return changed
