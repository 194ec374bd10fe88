"""What the REPL's commands do differently per instruction set: one dialect each.

SUBLEQ holds integer words (arrays by name), FLEQ holds real d x d cells (printed as
matrices, set from literals, diffed by their errors). The session asks the loaded
program's dialect instead of testing which instruction set it holds; a new instruction
set adds one dialect here (`DIALECTS`, keyed by `InstructionSet.name`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from assembler.fleq_program import FleqProgram
from assembler.program import Program
from vm.common.errors import InputError, shown_path
from vm.functions import dtype_parameters
from vm.isa import FLEQ, SUBLEQ, InstructionSet
from vm.repl.assemble import assemble_instruction
from vm.repl.fleq import (FleqLockstep, assemble_fleq_instruction, fleq_changes, format_real,
                          inline_real, parse_real_value, resolve_fleq_location, same_value)
from vm.repl.names import changes, format_value, parse_int, resolve_location
from vm.repl.state import LockstepMachine
from vm.runtime.config import EngineConfig

FLEQ_INSTRUCTION = re.compile(r"^\s*[A-Za-z_]\w*\s*=\s*\S")
"""`c = f(a, b)` or `c = a`: a typed FLEQ instruction (checked before command names: `c` is
an alias)."""

SET_ENTRY = re.compile(r"^(\S+?\s*\[\s*\d+\s*(?:,\s*\d+\s*|\]\s*\[\s*\d+\s*)?\])\s*(\S.*)$",
                       re.ASCII)
"""`set v[1] 5`, `set v [1] 5`, `set M[1, 0] 5`: an indexed entry, then its value (SUBLEQ:
`set xs [1] 5`)."""


@dataclass(frozen=True)
class Loading:
    """A program loaded into lockstep engines, with the line that announces it."""

    program: Any
    machine: Any
    summary: str


class ReplDialect:
    """The parts of the REPL's commands that depend on the instruction set; the defaults
    are those of a dialect without typed-instruction syntax of its own."""

    isa: InstructionSet

    def typed_before_commands(self, line: str) -> bool:
        """A line that is a typed instruction even where it starts like a command."""
        return False

    def first_words(self, program: Program) -> list[str]:
        """Completions for the first word beyond the commands and mnemonics."""
        return []

    def instruction_completions(self, program: Program, line: str) -> list[str] | None:
        """Completions inside a typed instruction this dialect recognizes, else None."""
        return None

    def still_apart(self, machine: Any) -> list[str]:
        """What differs between the engines right after a resynchronization (`engine`):
        nothing where both hold the same words exactly."""
        return []


class SubleqDialect(ReplDialect):
    """Integer words: `print` by name (arrays as lists), `set` one word, `diff` per word."""

    isa: InstructionSet = SUBLEQ

    def load(self, path: str, source: str, config: EngineConfig, engine: str,
             bits: int | None, scratch: int | None,
             progress: Callable[[int], None] | None = None) -> Loading:
        program = SUBLEQ.assemble_text(source, path, bits=bits, progress=progress)
        machine = LockstepMachine(program, SUBLEQ.geometry_for(program, scratch), config, engine)
        return Loading(program, machine,
                       f"loaded {shown_path(path)}: {len(program.instructions)} instructions, "
                       f"{len(program.memory)} memory cells, {program.bits}-bit words")

    def assemble_typed(self, program: Program, source: str, line: str) -> Any:
        return assemble_instruction(program, source, line)

    def print(self, program: Program, memory: list, argument: str) -> str:
        if argument:
            location = resolve_location(program, argument)
            return f"{location.name} = {format_value(location.read(memory))}"
        named = program.named_memory(memory) if program.symbols else {"mem": memory}
        return "\n".join(f"{name} = {format_value(value)}" for name, value in named.items())

    def set(self, machine: LockstepMachine, argument: str) -> str:
        entry = SET_ENTRY.match(argument)  # `set xs [1] 5`, as the FLEQ REPL takes it
        words = list(entry.groups()) if entry else argument.split()
        if len(words) != 2:
            raise InputError("usage: set NAME VALUE")
        location = resolve_location(machine.program, words[0])
        if location.size != 1:
            raise InputError(f"'{location.name}' is an array of {location.size} cells; set one "
                             f"element ({location.name}[K] or {location.name}+K)")
        value = parse_int(words[1])
        old = location.read(machine.state().memory)
        machine.set_word(location.address, value)
        return f"{location.name} = {value} (was {old})"

    def diff(self, machine: LockstepMachine) -> str:
        found = machine.differences()
        if not found:
            return f"the engines agree at step {machine.steps} (memory and pc)"
        rows = [f"{'':<14} {'transformer':>12} {'reference':>12}"]
        rows += [f"{name:<14} {ours:>12} {theirs:>12}" for name, ours, theirs in found]
        return "\n".join([f"the engines disagree at step {machine.steps}:", *rows])

    def resolve(self, program: Program, text: str) -> Any:
        return resolve_location(program, text)

    def inline(self, value: Any) -> str:
        return format_value(value)

    def changes(self, program: Program, before: list, after: list) -> list[str]:
        return changes(program, before, after)

    def memory_cells(self, program: Program) -> int:
        return len(program.memory)

    def names(self, program: Program) -> list[str]:
        """What `print`, `watch` and `set` complete."""
        return list(program.symbols)



class FleqDialect(ReplDialect):
    """Real cells: `print` shows matrices, `set` takes reals and [[..]] literals, `diff`
    gives each variable's error between the engines; typed `c = f(a, b)` instructions."""

    isa: InstructionSet = FLEQ

    def load(self, path: str, source: str, config: EngineConfig, engine: str,
             bits: int | None, scratch: int | None,
             progress: Callable[[int], None] | None = None) -> Loading:
        """The products get the dtype's eps as `ltvm run` gives them; `progress` hears of
        the lines assembled."""
        if bits or scratch:
            raise InputError("--bits and --scratch apply to SUBLEQ programs, not .fleq")
        dtype = config.dtype or FLEQ.default_dtype
        program = FLEQ.assemble_text(source, path, defaults=dtype_parameters(dtype),
                                     progress=progress)
        machine = FleqLockstep(program, FLEQ.geometry_for(program), config, engine)
        blocks = ", ".join(name for name, _ in program.functions) or "none"
        return Loading(program, machine,
                       f"loaded {shown_path(path)}: {len(program.instructions)} instructions, "
                       f"{len(program.cells)} cells of {program.d}x{program.d}, "
                       f"blocks {blocks}")

    def typed_before_commands(self, line: str) -> bool:
        return bool(FLEQ_INSTRUCTION.match(line))

    def assemble_typed(self, program: FleqProgram, source: str, line: str) -> Any:
        return assemble_fleq_instruction(program, source, line)

    def print(self, program: FleqProgram, memory: list, argument: str) -> str:
        names = [argument] if argument else sorted(program.variables,
                                                   key=lambda n: program.variables[n].cell)
        lines = []
        for name in names:
            location = resolve_fleq_location(program, name)
            value = location.read(memory)
            if isinstance(value, float):
                lines.append(f"{location.name} = {format_real(value)}")
            else:
                rows, columns = location.shape
                lines.append(f"{location.name} ({rows}x{columns}) =")
                lines += [f"  {row}" for row in format_real(value).splitlines()]
        return "\n".join(lines) or "no variables"

    def set(self, machine: FleqLockstep, argument: str) -> str:
        entry = SET_ENTRY.match(argument)  # `set xs [1] 5` was read as the literal "[1] 5"
        words = entry.groups() if entry else argument.split(maxsplit=1)
        if len(words) != 2:
            raise InputError("usage: set NAME VALUE (one entry: set NAME[I] VALUE, "
                             "set NAME[ROW, COLUMN] VALUE)")
        location = resolve_fleq_location(machine.program, words[0])
        value = parse_real_value(words[1], location.shape)
        old = location.read(machine.state().memory)
        machine.set_cell(location, value)
        new = location.read(machine.state().memory)
        line = f"{location.name} = {self.inline(new)} (was {self.inline(old)})"
        held = location.read(machine.state("transformer").memory)
        exact = location.read(machine.state("reference").memory)
        if same_value(held, exact):
            return line
        # float32 rounds 16777217 to 16777216: the engines differ from the set on, say why
        return (f"{line}\nnote: {machine.executor.dtype_name} holds {self.inline(held)} on "
                f"the transformer; the reference keeps {self.inline(exact)}")

    def diff(self, machine: FleqLockstep) -> str:
        """Per variable: both engines' values and the max abs error between them."""
        transformer, reference = machine.state("transformer").pc, machine.state("reference").pc
        pcs = ("the program counters agree" if transformer == reference else
               f"the program counters DIFFER: transformer {transformer}, reference {reference}")
        rows = [f"step {machine.steps}: {pcs}",
                f"{'':<12} {'transformer':>16} {'reference':>16} {'max abs error':>14}"]
        for location, ours, theirs, error in machine.errors():
            if isinstance(ours, float):
                rows.append(f"{location.name:<12} {format_real(ours):>16} "
                            f"{format_real(theirs):>16} {error:>14.3g}")
            else:
                shape = "x".join(map(str, location.shape))
                rows.append(f"{location.name:<12} {shape + ' matrix':>16} "
                            f"{shape + ' matrix':>16} {error:>14.3g}")
        return "\n".join(rows)

    def still_apart(self, machine: FleqLockstep) -> list[str]:
        """The variables the transformer's dtype holds otherwise than the reference after it
        took over the reference's reals: float32 keeps 0.1 as 0.1000000015, and `engine
        transformer` said 'resynchronized' while x still differed."""
        return [f"{location.name} = {self.inline(ours)} on the transformer, "
                f"{self.inline(theirs)} on the reference"
                for location, ours, theirs, _ in machine.errors()
                if not same_value(ours, theirs)]

    def resolve(self, program: FleqProgram, text: str) -> Any:
        return resolve_fleq_location(program, text)

    def inline(self, value: Any) -> str:
        return inline_real(value)

    def changes(self, program: FleqProgram, before: list, after: list) -> list[str]:
        return fleq_changes(program, before, after)

    def memory_cells(self, program: FleqProgram) -> int:
        return len(program.cells)

    def names(self, program: FleqProgram) -> list[str]:
        return list(program.variables)

    def first_words(self, program: FleqProgram) -> list[str]:
        return list(program.variables)

    def instruction_completions(self, program: FleqProgram, line: str) -> list[str] | None:
        """In `c = f(a, b)`: the machine's blocks after `=`, variables inside the call."""
        if "=" not in line:
            return None
        word = re.split(r"[\s,(=]", line)[-1]
        inside = "(" in line.split("=", 1)[1]
        candidates = program.variables if inside else [name for name, _ in program.functions]
        return sorted(candidate for candidate in set(candidates) if candidate.startswith(word))


DIALECTS: dict[str, ReplDialect] = {dialect.isa.name: dialect
                                      for dialect in (SubleqDialect(), FleqDialect())}
