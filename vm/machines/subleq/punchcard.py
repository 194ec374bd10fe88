"""Program + Geometry <-> X, the punchcard of Eq. (5).

Columns: scratch | memory | instructions (EOF last). Each instruction column
holds three ±1 pointers (absolute column indices of a, b and c); each memory
column an N-bit two's-complement word; the cpu column (scratch column 0) the
program counter, starting at the first instruction.
"""

from __future__ import annotations

import numpy as np

from assembler.program import Instruction, Program, all_instructions
from vm.common.encoding import code_value, pm1_code, pm1_codes, word_values
from vm.common.errors import InputError
from vm.common.geometry import Geometry
from vm.transformer.layout import Layout
from vm.machines.subleq.layout import subleq_layout

DEFAULT_SCRATCH = 1


def geometry_for(program: Program, scratch: int | None = None) -> Geometry:
    """The smallest geometry that fits `program` (scratch width overridable)."""
    if not isinstance(program, Program):  # a FLEQ program failed on `.memory`
        raise InputError(f"geometry_for takes a SUBLEQ program, got {type(program).__name__}")
    return Geometry(scratch=DEFAULT_SCRATCH if scratch is None else scratch,
                    memory=len(program.memory), instructions=len(program.instructions) + 1,
                    bits=program.bits)


def check_fits(program: Program, geometry: Geometry) -> None:
    """Raise InputError unless `program` fits `geometry` exactly."""
    if geometry.memory != len(program.memory):
        raise InputError(f"geometry has {geometry.memory} memory columns, program needs "
                         f"{len(program.memory)}")
    if geometry.instructions != len(program.instructions) + 1:
        raise InputError(f"geometry has {geometry.instructions} instruction columns, program "
                         f"needs {len(program.instructions) + 1} (with EOF)")
    if geometry.bits != program.bits:
        raise InputError(f"geometry has {geometry.bits}-bit words, program uses {program.bits}")


def encode(program: Program, geometry: Geometry | None = None,
           layout: Layout | None = None) -> np.ndarray:
    """The punchcard X (rows x n, float64) of `program` before the first pass."""
    geometry = geometry or geometry_for(program)
    check_fits(program, geometry)
    layout = layout or subleq_layout(geometry)
    B, X = geometry.pos_bits, np.zeros((layout.rows, layout.columns))
    scratch, memory, code = (layout.regions[r] for r in ("scratch", "memory", "instructions"))
    X[layout["scratch"], scratch.start:scratch.stop] = 1
    X[layout["cpu"], scratch.start] = 1
    X[layout["pos"], memory.start:] = pm1_codes(np.arange(memory.start, geometry.columns), B).T
    words = np.array(program.memory, dtype=np.int64)
    X[layout["mem"], memory.start:memory.stop] = pm1_codes(words, geometry.bits).T
    a, b, c = np.array([(i.a, i.b, i.c) for i in all_instructions(program)], dtype=np.int64).T
    pointers = {"instr_a": geometry.memory_column(a), "instr_b": geometry.memory_column(b),
                "instr_c": geometry.instruction_column(c)}
    for rows, columns in pointers.items():  # whole rows: per-column codes took 13 ms a card
        X[layout[rows], code.start:code.stop] = pm1_codes(columns, B).T
    X[layout["pc"], scratch.start] = pm1_code(geometry.instruction_column(0), B)
    return X


def decode_memory(X: np.ndarray, layout: Layout) -> list[int]:
    """Memory words read back from X (the sign of each entry decides its bit)."""
    memory = layout.regions["memory"]
    return word_values(np.asarray(X)[layout["mem"], memory.start:memory.stop])


def decode_pc(X: np.ndarray, layout: Layout) -> int:
    """The instruction index the program counter points at."""
    column = code_value(np.asarray(X)[layout["pc"], layout.regions["scratch"].start])
    return column - layout.regions["instructions"].start


def decode_instructions(X: np.ndarray, layout: Layout) -> list[Instruction]:
    """The instructions (EOF included) read back from X, as memory/instruction indices."""
    memory, code = layout.regions["memory"], layout.regions["instructions"]
    X = np.asarray(X)
    return [Instruction(code_value(X[layout["instr_a"], column]) - memory.start,
                        code_value(X[layout["instr_b"], column]) - memory.start,
                        code_value(X[layout["instr_c"], column]) - code.start)
            for column in code]
