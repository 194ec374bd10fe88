"""The standard SUBLEQ looped transformer, assembled from `vm/blocks`.

One pass executes the instruction a b c stored in memory at pc, pc + 1, pc + 2:

  layer 1  attention: fetch the words at pc, pc+1, pc+2 into wa, wb, wc (3 heads)
           ReLU:      snap them to ±1; pn = pc + 3, pc + 4, pc + 5; fall = [pc + 3 >= m];
                      inp + 1, outp + 1; eof = [inp at the sentinel], end = [outp past
                      the output tape]
  layer 2  attention: read mem[a], mem[b] into va, vb, keyed by the low B bits of a, b,
                      and the input byte at inp into vin (3 heads)
           ReLU:      snap va, vb, vin; c + 1, c + 2; io_a = [a = -1], io_b = [b = -1],
                      c_out = [c < 0 or c >= m] (a high bit of c is set)
  layer 3  ReLU:      res = vb - va (one-layer adder; carry-select adds a layer for
                      N > 16); the I/O and stop flags: io (no branch), nomem (no memory
                      write: output or halted), outw (write the output tape), full (the
                      tape is full: halt), doin (advance inp), sj / sf (halt if the
                      branch is taken / not)
  layer 4  ReLU:      z >= 1 iff res <= 0, forced below 1 by io; jump = [z >= 1];
                      halted = sj if jump else sf; res = vin for input, va for output;
                      waddr = the code of b, of outp, or 0 (no column matches)
  layer 5  attention: write res to the column at waddr (half-self write head)
           ReLU:      mem = ternary(2 wbuf - mem) (error correction); each of the three
                      pc codes becomes pc if halted, else c if jump, else pc + 3
                      (a sum of three ANDs of 0/1 values); inp, outp advance when doin,
                      outw; clear every working field

A halted machine is a fixed point: nomem stops the write, halted keeps the pc and stops
both pointers. Every value a ReLU reads is an exact ±1, 0/1 or integer form, and every
step has a margin of 1/4 around integers, so a pass is exact whenever the reads are (see
docs/vsubleq_machine.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from vm.common.limits import check_temperature
from vm.blocks import arith
from vm.blocks.adder_plan import carry_blocks
from vm.blocks.attention import read_head, write_head
from vm.blocks.correct import clear, rewrite_memory, snap_pm1
from vm.blocks.ffn import FeedForwardBuilder, Form, form_sum, scaled
from vm.machines.subleq.machine import (READ_TOLERANCE, WRITE_BLOCK, WRITE_TOLERANCE, Check,
                                        default_temperature, read_error_bound)
from vm.machines.vsubleq.layout import VGeometry, vsubleq_layout
from vm.machines.vsubleq.punchcard import VState, decode, decode_state, encode
from vm.machines.vsubleq.reference import Image
from vm.transformer.layout import Layout
from vm.transformer.weights import HeadWeights, LayerWeights, MachineWeights


@dataclass(frozen=True)
class VsubleqMachine:
    """Weights and layout of one geometry's standard SUBLEQ transformer."""

    geometry: VGeometry
    layout: Layout
    weights: MachineWeights
    checks: tuple[Check, ...]
    temperature: float
    default_dtype = "float32"

    def encode(self, image: Image, input_bytes: bytes = b"") -> np.ndarray:
        return encode(image, self.geometry, self.layout, input_bytes)

    def decode(self, card: np.ndarray) -> tuple[list[int], int, bool]:
        return decode(card, self.layout, self.geometry)

    def decode_state(self, card: np.ndarray) -> VState:
        return decode_state(card, self.geometry, self.layout)

    def check_exact_moves(self, dtype: str) -> None:
        """No real-valued data: every move is a ±1 code, exact at the default temperature."""

    def temperature_is_safe(self, dtype: str) -> bool:
        """True when every read provably lands inside the tightest checked band (then the
        checked mode can only confirm, and is off unless asked for)."""
        return read_error_bound(self.geometry.columns, self.temperature) < WRITE_TOLERANCE


def _checks(last: int) -> tuple[Check, ...]:
    """The reads the checked mode validates: the fetched words and the operand and input
    reads (±1, in the cpu column), and the write buffer: (res + mem) / 2 in the written
    column, mem elsewhere, so -1, 0 or 1 on memory and input, and also ±1/2 on the output
    tape, whose unwritten slots hold 0."""
    pm1, write = (-1.0, 1.0), (-1.0, 0.0, 1.0)
    reads = [Check(layer, "attention", field, "scratch", pm1, READ_TOLERANCE)
             for layer, fields in ((0, ("wa", "wb", "wc")), (1, ("va", "vb", "vin")))
             for field in fields]
    writes = [Check(last, "attention", "wbuf", region, levels, WRITE_TOLERANCE)
              for region, levels in (("memory", write), ("input", write),
                                     ("output", (-1.0, -0.5, 0.0, 0.5, 1.0)))]
    return tuple(reads + writes)


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


