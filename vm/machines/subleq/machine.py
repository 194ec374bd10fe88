"""The SUBLEQ looped transformer (Lemma 4), assembled from blocks.

One pass executes `mem[b] -= mem[a]; if mem[b] <= 0 goto c else pc + 1`:

  layer 1  attention: fetch the instruction at pc into cur (one head)
           ReLU:      snap cur to ±1; inc = pc + 1 (one-layer incrementer)
  layer 2  attention: read mem[a] into va and mem[b] into vb (two heads)
           ReLU:      snap va, vb to ±1
  layer 3  ReLU:      res = vb - va = vb + NOT va + 1 (one-layer adder)
  layer 4  attention: write res to column b (half-self write head)
           ReLU:      mem = ternary(2 wbuf - mem) in memory columns (error
                      correction); pc = cur_c if res <= 0 else inc; clear
                      every working field

Words wider than `ONE_LEVEL_MAX_BITS` use a carry-select adder whose second
layer is an extra attention-free layer (5 layers). The paper's Lemma 4 uses
9 layers: it spends separate layers on bit flipping, adding 1, adding, the
flag, and error correction; here the flag is never materialized (the branch
select reads an integer form of res directly), negation is folded into the
adder (NOT a is linear in ±1 bits), and error correction is folded into the
ReLU layers that follow each read. Heads per layer: at most 2, as in Table 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from vm.common.errors import InputError
from vm.common.limits import check_temperature
from assembler.program import Program, all_instructions
from vm.machines.subleq.reference import TraceStep
from vm.machines.subleq.punchcard import check_fits, decode_memory, decode_pc, encode
from vm.blocks import arith
from vm.blocks.adder_plan import carry_blocks
from vm.blocks.attention import read_head, write_head
from vm.blocks.correct import clear, rewrite_memory, snap_pm1
from vm.blocks.ffn import FeedForwardBuilder
from vm.common.geometry import Geometry
from vm.transformer.layout import Layout
from vm.machines.subleq.layout import subleq_layout
from vm.transformer.weights import LayerWeights, MachineWeights

DEFAULT_TARGET_ERROR = 2.0 ** -54
"""Off-match softmax weight the default temperature allows: below half an ulp
of 1.0 in float64, so the match's weight rounds to exactly 1 and every read is
bit-exact in float64 and float32 alike."""
READ_TOLERANCE = 0.25
"""Checked mode's band around a read's exact value: half the snap's margin (0.5)."""
WRITE_TOLERANCE = 0.1
"""Band around the write buffer's levels: 2 x 0.1 stays inside the ternary's 0.25."""
STATE_TOLERANCE = 1e-3
"""Band around state values between passes (they hold a few ulps at most)."""
WRITE_BLOCK = 32.0
"""Suppresses the memory update in scratch columns (see `add_ternary`)."""


def default_temperature(columns: int, target_error: float = DEFAULT_TARGET_ERROR) -> float:
    """lam = ln((n - 1) / target) / 2.

    A read's softmax puts total weight at most (n - 1) e^(-2 lam) off the
    matching column (every other column differs in at least one bit, and
    scratch columns score 0 < B - 2), so that weight is below `target`. With
    the default target every read is exact to the last bit (about 21 for
    n = 64, 23 for n = 4096; scores stay below lam * B, far from overflow,
    and the softmax subtracts its max).
    """
    return math.log(max(columns - 1, 1) / target_error) / 2


def read_error_bound(columns: int, temperature: float) -> float:
    """Worst-case change of a read value by softmax leakage: 2 (n - 1) e^(-2 lam)."""
    return 2 * (columns - 1) * math.exp(-2 * temperature)


def temperature_is_safe(machine: "SubleqMachine") -> bool:
    """True when every read provably lands inside the tightest checked band."""
    return read_error_bound(machine.geometry.columns, machine.temperature) < WRITE_TOLERANCE


@dataclass(frozen=True)
class Check:
    """What the checked mode validates: `field` at `columns` after a sublayer,
    within `tolerance` of one of `levels`."""

    layer: int
    stage: str
    field: str
    columns: str
    levels: tuple[float, ...]
    tolerance: float


