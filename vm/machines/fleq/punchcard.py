"""FleqProgram + FleqGeometry <-> X, the punchcard of Figure 6.

Besides memory, instructions and the program counter, X carries the
geometry's constant rows: role indicators and the index k of every operand
column, block gate offsets (0 inside a block, -GATE_BIG outside), and each
block's own constant rows. All of it depends only on the geometry.
"""

from __future__ import annotations

import numpy as np

from assembler.fleq_program import FleqInstruction, FleqProgram
from vm.common.encoding import code_value, pm1_code, pm1_codes
from vm.common.errors import InputError
from vm.functions.base import GATE_BIG
from vm.transformer.layout import Layout
from vm.machines.fleq.layout import FleqGeometry, fleq_layout


def fleq_geometry_for(program: FleqProgram) -> FleqGeometry:
    """The geometry of `program`: its block size, blocks, cells and instructions."""
    if not isinstance(program, FleqProgram):  # a SUBLEQ program failed on `.d`
        raise InputError(f"fleq_geometry_for takes a FLEQ program, got "
                         f"{type(program).__name__}")
    return FleqGeometry(program.d, program.functions, len(program.cells),
                        len(program.instructions) + 1)


def eof_instruction(program: FleqProgram) -> FleqInstruction:
    """No write, branch on the zero cell to itself: a no-op that stays put."""
    return FleqInstruction(None, 0, 0, 0, 0, program.eof, (1, 1), text="EOF")


def constant_rows(geometry: FleqGeometry, layout: Layout) -> np.ndarray:
    """X with only the geometry's constant rows filled in."""
    X = np.zeros((layout.rows, layout.columns))
    d, B = geometry.d, geometry.pos_bits
    scratch = layout.regions["scratch"]
    X[layout["one"]] = 1.0
    X[layout["scratch"], scratch.start:scratch.stop] = 1.0
    X[layout["nullkey"], 0] = 1.0
    X[layout["pos"], geometry.memory_start:] = \
        pm1_codes(np.arange(geometry.memory_start, geometry.columns), B).T
    for name in ("gA", "gB", "gC"):
        X[layout[name]] = -GATE_BIG
    for index, block in enumerate(geometry.blocks):
        columns = geometry.block_columns(index)
        X[layout[f"gblock{index}"]] = -GATE_BIG
        X[layout[f"gblock{index}"], columns.start:columns.stop] = 0.0
        for role, offset in (("A", 0), ("B", d), ("C", 2 * d)):
            for k in range(d):
                column = columns.start + offset + k
                X[layout[f"is{role}"], column] = 1.0
                X[layout[f"g{role}"], column] = 0.0
                X[layout.row("kone", k), column] = 1.0
                X[layout["koff"], column] = pm1_code(k, B)
                if role == "C":
                    X[layout[f"cblock{index}"], column] = 1.0
        for name, values in block.constant_fields(d).items():
            X[layout[f"b{index}.{name}"], columns.start:columns.stop] = values
    return X


def check_fits(program: FleqProgram, geometry: FleqGeometry) -> None:
    """Raise InputError unless `geometry` is the program's own: a FLEQ geometry holds the
    program's cells, blocks and instructions exactly."""
    if geometry != fleq_geometry_for(program):
        raise InputError("the program does not fit this FLEQ geometry (use geometry_for of "
                         "the program)")


def encode_fleq(program: FleqProgram, geometry: FleqGeometry | None = None,
                layout: Layout | None = None) -> np.ndarray:
    """The punchcard X of `program` before the first pass."""
    geometry = geometry or fleq_geometry_for(program)
    check_fits(program, geometry)
    layout = layout or fleq_layout(geometry)
    X = constant_rows(geometry, layout)
    B, d = geometry.pos_bits, geometry.d
    for cell, value in enumerate(program.cells):
        start = geometry.cell_column(cell)
        X[layout["mem"], start:start + d] = value
    block_index = {name: i for i, (name, _) in enumerate(geometry.functions)}
    for index, instruction in enumerate([*program.instructions, eof_instruction(program)]):
        column = geometry.instruction_column(index)
        for name, cell in (("a", instruction.a), ("b", instruction.b), ("c", instruction.c),
                           ("flag", instruction.flag)):
            X[layout[f"i_{name}"], column] = pm1_code(geometry.cell_column(cell), B)
        X[layout["i_p"], column] = pm1_code(geometry.instruction_column(instruction.target), B)
        if instruction.function is not None:
            X[layout.row("i_m", block_index[instruction.function]), column] = 1.0
        rows, columns = instruction.shape
        X[layout["i_dh"], column] = (np.arange(d) < rows).astype(float)
        X[layout["i_dw"], column] = (np.arange(d) < columns).astype(float)
    scratch = layout.regions["scratch"]
    X[layout["pc"], scratch.start:scratch.stop] = \
        pm1_code(geometry.instruction_column(0), B)[:, None]
    return X


def decode_cells(X: np.ndarray, geometry: FleqGeometry, layout: Layout) -> list[np.ndarray]:
    """Memory cells read back from X (d x d each)."""
    X = np.asarray(X)
    d = geometry.d
    return [X[layout["mem"], geometry.cell_column(cell):geometry.cell_column(cell) + d].copy()
            for cell in range(geometry.cells)]


def decode_fleq_pc(X: np.ndarray, geometry: FleqGeometry, layout: Layout) -> int:
    """The instruction index the program counter (column 0) points at."""
    return code_value(np.asarray(X)[layout["pc"], 0]) - geometry.instruction_start