def _rows(ffn: FeedForwardBuilder, weights: dict[str, float]) -> Form:
    """A form of 0/1 flag rows (and the gate under the name 'cpu')."""
    return {ffn.row(name): weight for name, weight in weights.items()}


def _mux(ffn: FeedForwardBuilder, field: str, source: str, flag: str, gate: int) -> None:
    """field += flag * (source - field) for ±1 fields and a 0/1 flag: field becomes source
    where the flag is set. relu(d + 2f - 2g) - relu(-d + 2f - 2g) is d for f = 1 and 0 for
    f = 0, since |d| <= 2."""
    for index in range(ffn.layout.size(field)):
        target, other = ffn.row(field, index), ffn.row(source, index)
        ffn.relu_into({other: 1.0, target: -1.0, ffn.row(flag): 2.0, gate: -2.0}, target, 1.0)
        ffn.relu_into({other: -1.0, target: 1.0, ffn.row(flag): 2.0, gate: -2.0}, target, -1.0)


def _address_head(layout: Layout, geometry: VGeometry, query: str, target: str, lam: float,
                  role: str) -> HeadWeights:
    """target += mem of the memory column whose address is the B-bit code `query`: the query
    is padded to a P-bit position code with the high bits of 0 (-1 each, on the cpu row)."""
    P, B = geometry.code_bits, geometry.pos_bits
    head = read_head(layout, "pos", "pos", "mem", target, lam, role)
    Q = np.zeros_like(head.Q)
    Q[:P - B, layout.row("cpu")] = -1.0
    Q[P - B:, layout[query]] = np.eye(B)
    return replace(head, Q=Q)


def _fetch_layer(layout: Layout, geometry: VGeometry, lam: float) -> LayerWeights:
    ffn = FeedForwardBuilder(layout)
    gate = layout.row("cpu")
    for word in ("wa", "wb", "wc"):
        snap_pm1(ffn, word, gate)
    for offset in range(3):
        arith.add_words(ffn, [(f"pc{offset}", False)], 3, f"pn{offset}", gate)
    _flag(ffn, _value(ffn, "pc0", gate), geometry.memory - 3, gate, "fall")
    arith.add_words(ffn, [("inp", False)], 1, "inp1", gate)
    arith.add_words(ffn, [("outp", False)], 1, "outp1", gate)
    _flag(ffn, _value(ffn, "inp", gate), geometry.input_start + geometry.inputs, gate, "eof")
    _flag(ffn, _value(ffn, "outp", gate), geometry.output_start + geometry.outputs, gate,
          "end")
    heads = tuple(_address_head(layout, geometry, f"pc{offset}", word, lam,
                                f"fetch word at pc + {offset}")
                  for offset, word in enumerate(("wa", "wb", "wc")))
    return LayerWeights(heads, ffn.build(), "fetch a, b, c; pc + 3; pointers + 1")


def _read_layer(layout: Layout, geometry: VGeometry, lam: float) -> LayerWeights:
    ffn = FeedForwardBuilder(layout)
    gate, N = layout.row("cpu"), geometry.bits
    for name in ("va", "vb", "vin"):
        snap_pm1(ffn, name, gate)
    arith.add_words(ffn, [("wc_lo", False)], 1, "c1", gate)
    arith.add_words(ffn, [("wc_lo", False)], 2, "c2", gate)
    _flag(ffn, _count(ffn, "wa", gate), N, gate, "io_a")
    _flag(ffn, _count(ffn, "wb", gate), N, gate, "io_b")
    _flag(ffn, _count(ffn, "wc_hi", gate), 1, gate, "c_out")
    heads = (_address_head(layout, geometry, "wa_lo", "va", lam, "read mem[a]"),
             _address_head(layout, geometry, "wb_lo", "vb", lam, "read mem[b]"),
             read_head(layout, "inp", "pos", "mem", "vin", lam, "read the input byte"))
    return LayerWeights(heads, ffn.build(), "read operands and input; c + 1, c + 2; flags")


