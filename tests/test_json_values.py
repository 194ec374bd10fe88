"""`vm.common.json_values`: JSON output never carries NaN or Infinity."""

from __future__ import annotations

import json
import math

from vm.common.json_values import finite_or_null


def test_non_finite_floats_at_any_depth_become_null_and_the_rest_stays():
    value = {"a": math.inf, "b": [1.5, -math.inf, {"c": math.nan, "d": 2}], "e": "inf"}
    cleaned = finite_or_null(value)
    assert cleaned == {"a": None, "b": [1.5, None, {"c": None, "d": 2}], "e": "inf"}
    json.dumps(cleaned, allow_nan=False)
