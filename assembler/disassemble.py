"""Program -> readable `.sq` source that assembles back to the same program."""

from __future__ import annotations

from assembler.program import MINUS_ONE_CELL, ZERO_CELL, Instruction, Program
from vm.common.errors import shown_path


def _data_names(program: Program) -> dict[int, str]:
    """A name for every memory address: symbol names, else `m<address>`."""
    names = {address: f"m{address}" for address in range(len(program.memory))}
    for symbol in program.symbols.values():
        for offset in range(symbol.size):
            names[symbol.address + offset] = symbol.name if symbol.size == 1 else \
                f"{symbol.name}+{offset}"
    return names


def _label_names(program: Program) -> dict[int, str]:
    """The program's labels, and `L<index>` for other jump targets (a target such as `A+1`):
    made unique against every name the program defines, as `L3` for a data cell or a
    label at another instruction made the listing fail with a duplicate definition."""
    names = {program.eof: "EOF"}
    for name, index in program.labels.items():
        names.setdefault(index, name)
    taken = set(program.symbols) | set(program.labels) | {"EOF"}
    targets = {i.c for index, i in enumerate(program.instructions)  # goto names its target
               if i.c != index + 1 or i.a == i.b == ZERO_CELL}  # even the next instruction
    for index in sorted(targets - names.keys()):
        name = f"L{index}"
        while name in taken:
            name += "_"
        names[index] = name
        taken.add(name)
    return names


def _mnemonic(program: Program, index: int, instruction: Instruction,
              data: dict[int, str], labels: dict[int, str], reserved_ok: bool) -> str:
    # `subleq 0, 0, c` is halt/goto only while cell 0 is the reserved 0; in a CSV import it
    # may hold a value the instruction clears, which a listed `halt` silently dropped
    if reserved_ok and instruction.a == instruction.b == ZERO_CELL:
        return "halt" if instruction.c == program.eof else f"goto {labels[instruction.c]}"
    text = f"subleq {data[instruction.a]}, {data[instruction.b]}"
    return text if instruction.c == index + 1 else f"{text}, {labels[instruction.c]}"


def disassemble(program: Program) -> str:
    """`.sq` text for `program`. Exact for programs whose cells 0 and 1 are the
    reserved 0 and -1, whose EOF uses them and whose instructions name neither (every
    assembled program). Otherwise (a CSV import) those cells are listed as data cells m0
    and m1, which `.sq` has no other way to name: the program assembles and computes the
    same, with its addresses shifted."""
    data, labels = _data_names(program), _label_names(program)
    lines = [f"; disassembly of {shown_path(program.source)}", f".bits {program.bits}"]
    reserved_ok = (program.memory[ZERO_CELL] == 0 and program.memory[MINUS_ONE_CELL] == -1
                   and program.eof_operands == (ZERO_CELL, MINUS_ONE_CELL))
    named_reserved = sorted({cell for i in program.instructions
                             if not i.a == i.b == ZERO_CELL  # halt and goto
                             for cell in (i.a, i.b) if cell in (ZERO_CELL, MINUS_ONE_CELL)})
    if not reserved_ok:
        lines.append("; note: cells 0/1 are not the reserved 0/-1; addresses shift on reassembly")
        named_reserved = [ZERO_CELL, MINUS_ONE_CELL]
    elif named_reserved:
        lines.append("; note: instructions read the reserved cells 0/-1, listed as data; "
                     "addresses shift on reassembly")
    lines.append(".data")
    lines += [f"{data[cell]}: {program.memory[cell]}" for cell in named_reserved]
    named = {s.address: s for s in program.symbols.values()}
    address = 2
    while address < len(program.memory):
        symbol = named.get(address)
        if symbol is not None and symbol.size > 1:
            values = program.memory[address:address + symbol.size]
            lines.append(f"{symbol.name}: .array {', '.join(map(str, values))}")
            address += symbol.size
            continue
        lines.append(f"{data[address]}: {program.memory[address]}")
        address += 1
    lines.append(".code")
    for index, instruction in enumerate(program.instructions):
        label = f"{labels[index]}:" if index in labels else ""
        lines.append(f"{label:<10}{_mnemonic(program, index, instruction, data, labels, reserved_ok)}")
    if not program.instructions:  # a CSV of the EOF row alone; .sq refuses an empty .code
        lines.append(f"{'':<10}halt      ; the program was its EOF instruction alone")
    return "\n".join(lines) + "\n"
