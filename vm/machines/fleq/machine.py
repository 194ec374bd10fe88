"""The FLEQ looped transformer (Theorem 2), assembled from blocks.

One pass executes `mem[c] = f_m(mem[a], mem[b]); if mem[flag] <= 0 goto p`:

  layer 1   every scratch column fetches the instruction at pc (one head);
            ReLU: snap it; inc = pc + 1
  layer 2   every scratch column reads mem[flag] (one head);
            ReLU: pointers a + k, b + k, c + k for operand column k of every
            block; the selected block's C columns; the d_w column mask
  layer 3   A and B columns read their operand column, C columns the cell to
            be overwritten (two heads); ReLU: the branch bit, the d_h x d_w
            result mask, the write keys of the selected block
  layers 4.. the function blocks, all in parallel, each in its own columns
  last      write (one head): the target cell's columns attend to the selected
            block's C columns and receive -old (cancelling the old value
            exactly) and the result; ReLU: move the result in, pc = p if the
            branch bit is set else pc + 1, clear every working row

Every head moves data at MOVE_TEMPERATURE, where off-match softmax weights
underflow to exactly 0: values, reals included, arrive bit-exact, so the only
numerical error of a FLEQ step is the function block's own. Columns that do
not query a head attend to a null key (column 0, zero everywhere) instead of
averaging garbage. Layers: 4 + max(l_i), against the paper's 9 + max(l_i).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from vm.common.cache import BuildCache, Checkpoint, no_checkpoint
from vm.common.limits import check_temperature
from vm.blocks import arith
from vm.blocks.correct import clear, snap_pm1
from vm.blocks.ffn import FeedForwardBuilder
from vm.functions.base import GATE_BIG, MOVE_TEMPERATURE, BlockContext, BlockLayer
from vm.common.errors import InexactMovesError, InputError
from vm.transformer.layout import Layout
from vm.machines.fleq.layout import POINTERS, FleqGeometry, fleq_layout
from assembler.fleq_program import FleqProgram
from vm.machines.fleq.reference import FleqStep
from vm.machines.fleq.punchcard import decode_cells, decode_fleq_pc, encode_fleq
from vm.machines.subleq.machine import READ_TOLERANCE, WRITE_TOLERANCE, Check, read_error_bound
from vm.transformer.weights import HeadWeights, LayerWeights, MachineWeights

NULL_BONUS = 2.0
"""Score a non-querying column gives the null key; above the write head's bonus of 1."""
WRITE_BONUS = 1.0
CONTROL_LAYERS = 3


@dataclass(frozen=True)
class FleqMachine:
    """Weights, layout and checks of one geometry's FLEQ transformer."""

    geometry: FleqGeometry
    layout: Layout
    weights: MachineWeights
    checks: tuple[Check, ...]
    temperature: float
    default_dtype = "float64"
    """Reals: the linearized-softmax products need float64's range (docs/fleq_machine.md)."""
    real_fields: tuple[str, ...] = ("mem",)

    def encode(self, program: FleqProgram) -> np.ndarray:
        return encode_fleq(program, self.geometry, self.layout)

    def decode(self, card: np.ndarray) -> tuple[list[np.ndarray], int]:
        return (decode_cells(card, self.geometry, self.layout),
                decode_fleq_pc(card, self.geometry, self.layout))

    def check_program(self, program: FleqProgram, dtype: str) -> None:
        """A FLEQ program (another instruction set's failed with an AttributeError) whose
        integer counters start where `dtype` holds every integer exactly."""
        if not isinstance(program, FleqProgram):
            raise InputError(f"the FLEQ machine runs FLEQ programs, got "
                             f"{type(program).__name__}")
        program.check_counters(dtype)

    @staticmethod
    def step_record(program: FleqProgram, step: int, pc: int, memory: list,
                    new_memory: list, next_pc: int) -> FleqStep:
        """What one decoded pass did, in the reference's trace format."""
        instruction = program.instructions[pc]
        written = instruction.c if instruction.function is not None else None
        return FleqStep(step, pc, written, memory[written] if written is not None else None,
                        new_memory[written] if written is not None else None,
                        bool(new_memory[instruction.flag][0, 0] <= 0), next_pc)

    def temperature_is_safe(self, dtype: str) -> bool:
        """Pointer reads provably within the checked band, and reals moved bit-exactly."""
        return (read_error_bound(self.geometry.columns, self.temperature) < WRITE_TOLERANCE
                and self.moves_are_exact(dtype))

    def moves_are_exact(self, dtype: str) -> bool:
        """Every off-match weight of a moving head underflows to exactly 0 (score margin at
        least 1, so e^(-temperature) must be below the dtype's smallest subnormal)."""
        return self.temperature >= exact_move_temperature(dtype)

    def check_exact_moves(self, dtype: str) -> None:
        """Raise InexactMovesError unless reals move bit-exactly in `dtype`."""
        if not self.moves_are_exact(dtype):
            raise InexactMovesError(self.temperature, dtype, exact_move_temperature(dtype))


