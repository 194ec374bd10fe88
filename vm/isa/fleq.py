"""FLEQ (Theorem 2) as one object: `.fleq` sources assembled against the registered blocks
and routines, the machine built from those blocks, the exact reference, and how its real
cells are printed and named."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from assembler.fleq import assemble_fleq, assemble_fleq_file
from assembler.fleq_program import FleqProgram
from vm.common.json_values import finite_or_null
from vm.common.errors import InputError
from vm.common.signatures import Catalogue
from vm.functions import REGISTRY, dtype_parameters
from vm.isa.base import (InstructionSet, PaperComparison, ProgramOptions, RunChecks,
                         agreement_line, format_value, replay_arguments)
from vm.machines.fleq.layout import FleqGeometry, fleq_layout
from vm.machines.fleq.machine import FleqMachine, fleq_machine
from vm.machines.fleq.punchcard import check_fits, encode_fleq, fleq_geometry_for
from vm.machines.fleq.reference import FleqStep, run_fleq_reference
from vm.machines.stepping import DEFAULT_MAX_STEPS
from vm.machines.subleq.reference import RunResult
from vm.routines import ROUTINES
from vm.runtime.config import EngineConfig, check_dtype_name
from vm.runtime.export import fleq_layout_extra
from vm.machines.fleq.domains import DomainViolation, first_domain_violation
from vm.transformer.layout import Layout

if TYPE_CHECKING:
    from vm.runtime.compare import FleqComparison

CATALOGUE = Catalogue(REGISTRY, ROUTINES)
"""Every registered block and routine: what FLEQ sources may call."""
PAPER_ROUTINES = {"sgd_step": (13, 1, "Section 9, SGD with backpropagation"),
                  "sgd_step_linear": (13, 1, "Section 9, SGD"),
                  "inverse": (13, 1, "Table 1, matrix inversion"),
                  "power_iteration": (13, 1, "Table 1, power iteration")}
"""Routines the paper builds a transformer for: (layers, heads, where)."""
PAPER_PROGRAMS = {"matrix_inverse.fleq": "inverse", "power_iteration.fleq": "power_iteration"}
"""Programs that write a routine's expansion out by hand (programs/fleq), by file name."""


@dataclass
class FleqRun(RunResult):
    """A run, and the first step that left a domain (None: none did): for the reference the
    machine's, for the transformer also the domain a block's error bound covers in the
    run's dtype (`Fleq.run_transformer`)."""

    domain: DomainViolation | None = None


