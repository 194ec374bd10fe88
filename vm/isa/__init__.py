"""The instruction sets, one object each (`InstructionSet`): what commands ask instead of
testing program types.

Sits above the runtime and the tools: may import the assembler's parsers, the machines,
the runtime and the tools; commands, applications and the REPL import it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vm.common.errors import InputError, shown_path
from vm.isa.base import InstructionSet, PaperComparison, ProgramOptions, RunChecks
from vm.isa.fleq import FLEQ
from vm.isa.subleq import SUBLEQ
from vm.isa.vsubleq import VSUBLEQ

INSTRUCTION_SETS: tuple[InstructionSet, ...] = (SUBLEQ, FLEQ, VSUBLEQ)


def for_path(path: str | Path) -> InstructionSet:
    """The ISA of a source file, by its suffix."""
    if not isinstance(path, (str, Path)):  # None failed in Path() with a TypeError
        raise InputError(f"for_path takes a file name, got {type(path).__name__}")
    suffix = Path(path).suffix
    for isa in INSTRUCTION_SETS:
        if suffix in isa.suffixes:
            return isa
    known = " or ".join(s for isa in INSTRUCTION_SETS for s in isa.suffixes if s)
    raise InputError(f"{shown_path(path)}: unknown program type {suffix!r} (expected {known})")


def for_program(program: Any) -> InstructionSet:
    """The ISA a program (or a geometry) belongs to."""
    for isa in INSTRUCTION_SETS:
        if isinstance(program, (isa.program_type, isa.geometry_type)):
            return isa
    raise InputError(f"no instruction set for {type(program).__name__}: for_program takes a "
                     "program or a geometry")


__all__ = ["FLEQ", "INSTRUCTION_SETS", "SUBLEQ", "VSUBLEQ", "InstructionSet", "PaperComparison",
           "ProgramOptions", "RunChecks", "for_path", "for_program"]
