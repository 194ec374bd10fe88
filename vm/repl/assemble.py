"""One instruction typed at the REPL, assembled against the loaded program's names.

The typed line is appended to the program's own source as one more `.code`
line and the whole text is assembled by the ordinary assembler, so data
names, `name+k` offsets, constants and labels mean exactly what they mean in
the program, and every error is the assembler's own message.
"""

from __future__ import annotations

from assembler.diagnostics import SourceError
from assembler.program import Instruction, Program
from assembler.subleq import assemble
from vm.common.errors import InputError

MNEMONICS = ("subleq", "goto", "halt")


def is_instruction(line: str) -> bool:
    """Does `line` start with a mnemonic (case-insensitive, as in the assembler)?"""
    words = line.split(maxsplit=1)
    return bool(words) and words[0].lower() in MNEMONICS


def assemble_instruction(program: Program, source: str, line: str) -> Instruction:
    """The instruction `line` names, in `program`'s addresses.

    Its jump target is resolved (so a misspelt label is reported) but has no
    meaning outside the program: whoever executes it keeps the program counter.
    """
    if "\n" in line or "\r" in line:
        raise InputError("type one instruction on one line")
    text = f"{source.rstrip()}\n.code\n{line}\n"
    typed_line = text.count("\n")
    try:
        extended = assemble(text, program.source, program.bits)
    except SourceError as error:
        where = f" (column {error.column})" if error.line == typed_line else ""
        raise InputError(f"{error.message}{where}") from None
    added = len(extended.instructions) - len(program.instructions)
    if added != 1 or extended.labels != program.labels or \
            extended.symbols.keys() != program.symbols.keys():
        raise InputError("type exactly one instruction, without a label")
    return extended.instructions[-1]
