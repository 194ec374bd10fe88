"""The attention modes and the mask of the `masked` one, apart from `layers` so that
building weights or choosing a mode (machines, `EngineConfig`, the command line) does not
import torch."""

from __future__ import annotations

import numpy as np

ATTENTION_MODES = ("dense", "masked")
""""dense": every query sees every key; "masked": only the keys `mask_matrix` allows."""


def mask_matrix(columns: int, scratch: int) -> np.ndarray:
    """allowed[i, j]: key i may be attended by query j (the `masked` mode)."""
    allowed = np.eye(columns, dtype=bool)
    allowed[:scratch, :] = True
    allowed[:, :scratch] = True
    return allowed