class Fleq(InstructionSet):
    name = "fleq"
    suffixes = (".fleq",)
    program_type = FleqProgram
    geometry_type = FleqGeometry
    record_type = FleqStep
    result_type = FleqRun
    comparison_type = ("vm.runtime.compare", "FleqComparison")

    def load(self, path: Path, options: ProgramOptions = ProgramOptions()
             ) -> tuple[FleqProgram, FleqGeometry]:
        if options.bits is not None or options.scratch is not None:
            raise InputError("--bits and --scratch apply to SUBLEQ programs, not .fleq")
        program = self.assemble_file(path, dtype=options.dtype, d=options.block_size,
                                     parameters=options.parameters,
                                     functions=options.functions, progress=options.progress)
        return program, fleq_geometry_for(program)

    def assemble_text(self, text: str, file: str = "<source>", dtype: str | None = None,
                      **options: Any) -> FleqProgram:
        """`assembler.fleq.assemble_fleq` against the registered blocks and routines, with
        the block parameters of `dtype` (None: the machine's, float64) unless `defaults`
        gives them: a float32 run needs its own (`load` takes the dtype from
        ProgramOptions, and this took only `defaults=dtype_parameters(dtype)`)."""
        return assemble_fleq(text, file, catalogue=CATALOGUE,
                             **self._with_dtype_defaults(dtype, options))

    def assemble_file(self, path: str | Path, dtype: str | None = None,
                      **options: Any) -> FleqProgram:
        """`assembler.fleq.assemble_fleq_file`, as `assemble_text`."""
        return assemble_fleq_file(path, catalogue=CATALOGUE,
                                  **self._with_dtype_defaults(dtype, options))

    def _with_dtype_defaults(self, dtype: str | None, options: dict) -> dict:
        dtype = check_dtype_name(dtype or self.default_dtype)
        return {"defaults": dtype_parameters(dtype), **options}

    def check_fits(self, program: FleqProgram, geometry: FleqGeometry) -> None:
        check_fits(program, geometry)

    def geometry_for(self, program: FleqProgram) -> FleqGeometry:
        return fleq_geometry_for(program)

    def machine(self, geometry: FleqGeometry, temperature: float | None = None
                ) -> FleqMachine:
        return fleq_machine(geometry, temperature)

    def layout(self, geometry: FleqGeometry) -> Layout:
        return fleq_layout(geometry)

    def encode(self, program: FleqProgram, geometry: FleqGeometry,
               layout: Layout) -> np.ndarray:
        return encode_fleq(program, geometry, layout)

    @property
    def default_dtype(self) -> str:
        return FleqMachine.default_dtype

    def run_reference(self, program: FleqProgram, max_steps: int = DEFAULT_MAX_STEPS,
                      trace: bool = False,
                      progress: Callable[[int], None] | None = None) -> FleqRun:
        """Stops at the first value outside the machine's domain (`FleqRun.domain`)."""
        fleq = run_fleq_reference(program, max_steps, trace=trace, progress=progress)
        domain = fleq.left_domain.violation(program) if fleq.left_domain else None
        return FleqRun(fleq.cells, fleq.pc, fleq.steps, fleq.halted, fleq.trace, domain)

    def run_transformer(self, program: FleqProgram, geometry: FleqGeometry,
                        max_steps: int = DEFAULT_MAX_STEPS,
                        config: EngineConfig = EngineConfig(),
                        progress: Callable[[int], None] | None = None,
                        trace: bool = False) -> FleqRun:
        """The shared executor's run, with its `domain`: the first step whose block call
        left the domain its error bound covers in the run's dtype, or whose value left the
        machine's (an exact replay of the steps, as `run_checks`). A program assembled with
        float64's block parameters and run in float32 came back halted, with no word that
        its errors were unbounded; `ltvm run` prints the same on its `domain:` line."""
        result = super().run_transformer(program, geometry, max_steps, config, progress, trace)
        violation = first_domain_violation(program, result.steps,
                                           config.dtype or self.default_dtype)
        return FleqRun(result.memory, result.pc, result.steps, result.halted, result.trace,
                       violation)

    def reference_checks(self, program: FleqProgram, result: FleqRun) -> RunChecks:
        """The machine's domain, as the transformer run's `domain:` line names it."""
        return RunChecks({"domain": "ok" if result.domain is None
                          else result.domain.describe()}, result.domain is None)

    def compare(self, program: FleqProgram, geometry: FleqGeometry,
                max_steps: int = DEFAULT_MAX_STEPS,
                config: EngineConfig = EngineConfig(),
                progress: Callable[[int], None] | None = None
                ) -> FleqComparison:
        from vm.runtime.compare import compare_fleq  # torch: only runs that compare pay it
        return compare_fleq(program, geometry, max_steps, config, progress)

    def compare_report(self, result: FleqComparison, as_json: bool) -> str:
        """Text, or JSON where a non-finite figure is null (`domain` or a `not finite`
        divergence says why; a relative error is infinite where the exact value is all
        zero and the written one is not)."""
        if as_json:
            steps = [{"step": e.step, "pc": e.pc, "instruction": e.instruction, "cell": e.cell,
                      "abs_error": e.absolute, "rel_error": e.relative,
                      "local_abs_error": e.local_absolute,
                      "transformer": e.transformer.tolist(), "reference": e.reference.tolist()}
                     for e in result.errors]
            return json.dumps(finite_or_null(
                {"ok": result.ok, "steps": result.steps, "halted": result.halted,
                 "max_abs_error": result.max_absolute, "max_rel_error": result.max_relative,
                 "exact_zero_writes": len(result.exact_zero_writes),
                 "writes": steps, "domain": result.domain or "ok",
                 "branch_divergence": result.branch.__dict__ if result.branch else None}),
                indent=2, allow_nan=False)
        lines = [f"{'step':>6} {'pc':>4}  {'instruction':<32} {'cell':<8} {'abs error':>10} "
                 f"{'rel error':>10} {'block alone':>11}"]
        for e in result.errors:
            relative = "none" if e.exact_zero else f"{e.relative:.3g}"
            lines.append(f"{e.step:>6} {e.pc:>4}  {e.instruction:<32} {e.cell:<8} "
                         f"{e.absolute:>10.3g} {relative:>10} {e.local_absolute:>11.3g}")
        if result.domain is not None:
            lines.append(f"domain: {result.domain}")
        elif result.branch is not None:
            prefix = "branch " if result.branch.field == "pc" else ""
            lines.append(f"{prefix}{result.branch.describe()}")
        else:
            lines.append(f"{agreement_line('branches agree', result.steps, result.halted)}; "
                         f"max abs error {result.max_absolute:.3g}, max rel error "
                         f"{result.max_relative:.3g}{_exact_zeros(result)}")
        return "\n".join(lines)

    def run_checks(self, program: FleqProgram, steps: int, dtype: str | None = None
                   ) -> RunChecks:
        """Every block call of the run inside the domain its error bound covers, every value
        inside the machine's magnitude domain and every counter exact in `dtype` (found by
        an exact replay of the same steps)."""
        steps = replay_arguments(steps, dtype)
        violation = first_domain_violation(program, steps, dtype or self.default_dtype)
        return RunChecks({"domain": "ok" if violation is None else violation.describe()},
                         violation is None,
                         violation.step + 1 if violation is not None and violation.stops
                         else None)

    def named_memory(self, program: FleqProgram, memory: list) -> dict:
        return program.named_memory(memory)

    def trace_line(self, program: FleqProgram, record: FleqStep) -> str:
        written = ""
        if record.written is not None:
            variable = next((v for v in program.variables.values()
                             if v.cell == record.written), None)
            rows, columns = variable.shape if variable else (1, 1)
            value = record.new[:rows, :columns]
            shown = format_value(float(value[0, 0]) if value.size == 1 else value.tolist())
            written = f"  {program.cell_name(record.written)} = {shown}"
        branch = f"jump -> {record.next_pc}" if record.jumped else f"next -> {record.next_pc}"
        return (f"{record.step:>6}  pc {record.pc:<4} {program.instruction_text(record.pc):<32}"
                f"{written}  {branch}")

    def listing(self, program: FleqProgram) -> str:
        lines = []
        for index in range(program.eof):
            label = program.label_at(index)
            lines.append(f"{index:>4}  {(label + ':') if label else '':<12} "
                         f"{program.instruction_text(index)}")
        return "".join(line + "\n" for line in lines)

    def column_names(self, program: FleqProgram, geometry: FleqGeometry, layout: Layout
                     ) -> tuple[list[str], list[tuple[str, int, int]]]:
        """Control, each block's A/B/C/extra columns under its function name, memory cells
        by variable name (`name.k` for column k of a d-wide cell), instructions by label.
        Each block is its own region, so its columns are bordered and named on top."""
        d = geometry.d
        columns, regions = ["control"], [("control", 0, 1)]
        for index, block in enumerate(geometry.blocks):
            span = geometry.block_columns(index)
            names = [f"{block.name}.{part}{k}" for part in "ABC" for k in range(d)]
            names += [f"{block.name}.x{k}" for k in range(len(span) - 3 * d)]
            columns += names
            regions.append((block.name, span.start, span.stop))
        for cell in range(geometry.cells):
            name = program.cell_name(cell)
            columns += [name] if d == 1 else [f"{name}.{k}" for k in range(d)]
        regions.append(("memory", geometry.memory_start, geometry.instruction_start))
        columns += [program.label_at(index) or f"i{index}"
                    for index in range(geometry.instructions)]
        regions.append(("instructions", geometry.instruction_start, geometry.columns))
        return columns, regions

    def export_fields(self, program: FleqProgram, geometry: FleqGeometry) -> tuple[int, dict]:
        return geometry.pos_bits, fleq_layout_extra(program, geometry)

    def paper(self, program: FleqProgram | None, geometry: FleqGeometry) -> PaperComparison:
        blocks = [_block_row(block, geometry.d) for block in geometry.blocks]
        deepest = max((b["layers"] for b in blocks), default=0)
        return PaperComparison(9 + deepest, None, "Theorem 2: 9 + max(l_i)", blocks,
                               paper_routines(program))


