"""Where the transformer is exact: lockstep runs over word sizes, widths, dtypes, temperatures.

Each cell of the sweep runs a batch of random non-halting programs of one
geometry in lockstep with the reference interpreter (memory and program
counter compared after every step), in checked mode. A cell ends as:

  exact            every step agreed
  precision error  the checked mode stopped the run (step and field given)
  WRONG            a step disagreed without any error: the failure this
                   project exists to prevent; the sweep script exits 1 on it
"""

from __future__ import annotations

from dataclasses import dataclass

from vm.runtime.compare import compare_programs
from vm.common.errors import PrecisionError
from vm.runtime.config import EngineConfig
from vm.common.geometry import Geometry
from vm.tools.workloads import looping_programs


@dataclass(frozen=True)
class Outcome:
    verdict: str  # "exact" | "precision error" | "WRONG"
    steps: int
    detail: str = ""

    def cell(self) -> str:
        if self.verdict == "exact":
            return f"exact ({self.steps:,} steps)"
        return f"{self.verdict} ({self.detail})"


def run_cell(geometry: Geometry, dtype: str, steps: int, batch: int = 4,
             temperature: float | None = None, seed: int = 0, checked: bool = True) -> Outcome:
    """Lockstep-compare a batch of random programs for `steps` steps."""
    programs = looping_programs(geometry, batch, seed)
    config = EngineConfig(dtype=dtype, temperature=temperature, checked=checked)
    try:
        results = compare_programs(programs, geometry, steps, config)
    except PrecisionError as error:
        return Outcome("precision error", error.step, f"step {error.step}, {error.field}")
    wrong = [result for result in results if not result.ok]
    if wrong:
        divergence = wrong[0].divergence
        return Outcome("WRONG", divergence.step, f"step {divergence.step}, {divergence.field}")
    return Outcome("exact", steps * batch)
