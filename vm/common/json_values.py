"""Values made fit for JSON, which has no NaN or infinity."""

from __future__ import annotations

import math


def finite_or_null(value: object) -> object:
    """`value` with every NaN or infinite float, at any depth of dicts and lists, as None:
    such values come from a run that left its domain, which the output names beside them."""
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite_or_null(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
