"""Where the transformer is exact: lockstep runs over word sizes, widths, dtypes, temperatures
(SUBLEQ), and over word and memory sizes with random self-modifying programs that read and
write bytes (standard SUBLEQ, `run_vsubleq_cell`).

Each cell of the sweep runs a batch of random non-halting programs of one
geometry in lockstep with the reference interpreter (memory and program
counter compared after every step), in checked mode. A cell ends as:

  exact            every step agreed
  precision error  the checked mode stopped the run (step and field given)
  WRONG            a step disagreed without any error: the failure this
                   project exists to prevent; the sweep script exits 1 on it
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from vm.machines.vsubleq.reference import Image
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


# -- standard SUBLEQ -------------------------------------------------------------------
INPUT_BYTES = 24
"""Input bytes of every random standard SUBLEQ program."""


def self_modifying_images(memory: int, bits: int, count: int, seed: int = 0
                          ) -> list[tuple[Image, bytes]]:
    """`count` random standard SUBLEQ images of `memory` words, each with its input bytes.

    Random instructions at 0, 3, ... (at most 64), then `t t 0`, which jumps back to the
    start; random data after them. An a operand reads any word or the input (-1); a b
    operand writes a data word, an a or b operand word of a random instruction (the code
    rewrites its own pointers, and through them, later, anything), or the output (-1); c
    is a random instruction. Runs are long, but a rewritten jump target may halt one. The
    input is `INPUT_BYTES` random bytes (one tape length: one set of weights a cell); many
    programs read past its end.
    """
    rng = random.Random(seed)
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    code = max(2, min(64, memory // 6))
    start = 3 * (code + 1)
    operands = [3 * k + offset for k in range(code) for offset in (0, 1)]
    images = []
    for _ in range(count):
        words: list[int] = []
        for _ in range(code):
            a = -1 if rng.random() < 0.1 else rng.randrange(memory)
            choice = rng.random()
            b = (-1 if choice < 0.1 else rng.choice(operands) if choice < 0.4
                 else rng.randrange(start, memory))
            words += [a, b, 3 * rng.randrange(code)]
        words += [start, start, 0]
        words += [rng.randint(low, high) for _ in range(memory - start)]
        data = bytes(rng.randrange(256) for _ in range(INPUT_BYTES))
        images.append((Image.from_words(words, bits, f"<random m={memory}>"), data))
    return images


@dataclass(frozen=True)
class VsubleqCell:
    """One cell of the standard SUBLEQ sweep: programs run, steps compared, how many halted,
    stopped on a precision error, or diverged (a wrong state: must stay 0)."""

    memory: int
    bits: int
    programs: int
    steps: int
    halted: int
    precision_errors: int
    divergences: int
    first_divergence: str = ""


def run_vsubleq_cell(memory: int, bits: int, programs: int, steps: int, seed: int = 0,
                     checked: bool = True, dtype: str = "float32",
                     temperature: float | None = None) -> VsubleqCell:
    """Lockstep-compare `programs` random self-modifying images with input for up to
    `steps` steps each (output tape of `steps` bytes, so it never runs full)."""
    from vm.machines.vsubleq.run import compare  # torch: only a sweep pays it
    total = halted = stopped = wrong = 0
    first = ""
    for image, data in self_modifying_images(memory, bits, programs, seed):
        try:
            result = compare(image, steps, dtype, temperature=temperature, input_bytes=data,
                             max_output=steps, checked=checked)
        except PrecisionError as error:
            stopped, total = stopped + 1, total + error.step
            continue
        total, halted = total + result.steps, halted + result.halted
        if not result.ok:
            wrong += 1
            first = first or result.divergence or ""
    return VsubleqCell(memory, bits, programs, total, halted, stopped, wrong, first)
