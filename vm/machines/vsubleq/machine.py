"""The standard SUBLEQ looped transformer, assembled from `vm/blocks`.

One pass executes the instruction a b c stored in memory at pc, pc + 1, pc + 2:

  layer 1  attention: fetch the words at pc, pc+1, pc+2 into wa, wb, wc (3 heads)
           ReLU:      snap them to ±1; pn = pc + 3, pc + 4, pc + 5; fall = [pc + 3 >= m]
  layer 2  attention: read mem[a], mem[b] into va, vb, keyed by the low B bits of a, b
           ReLU:      snap va, vb; c + 1, c + 2; io_a = [a = -1], io_b = [b = -1],
                      c_out = [c < 0 or c >= m] (a high bit of c is set)
  layer 3  ReLU:      res = vb - va (one-layer adder; carry-select adds a layer for
                      N > 16); hold = io_a or io_b or halted (no write), and the stop
                      flag for each branch: sj = hold or c_out, sf = hold or fall
  layer 4  ReLU:      z >= 1 iff res <= 0; jump = [z >= 1]; halted = sj if jump else sf;
                      waddr = the low bits of b, or 0 (no column matches) when hold
  layer 5  attention: write res to mem[waddr] (half-self write head)
           ReLU:      mem = ternary(2 wbuf - mem) (error correction); each of the three
                      pc codes becomes pc if halted, else c if jump, else pc + 3
                      (a sum of three ANDs of 0/1 values); clear every working field

A halted machine is a fixed point: hold stops the write and halted keeps the pc. I/O
instructions stop it the same way (this machine does no I/O; its runner says so).
Every value a ReLU reads is an exact ±1, 0/1 or integer form, and every step has a
margin of 1/4 around integers, so a pass is exact whenever the reads are (see
docs/vsubleq_machine.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from vm.blocks import arith
from vm.blocks.adder_plan import carry_blocks
from vm.blocks.attention import read_head, write_head
from vm.blocks.correct import clear, rewrite_memory, snap_pm1
from vm.blocks.ffn import FeedForwardBuilder, Form, form_sum, scaled
from vm.machines.subleq.machine import WRITE_BLOCK, default_temperature
from vm.machines.vsubleq.layout import VGeometry, vsubleq_layout
from vm.machines.vsubleq.punchcard import decode, encode
from vm.machines.vsubleq.reference import Image
from vm.transformer.layout import Layout
from vm.transformer.modes import mask_matrix
from vm.transformer.weights import LayerWeights, MachineWeights


@dataclass(frozen=True)
class VsubleqMachine:
    """Weights and layout of one geometry's standard SUBLEQ transformer."""

    geometry: VGeometry
    layout: Layout
    weights: MachineWeights
    temperature: float
    default_dtype = "float32"

    def encode(self, image: Image) -> np.ndarray:
        return encode(image, self.geometry, self.layout)

    def decode(self, card: np.ndarray) -> tuple[list[int], int, bool]:
        return decode(card, self.layout)

    def check_exact_moves(self, dtype: str) -> None:
        """No real-valued data: every move is a ±1 code, exact at the default temperature."""


def _value(ffn: FeedForwardBuilder, field: str, gate: int) -> Form:
    """The unsigned integer of a ±1 field as a form: sum of 2^k (bit_k + g) / 2."""
    size = ffn.layout.size(field)
    return form_sum(*(scaled(arith.bit_form(ffn, field, k, gate), float(1 << k))
                      for k in range(size)))


def _count(ffn: FeedForwardBuilder, field: str, gate: int) -> Form:
    """How many bits of a ±1 field are set, as a form (small integers in any dtype)."""
    return form_sum(*(arith.bit_form(ffn, field, k, gate)
                      for k in range(ffn.layout.size(field))))


def _flag(ffn: FeedForwardBuilder, form: Form, threshold: int, gate: int, field: str) -> None:
    """field (zero before) += [form >= threshold], for an integer form."""
    arith.add_step(ffn, form, threshold, gate, ffn.row(field), 1.0)


def _fetch_layer(layout: Layout, geometry: VGeometry, lam: float) -> LayerWeights:
    ffn = FeedForwardBuilder(layout)
    gate = layout.row("cpu")
    for word in ("wa", "wb", "wc"):
        snap_pm1(ffn, word, gate)
    for offset in range(3):
        arith.add_words(ffn, [(f"pc{offset}", False)], 3, f"pn{offset}", gate)
    _flag(ffn, _value(ffn, "pc0", gate), geometry.memory - 3, gate, "fall")
    heads = tuple(read_head(layout, f"pc{offset}", "pos", "mem", word, lam,
                            f"fetch word at pc + {offset}")
                  for offset, word in enumerate(("wa", "wb", "wc")))
    return LayerWeights(heads, ffn.build(), "fetch a, b, c; pc + 3")


def _read_layer(layout: Layout, geometry: VGeometry, lam: float) -> LayerWeights:
    ffn = FeedForwardBuilder(layout)
    gate, N = layout.row("cpu"), geometry.bits
    snap_pm1(ffn, "va", gate)
    snap_pm1(ffn, "vb", gate)
    arith.add_words(ffn, [("wc_lo", False)], 1, "c1", gate)
    arith.add_words(ffn, [("wc_lo", False)], 2, "c2", gate)
    _flag(ffn, _count(ffn, "wa", gate), N, gate, "io_a")
    _flag(ffn, _count(ffn, "wb", gate), N, gate, "io_b")
    _flag(ffn, _count(ffn, "wc_hi", gate), 1, gate, "c_out")
    heads = (read_head(layout, "wa_lo", "pos", "mem", "va", lam, "read mem[a]"),
             read_head(layout, "wb_lo", "pos", "mem", "vb", lam, "read mem[b]"))
    return LayerWeights(heads, ffn.build(), "read operands; c + 1, c + 2; flags")