def _exact_zeros(result: FleqComparison) -> str:
    """The writes of an exact 0 that the max relative error leaves out, if any."""
    writes = result.exact_zero_writes
    if not writes:
        return ""
    largest = max(e.absolute for e in writes)
    return (f" ({len(writes)} write{'s' if len(writes) > 1 else ''} of an exact 0 not counted: "
            f"abs error {'up to ' if len(writes) > 1 else ''}{largest:.3g})")


def _block_row(block, d: int) -> dict:
    return {"function": block.name, "lemma": block.lemma, "layers": block.depth(d),
            "parameters": dict(block.values), "domain": block.domain().description,
            **{f"error_bound_{dtype}": block.error_bound(dtype)
               for dtype in ("float32", "float64")},
            **{f"relative_error_bound_{dtype}": block.relative_error_bound(dtype)
               for dtype in ("float32", "float64")}}


def paper_routines(program: FleqProgram | None) -> list[dict]:
    """The paper's numbers for routines the program expanded (their generated names start
    with _ROUTINE<k>_)."""
    names = getattr(program, "variables", {})
    used = {match.group(1) for name in names
            if (match := re.match(r"^_([a-z_]+?)\d+_", name))}
    source = Path(str(getattr(program, "source", ""))).name
    if source in PAPER_PROGRAMS:
        used.add(PAPER_PROGRAMS[source])
    return [{"routine": name, "layers": layers, "heads": heads, "statement": where}
            for name, (layers, heads, where) in PAPER_ROUTINES.items() if name in used]


FLEQ = Fleq()
