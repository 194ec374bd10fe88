"""Machines assembled from blocks: SUBLEQ (Lemma 4) and FLEQ (Theorem 2), one folder each
(layout, punchcard codec, machine, exact reference).

May import `vm.common`, `vm.transformer`, `vm.blocks`, `vm.functions` and the program
models (`assembler.program`, `assembler.fleq_program`); never a parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from vm.common.cache import Checkpoint
from vm.common.errors import InputError
from vm.common.geometry import Geometry
from vm.machines.fleq.layout import FleqGeometry

if TYPE_CHECKING:  # the machines import torch; only a run that builds one pays it
    from vm.machines.fleq.machine import FleqMachine
    from vm.machines.subleq.machine import SubleqMachine


def _subleq(geometry: Geometry, temperature: float | None, checkpoint: Checkpoint | None
            ) -> Any:
    """`checkpoint` is not called: a SUBLEQ machine builds in moments."""
    from vm.machines.subleq.machine import subleq_machine
    return subleq_machine(geometry, temperature)


def _fleq(geometry: FleqGeometry, temperature: float | None, checkpoint: Checkpoint | None
          ) -> Any:
    from vm.machines.fleq.machine import fleq_machine
    return fleq_machine(geometry, temperature, checkpoint=checkpoint)


BUILDERS: dict[type, Callable[[Any, float | None, Checkpoint | None], Any]] = {
    Geometry: _subleq, FleqGeometry: _fleq}
"""The machine builder of each geometry type (one entry per instruction set)."""


def machine_for(geometry: Geometry | FleqGeometry, temperature: float | None = None,
                checkpoint: Checkpoint | None = None) -> SubleqMachine | FleqMachine:
    """The (cached) machine of a geometry the batched executor runs; other machines (standard
    SUBLEQ, `vm.machines.vsubleq`) have their own runner, and commands built on the executor
    refuse them. `checkpoint` is called before each part of a build that runs (FLEQ: each
    function block and block layer), not on a cached machine."""
    builder = BUILDERS.get(type(geometry))
    if builder is None:
        raise InputError("this command runs SUBLEQ (.sq) and FLEQ (.fleq) programs; .dec "
                         "images run with ltvm run, compare, asm, inspect and export")
    return builder(geometry, temperature, checkpoint)