def exact_move_temperature(dtype: str) -> float:
    """Smallest integer temperature at which e^(-temperature) rounds to exactly 0 in `dtype`
    (below half the smallest subnormal): 746 for float64, 104 for float32."""
    return float(math.ceil(-math.log(float(np.finfo(dtype).smallest_subnormal)) + math.log(2)))


def _head(layout: Layout, queries: dict[str, np.ndarray], keys: dict[str, np.ndarray],
          values: dict[str, str], lam: float, role: str, value_sign: float = 1.0,
          extra_values: dict[str, tuple[str, float]] | None = None) -> HeadWeights:
    """A data-moving head from field-level maps: {field: (dims x size) matrix}."""
    dims = next(iter(queries.values())).shape[0]
    Q, K = np.zeros((dims, layout.rows)), np.zeros((dims, layout.rows))
    for name, matrix in queries.items():
        Q[:, layout[name]] += matrix
    for name, matrix in keys.items():
        K[:, layout[name]] += matrix
    V = np.zeros((layout.rows, layout.rows))
    for source, target in values.items():
        V[layout[target], layout[source]] += value_sign * np.eye(layout.size(source))
    for source, (target, coefficient) in (extra_values or {}).items():
        V[layout[target], layout[source]] += coefficient * np.eye(layout.size(source))
    return HeadWeights(Q, K, V, lam, role)


def _read(layout: Layout, query: str, source: str, target: str, not_querying: dict[str, float],
          lam: float, role: str) -> HeadWeights:
    """target += source of the column whose `pos` equals this column's `query` code; columns
    where the `not_querying` form (of one-row fields) is 1 get the null column (all zero)."""
    B = layout.size("pos")
    identity = np.vstack([np.eye(B), np.zeros((1, B))])
    null = np.zeros((B + 1, 1))
    null[B, 0] = NULL_BONUS
    queries = {query: identity}
    for name, coefficient in not_querying.items():
        queries[name] = queries.get(name, 0) + coefficient * null
    keys = {"pos": identity, "nullkey": np.eye(B + 1)[:, [B]]}
    return _head(layout, queries, keys, {source: target}, lam, role)


def _fetch_layer(layout: Layout, lam: float) -> LayerWeights:
    gate = layout.row("scratch")
    ffn = FeedForwardBuilder(layout)
    for name in POINTERS:
        snap_pm1(ffn, f"cur_{name}", gate)
    for name in ("cur_m", "cur_dh", "cur_dw"):
        clear(ffn, name)
        for row in ffn.rows(name):
            arith.add_step(ffn, {row: 2.0}, 1, gate, row, 1.0)
    arith.add_words(ffn, [("pc", False)], 1, "inc", gate)
    head = _read(layout, "pc", "instr", "cur", {"one": 1.0, "scratch": -1.0}, lam,
                 "fetch instruction at pc")
    return LayerWeights((head,), ffn.build(), "fetch instruction; pc + 1")


def _pointer_layer(layout: Layout, geometry: FleqGeometry, lam: float) -> LayerWeights:
    ffn = FeedForwardBuilder(layout)
    for role, pointer, target in (("isA", "cur_a", "ptr"), ("isB", "cur_b", "ptr"),
                                  ("isC", "cur_c", "wptr")):
        arith.add_words(ffn, [(pointer, False), ("koff", False)], 0, target, layout.row(role))
    sel = layout.row("sel")
    for index in range(len(geometry.blocks)):
        ffn.relu_into({layout.row("cur_m", index): 1.0, layout.row(f"cblock{index}"): 1.0},
                      sel, 1.0, bias=-1.0)
    for k in range(geometry.d):
        ffn.relu_into({layout.row("kone", k): 1.0, layout.row("cur_dw", k): 1.0},
                      layout.row("dwk"), 1.0, bias=-1.0)
    head = _read(layout, "cur_flag", "mem", "flagval", {"one": 1.0, "scratch": -1.0}, lam,
                 "read mem[flag]")
    return LayerWeights((head,), ffn.build(), "pointers a+k, b+k, c+k; selected block")


def _operand_layer(layout: Layout, geometry: FleqGeometry, lam: float) -> LayerWeights:
    ffn = FeedForwardBuilder(layout)
    gate = layout.row("scratch")
    flag = layout.row("flagval", 0)
    arith.add_step(ffn, {flag: -1.0}, 0, gate, layout.row("fb"), 1.0)
    one, dwk, is_c = layout.row("one"), layout.row("dwk"), layout.row("isC")
    for r in range(geometry.d):
        row = layout.row("resmask", r)
        ffn.relu_into({one: 1.0}, row, -GATE_BIG)
        ffn.relu_into({layout.row("cur_dh", r): 1.0, dwk: 1.0, is_c: 1.0}, row, GATE_BIG,
                      bias=-2.0)
    sel = layout.row("sel")
    for index in range(layout.size("wkey")):
        source, target = layout.row("wptr", index), layout.row("wkey", index)
        ffn.relu_into({source: 1.0, sel: 1.0}, target, 1.0, bias=-1.0)
        ffn.relu_into({source: -1.0, sel: 1.0}, target, -1.0, bias=-1.0)
    heads = (_read(layout, "ptr", "mem", "rd", {"one": 1.0, "isA": -1.0, "isB": -1.0}, lam,
                   "A and B columns read their operand column"),
             _read(layout, "wptr", "mem", "old", {"one": 1.0, "isC": -1.0}, lam,
                   "C columns read the cell they will overwrite"))
    return LayerWeights(heads, ffn.build(), "read operands; branch bit; result mask")


