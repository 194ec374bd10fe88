"""Random non-halting programs of a given width, for benchmarks and exactness sweeps, and the
names of the built-in FLEQ benchmark programs (torch-free: `ltvm bench`'s options list them)."""

from __future__ import annotations

import random

from assembler.program import ZERO_CELL, Instruction, Program, word_range
from vm.common.geometry import Geometry

FLEQ_WORKLOADS = ("calculator", "inverse-d8")
"""Built-in FLEQ benchmark programs: the paper's calculator (d = 1) and a d = 8 program
with many heads per layer (Newton-Schulz matrix inverse, then inv)."""


def workload_geometry(columns: int, bits: int = 8) -> Geometry:
    """n columns: one scratch column, a quarter memory (at least 3 cells), the rest code."""
    memory = max(3, columns // 4)
    return Geometry(1, memory, columns - 1 - memory, bits)


def looping_programs(geometry: Geometry, count: int, seed: int = 0) -> list[Program]:
    """`count` random programs filling `geometry` that never halt.

    Jumps stay inside the program, the last instruction jumps back to the
    first, and no instruction writes the EOF instruction's cells 0 and 1.
    """
    rng = random.Random(seed)
    low, high = word_range(geometry.bits)
    cells, code = geometry.memory, geometry.instructions - 1
    programs = []
    for _ in range(count):
        memory = [0, -1] + [rng.randint(low, high) for _ in range(cells - 2)]
        instructions = [Instruction(rng.randrange(cells), rng.randrange(2, cells),
                                    rng.randrange(code)) for _ in range(code - 1)]
        instructions.append(Instruction(ZERO_CELL, ZERO_CELL, 0))
        programs.append(Program(instructions, memory, bits=geometry.bits,
                                source=f"<random n={geometry.columns}>"))
    return programs