def _stop_flags(ffn: FeedForwardBuilder, gate: int) -> None:
    """The I/O and stop flags from the 0/1 rows io_a, io_b, halted, eof, end, c_out, fall.

    Input is a = -1 (also when b = -1), output b = -1 with a != -1. An output onto a full
    tape halts (full, and the persistent overflow) instead of writing."""
    _flag(ffn, _rows(ffn, {"io_a": 1.0, "io_b": 1.0}), 1, gate, "io")
    _flag(ffn, _rows(ffn, {"io_b": 1.0, "io_a": -1.0, "halted": 2.0}), 1, gate, "nomem")
    _flag(ffn, _rows(ffn, {"io_b": 1.0, "io_a": -1.0}), 1, gate, "outsel")
    _flag(ffn, _rows(ffn, {"io_b": 1.0, "io_a": -1.0, "halted": -1.0, "end": -1.0}), 1, gate,
          "outw")
    full = _rows(ffn, {"io_b": 1.0, "io_a": -1.0, "halted": -1.0, "end": 1.0})
    _flag(ffn, full, 2, gate, "full")
    arith.add_step(ffn, full, 2, gate, ffn.row("overflow"), 1.0)
    _flag(ffn, _rows(ffn, {"io_a": 1.0, "halted": -1.0, "eof": -1.0}), 1, gate, "doin")
    _flag(ffn, _rows(ffn, {"halted": 1.0, "c_out": 1.0}), 1, gate, "sj")
    # I/O never branches, so only sf sees full: 4 (halted + fall) + full form - 1 >= 1
    # iff halted, fall or the full form reaches 2 (it is at least -3).
    _flag(ffn, form_sum(full, _rows(ffn, {"halted": 4.0, "fall": 4.0}), {gate: -1.0}), 1,
          gate, "sf")
    for name in ("vb", "io_b", "c_out", "fall", "eof", "end"):
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


def _branch_layer(layout: Layout, geometry: VGeometry) -> LayerWeights:
    ffn = FeedForwardBuilder(layout)
    gate, B, P = layout.row("cpu"), geometry.pos_bits, geometry.code_bits
    z = form_sum(arith.non_positive_indicator(ffn, "res", gate),
                 _rows(ffn, {"io": -float(geometry.bits + 2)}))
    _flag(ffn, z, 1, gate, "jump")
    clear(ffn, "halted")
    arith.select_bit(ffn, z, {ffn.row("sj"): 1.0}, {ffn.row("sf"): 1.0}, gate,
                     ffn.row("halted"), 1.0)
    _mux(ffn, "res", "vin", "io_a", gate)
    _mux(ffn, "res", "va", "outsel", gate)
    nomem, outw = ffn.row("nomem"), ffn.row("outw")
    for index in range(P):
        target = ffn.row("waddr", index)
        if index < P - B:
            ffn.relu_into({gate: 1.0, nomem: -1.0}, target, -1.0)
        else:
            source = ffn.row("wb_lo", index - (P - B))
            ffn.relu_into({source: 1.0, nomem: -2.0}, target, 1.0)
            ffn.relu_into({source: -1.0, nomem: -2.0}, target, -1.0)
        pointer = ffn.row("outp", index)
        ffn.relu_into({pointer: 1.0, outw: 2.0, gate: -2.0}, target, 1.0)
        ffn.relu_into({pointer: -1.0, outw: 2.0, gate: -2.0}, target, -1.0)
    for name in ("sj", "sf", "io", "io_a", "outsel", "nomem", "va", "vin"):
        clear(ffn, name)
    return LayerWeights((), ffn.build(), "branch flag; halt; I/O value; write address")


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
    _mux(ffn, "inp", "inp1", "doin", gate)
    _mux(ffn, "outp", "outp1", "outw", gate)
    for name in ("wa", "wb", "wc", "pn0", "pn1", "pn2", "c1", "c2", "jump", "res", "wbuf",
                 "waddr", "inp1", "outp1", "doin", "outw", "full"):
        clear(ffn, name)
    head = write_head(layout, "waddr", "pos", ["res", "mem"], "wbuf", lam, "write res")
    return LayerWeights((head,), ffn.build(), "write memory or output; next pc and pointers; "
                                              "error correction")


@lru_cache(maxsize=16, typed=True)  # True == 1.0: untyped, a bool got the lam = 1 machine
def vsubleq_machine(geometry: VGeometry, temperature: float | None = None) -> VsubleqMachine:
    """Build (once per geometry and temperature) the standard SUBLEQ looped transformer."""
    layout = vsubleq_layout(geometry)
    lam = (default_temperature(geometry.columns) if temperature is None
           else float(check_temperature(temperature)))
    layers = [_fetch_layer(layout, geometry, lam), _read_layer(layout, geometry, lam),
              *_subtract_layers(layout, geometry.bits), _branch_layer(layout, geometry),
              _write_layer(layout, lam)]
    meta = {"machine": "vsubleq", "geometry": geometry.as_dict(), "temperature": lam}
    weights = MachineWeights(tuple(layers), layout.rows, layout.columns,
                             geometry.scratch, meta)
    return VsubleqMachine(geometry, layout, weights, _checks(len(layers) - 1), lam)