def _stop_flags(ffn: FeedForwardBuilder, gate: int) -> None:
    """hold, sj, sf from the 0/1 rows io_a, io_b, halted, c_out and fall; clears the inputs."""
    hold = {ffn.row("io_a"): 1.0, ffn.row("io_b"): 1.0, ffn.row("halted"): 1.0}
    _flag(ffn, hold, 1, gate, "hold")
    _flag(ffn, form_sum(hold, {ffn.row("c_out"): 1.0}), 1, gate, "sj")
    _flag(ffn, form_sum(hold, {ffn.row("fall"): 1.0}), 1, gate, "sf")
    for name in ("va", "vb", "io_a", "io_b", "c_out", "fall"):
        clear(ffn, name)


def _subtract_layers(layout: Layout, bits: int) -> list[LayerWeights]:
    gate = layout.row("cpu")
    addends = [("vb", False), ("va", True)]
    blocks = carry_blocks(bits)
    first = FeedForwardBuilder(layout)
    if blocks is None:
        arith.add_words(first, addends, 1, "res", gate)
        _stop_flags(first, gate)
        return [LayerWeights((), first.build(), "subtract mem[b] - mem[a]; stop flags")]
    arith.add_words_stage_a(first, addends, blocks, "sum0", "sum1", "carry", gate)
    _stop_flags(first, gate)
    second = FeedForwardBuilder(layout)
    arith.add_words_stage_b(second, blocks, "sum0", "sum1", "carry", 1, "res", gate)
    for name in ("sum0", "sum1", "carry"):
        clear(second, name)
    return [LayerWeights((), first.build(), "subtract: block sums and carries; stop flags"),
            LayerWeights((), second.build(), "subtract: carry select")]


def _branch_layer(layout: Layout) -> LayerWeights:
    ffn = FeedForwardBuilder(layout)
    gate = layout.row("cpu")
    z = arith.non_positive_indicator(ffn, "res", gate)
    _flag(ffn, z, 1, gate, "jump")
    clear(ffn, "halted")
    arith.select_bit(ffn, z, {ffn.row("sj"): 1.0}, {ffn.row("sf"): 1.0}, gate,
                     ffn.row("halted"), 1.0)
    hold = ffn.row("hold")
    for index in range(layout.size("waddr")):
        source, target = ffn.row("wb_lo", index), ffn.row("waddr", index)
        ffn.relu_into({source: 1.0, hold: -2.0}, target, 1.0)
        ffn.relu_into({source: -1.0, hold: -2.0}, target, -1.0)
    for name in ("hold", "sj", "sf"):
        clear(ffn, name)
    return LayerWeights((), ffn.build(), "branch flag; halt; write address")


def _write_layer(layout: Layout, lam: float) -> LayerWeights:
    ffn = FeedForwardBuilder(layout)
    gate = layout.row("cpu")
    rewrite_memory(ffn, layout.row("scratch"), WRITE_BLOCK)
    halted, jump = ffn.row("halted"), ffn.row("jump")
    minus_gate = arith.as_pm1(ffn, gate)
    for offset, target in enumerate(("wc_lo", "c1", "c2")):
        pc, after = f"pc{offset}", f"pn{offset}"
        clear(ffn, pc)
        for index in range(layout.size(pc)):
            row = ffn.row(pc, index)
            keep = {ffn.row(pc, index): 0.5, gate: -0.5, halted: 1.0}
            taken = {ffn.row(target, index): 0.5, gate: -0.5, jump: 1.0, halted: -1.0}
            fallen = {ffn.row(after, index): 0.5, gate: 0.5, jump: -1.0, halted: -1.0}
            for form in (keep, taken, fallen):
                ffn.relu_into(form, row, 2.0)
            ffn.emit(minus_gate, row, -1.0)
    for name in ("wa", "wb", "wc", "pn0", "pn1", "pn2", "c1", "c2", "jump", "res", "wbuf",
                 "waddr"):
        clear(ffn, name)
    head = write_head(layout, "waddr", "pos", ["res", "mem"], "wbuf", lam, "write res to mem[b]")
    return LayerWeights((head,), ffn.build(), "write mem[b]; next pc; error correction")


@lru_cache(maxsize=16)
def vsubleq_machine(geometry: VGeometry, temperature: float | None = None) -> VsubleqMachine:
    """Build (once per geometry and temperature) the standard SUBLEQ looped transformer."""
    layout = vsubleq_layout(geometry)
    lam = default_temperature(geometry.columns) if temperature is None else float(temperature)
    layers = [_fetch_layer(layout, geometry, lam), _read_layer(layout, geometry, lam),
              *_subtract_layers(layout, geometry.bits), _branch_layer(layout),
              _write_layer(layout, lam)]
    meta = {"machine": "vsubleq", "geometry": geometry.as_dict(), "temperature": lam}
    weights = MachineWeights(tuple(layers), layout.rows, layout.columns,
                             mask_matrix(geometry.columns, geometry.scratch), meta)
    return VsubleqMachine(geometry, layout, weights, lam)