@dataclass(frozen=True)
class SubleqMachine:
    """Weights, layout and checks of one geometry's SUBLEQ transformer."""

    geometry: Geometry
    layout: Layout
    weights: MachineWeights
    checks: tuple[Check, ...]
    temperature: float
    default_dtype = "float32"
    real_fields: tuple[str, ...] = ()
    """State fields holding real numbers (not checked against a ±1 pattern)."""

    def encode(self, program: Program) -> np.ndarray:
        check_fits(program, self.geometry)
        return encode(program, self.geometry, self.layout)

    def decode(self, card: np.ndarray) -> tuple[list[int], int]:
        return decode_memory(card, self.layout), decode_pc(card, self.layout)

    def check_program(self, program: Program, dtype: str) -> None:
        """A SUBLEQ program (another instruction set's failed in encoding with an
        AttributeError); every word is exact in any dtype the machine runs in."""
        if not isinstance(program, Program):
            raise InputError(f"the SUBLEQ machine runs SUBLEQ programs, got "
                             f"{type(program).__name__}")

    @staticmethod
    def step_record(program: Program, step: int, pc: int, memory: list, new_memory: list,
                    next_pc: int) -> TraceStep:
        """What one decoded pass did, in the reference's trace format."""
        instruction = all_instructions(program)[pc]
        return TraceStep(step, pc, instruction.a, instruction.b, instruction.c,
                         memory[instruction.b], new_memory[instruction.b],
                         new_memory[instruction.b] <= 0, next_pc)

    def temperature_is_safe(self, dtype: str) -> bool:
        return temperature_is_safe(self)

    def check_exact_moves(self, dtype: str) -> None:
        """No real-valued data: every move is a ±1 code the checked mode validates."""


def _fetch_layer(layout: Layout, lam: float) -> LayerWeights:
    ffn = FeedForwardBuilder(layout)
    gate = layout.row("cpu")
    snap_pm1(ffn, "cur", gate)
    arith.add_words(ffn, [("pc", False)], 1, "inc", gate)
    head = read_head(layout, "pc", "pos", "instr", "cur", lam, "fetch instruction at pc")
    return LayerWeights((head,), ffn.build(), "fetch instruction; pc + 1")


def _read_layer(layout: Layout, lam: float) -> LayerWeights:
    ffn = FeedForwardBuilder(layout)
    gate = layout.row("cpu")
    snap_pm1(ffn, "va", gate)
    snap_pm1(ffn, "vb", gate)
    heads = (read_head(layout, "cur_a", "pos", "mem", "va", lam, "read mem[a]"),
             read_head(layout, "cur_b", "pos", "mem", "vb", lam, "read mem[b]"))
    return LayerWeights(heads, ffn.build(), "read operands; error correction")


def _subtract_layers(layout: Layout, bits: int) -> list[LayerWeights]:
    gate = layout.row("cpu")
    addends = [("vb", False), ("va", True)]
    blocks = carry_blocks(bits)
    first = FeedForwardBuilder(layout)
    clear(first, "va")
    clear(first, "vb")
    if blocks is None:
        arith.add_words(first, addends, 1, "res", gate)
        return [LayerWeights((), first.build(), "subtract mem[b] - mem[a]")]
    arith.add_words_stage_a(first, addends, blocks, "sum0", "sum1", "carry", gate)
    second = FeedForwardBuilder(layout)
    arith.add_words_stage_b(second, blocks, "sum0", "sum1", "carry", 1, "res", gate)
    for name in ("sum0", "sum1", "carry"):
        clear(second, name)
    return [LayerWeights((), first.build(), "subtract: block sums and carries"),
            LayerWeights((), second.build(), "subtract: carry select")]


def _write_layer(layout: Layout, lam: float) -> LayerWeights:
    ffn = FeedForwardBuilder(layout)
    gate = layout.row("cpu")
    rewrite_memory(ffn, layout.row("scratch"), WRITE_BLOCK)
    clear(ffn, "pc")
    flag = arith.non_positive_indicator(ffn, "res", gate)
    arith.select_code(ffn, flag, "cur_c", "inc", "pc", gate)
    for name in ("cur", "inc", "res", "wbuf"):
        clear(ffn, name)
    head = write_head(layout, "cur_b", "pos", ["res", "mem"], "wbuf", lam, "write res to mem[b]")
    return LayerWeights((head,), ffn.build(), "write mem[b]; branch; error correction")


def _checks(layout: Layout, last: int) -> tuple[Check, ...]:
    pm1 = (-1.0, 1.0)
    return (Check(0, "attention", "cur", "cpu", pm1, READ_TOLERANCE),
            Check(1, "attention", "va", "cpu", pm1, READ_TOLERANCE),
            Check(1, "attention", "vb", "cpu", pm1, READ_TOLERANCE),
            Check(last, "attention", "wbuf", "memory", (-1.0, 0.0, 1.0), WRITE_TOLERANCE))


@lru_cache(maxsize=32, typed=True)  # True == 1.0: untyped, a bool got the lam = 1 machine
def subleq_machine(geometry: Geometry, temperature: float | None = None) -> SubleqMachine:
    """Build (once per geometry and temperature) the SUBLEQ looped transformer."""
    layout = subleq_layout(geometry)
    lam = (default_temperature(geometry.columns) if temperature is None
           else float(check_temperature(temperature)))
    layers = [_fetch_layer(layout, lam), _read_layer(layout, lam),
              *_subtract_layers(layout, geometry.bits), _write_layer(layout, lam)]
    meta = {"machine": "subleq", "geometry": geometry.as_dict(), "temperature": lam}
    weights = MachineWeights(tuple(layers), layout.rows, layout.columns,
                             geometry.scratch, meta)
    return SubleqMachine(geometry, layout, weights, _checks(layout, len(layers) - 1), lam)