def _write_layer(layout: Layout, geometry: FleqGeometry, lam: float) -> LayerWeights:
    B = geometry.pos_bits
    dims = B + 2
    code = np.vstack([np.eye(B), np.zeros((2, B))])
    queries = {"pos": code, "one": np.eye(dims)[:, [B]] * WRITE_BONUS,
               "scratch": np.eye(dims)[:, [B + 1]] * NULL_BONUS}
    keys = {"pos": code, "wkey": code, "sel": np.eye(dims)[:, [B]],
            "nullkey": np.eye(dims)[:, [B + 1]]}
    head = _head(layout, queries, keys, {"res": "wbuf"}, lam,
                 "write: target cell takes -old and the result", extra_values={"old": ("mem", -1.0)})
    ffn = FeedForwardBuilder(layout)
    for r in range(geometry.d):
        ffn.relu_into({layout.row("wbuf", r): 1.0}, layout.row("mem", r), 1.0)
        ffn.relu_into({layout.row("wbuf", r): -1.0}, layout.row("mem", r), -1.0)
    clear(ffn, "pc")
    gate = layout.row("scratch")
    arith.select_code(ffn, {layout.row("fb"): 1.0}, "cur_p", "inc", "pc", gate)
    for name in layout.working():
        clear(ffn, name)
    return LayerWeights((head,), ffn.build(), "write mem[c]; branch; clear working rows")


def _block_layers(layout: Layout, geometry: FleqGeometry, checkpoint: Checkpoint
                  ) -> list[LayerWeights]:
    """The function blocks' layers; `checkpoint` is called before each block and each
    layer's units and checks (up to a quarter of a second each on a wide program)."""
    depth = max((block.depth(geometry.d) for block in geometry.blocks), default=0)
    layers = [BlockLayer() for _ in range(depth)]
    for index, block in enumerate(geometry.blocks):
        checkpoint(f"block {index + 1} of {len(geometry.blocks)}")
        offset = depth - block.depth(geometry.d)
        context = BlockContext(block, index, geometry.d, layout, geometry.block_columns(index),
                               layers[offset:])
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused below
            block.build(context)
    built = []
    for number, layer in enumerate(layers):
        checkpoint(f"block layer {number + 1} of {depth}")
        ffn = layer.ffn.build() if layer.ffn is not None else FeedForwardBuilder(layout).build()
        roles = sorted({head.role.split(":")[0] for head in layer.heads})
        built.append(LayerWeights(tuple(layer.heads), ffn,
                                  f"function blocks, layer {number + 1} ({', '.join(roles)})"))
        _check_finite(built[-1])
    return built


def _check_finite(layer: LayerWeights) -> None:
    """Refuse a block layer with an inf or NaN weight (a block parameter so extreme that
    its fit overflowed, e.g. inv.sharpness=1e308): such a machine would compute NaN and
    decode a garbage pc, with nothing to say why."""
    if not all(np.isfinite(array).all() for array in layer.arrays()):
        raise InputError(f"the weights of {layer.role} are not finite: a block parameter "
                         f"(.function or --param) is beyond what the block can be built for")


def _checks(layout: Layout, last: int) -> tuple[Check, ...]:
    pm1, bits = (-1.0, 1.0), (0.0, 1.0)
    checks = [Check(0, "attention", f"cur_{name}", "scratch", pm1, READ_TOLERANCE)
              for name in POINTERS]
    checks += [Check(0, "attention", name, "scratch", bits, READ_TOLERANCE)
               for name in ("cur_m", "cur_dh", "cur_dw")]
    return tuple(checks)


@partial(BuildCache, typed=True)  # True == 1.0: untyped, a bool got the lam = 1 machine
def fleq_machine(geometry: FleqGeometry, temperature: float | None = None,
                 checkpoint: Checkpoint | None = None) -> FleqMachine:
    """Build (once per geometry and temperature) the FLEQ looped transformer. `checkpoint`
    is called before each function block and block layer (`_block_layers`): the weights of a
    20-sample `ltvm train --hidden 16` take 1 to 2.5 s, past `--max-seconds` in one piece."""
    checkpoint = checkpoint or no_checkpoint
    layout = fleq_layout(geometry)
    lam = MOVE_TEMPERATURE if temperature is None else float(check_temperature(temperature))
    layers = [_fetch_layer(layout, lam), _pointer_layer(layout, geometry, lam),
              _operand_layer(layout, geometry, lam),
              *_block_layers(layout, geometry, checkpoint), _write_layer(layout, geometry, lam)]
    meta = {"machine": "fleq", "geometry": geometry.as_dict(), "temperature": lam}
    weights = MachineWeights(tuple(layers), layout.rows, layout.columns,
                             geometry.scratch, meta)
    return FleqMachine(geometry, layout, weights, _checks(layout, len(layers) - 1), lam)
