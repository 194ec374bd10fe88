"""Machines assembled from blocks: SUBLEQ (Lemma 4) and FLEQ (Theorem 2)."""

from __future__ import annotations

from vm.geometry import Geometry
from vm.machines.fleq_layout import FleqGeometry


def machine_for(geometry: Geometry | FleqGeometry, temperature: float | None = None):
    """The (cached) machine of a geometry: SUBLEQ for `Geometry`, FLEQ for `FleqGeometry`."""
    if isinstance(geometry, FleqGeometry):
        from vm.machines.fleq import fleq_machine
        return fleq_machine(geometry, temperature)
    from vm.machines.subleq import subleq_machine
    return subleq_machine(geometry, temperature)
