"""The paper's SUBLEQ (Section 5.1) as one object: `.sq` sources, the 4-layer machine,
the exact interpreter, and how its states are printed and named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from assembler.csv_format import save_csv
from assembler.disassemble import disassemble
from assembler.program import Program, check_memory
from assembler.subleq import assemble, assemble_file
from vm.common.errors import InputError
from vm.common.geometry import Geometry
from vm.isa.base import InstructionSet, PaperComparison, ProgramOptions, agreement_line
from vm.machines.subleq.layout import subleq_layout
from vm.machines.subleq.machine import SubleqMachine, subleq_machine
from vm.machines.stepping import DEFAULT_MAX_STEPS
from vm.machines.subleq.punchcard import check_fits, encode, geometry_for
from vm.machines.subleq.reference import RunResult, TraceStep, run_reference
from vm.runtime.config import EngineConfig
from vm.transformer.layout import Layout

if TYPE_CHECKING:
    from vm.runtime.compare import Comparison

PAPER = PaperComparison(9, 2, "Lemma 4")


class Subleq(InstructionSet):
    name = "subleq"
    suffixes = (".sq", "")
    program_type = Program
    geometry_type = Geometry
    record_type = TraceStep
    result_type = RunResult
    comparison_type = ("vm.runtime.compare", "Comparison")
    writes_csv = True

    def load(self, path: Path, options: ProgramOptions = ProgramOptions()
             ) -> tuple[Program, Geometry]:
        if options.block_size is not None or options.parameters or options.functions:
            raise InputError("--block-size, --param and --functions apply to .fleq programs")
        program = self.assemble_file(path, bits=options.bits, progress=options.progress)
        return program, geometry_for(program, options.scratch)

    def assemble_text(self, text: str, file: str = "<source>", bits: int | None = None,
                      progress: Callable[[int], None] | None = None) -> Program:
        return assemble(text, file, bits=bits, progress=progress)

    def assemble_file(self, path: str | Path, bits: int | None = None,
                      progress: Callable[[int], None] | None = None) -> Program:
        return assemble_file(path, bits=bits, progress=progress)

    def check_fits(self, program: Program, geometry: Geometry) -> None:
        check_fits(program, geometry)

    def geometry_for(self, program: Program, scratch: int | None = None) -> Geometry:
        return geometry_for(program, scratch)

    def machine(self, geometry: Geometry, temperature: float | None = None) -> SubleqMachine:
        return subleq_machine(geometry, temperature)

    def layout(self, geometry: Geometry) -> Layout:
        return subleq_layout(geometry)

    def encode(self, program: Program, geometry: Geometry, layout: Layout) -> np.ndarray:
        return encode(program, geometry, layout)

    @property
    def default_dtype(self) -> str:
        return SubleqMachine.default_dtype

    def run_reference(self, program: Program, max_steps: int = DEFAULT_MAX_STEPS,
                      trace: bool = False,
                      progress: Callable[[int], None] | None = None) -> RunResult:
        return run_reference(program, max_steps, trace=trace, progress=progress)

    def compare(self, program: Program, geometry: Geometry, max_steps: int = DEFAULT_MAX_STEPS,
                config: EngineConfig = EngineConfig(),
                progress: Callable[[int], None] | None = None
                ) -> Comparison:
        from vm.runtime.compare import compare_program  # torch: only runs that compare pay it
        return compare_program(program, geometry, max_steps, config, progress)

    def compare_report(self, result: Comparison, as_json: bool) -> str:
        if as_json:
            return json.dumps({"ok": result.ok, "steps": result.steps, "halted": result.halted,
                               "divergence": result.divergence.__dict__
                               if result.divergence else None}, indent=2)
        if result.ok:
            return agreement_line("transformer and reference agree", result.steps,
                                  result.halted)
        return result.divergence.describe()

    def named_memory(self, program: Program, memory: list) -> dict:
        """By name; the whole memory as `mem` for programs without names (CSV)."""
        if program.symbols:
            return program.named_memory(memory)
        check_memory(memory, len(program.memory), "word", whole=True)
        return {"mem": list(memory)}

    def trace_line(self, program: Program, record: TraceStep) -> str:
        where = program.label_at(record.pc)
        location = f"{record.pc}" + (f" ({where})" if where else "")
        branch = f"jump -> {record.next_pc}" if record.jumped else f"next -> {record.next_pc}"
        return (f"{record.step:>6}  pc {location:<14} {program.address_name(record.b)} = "
                f"{record.old} - {program.address_name(record.a)} = {record.new}  {branch}")

    def listing(self, program: Program) -> str:
        return disassemble(program)

    def column_names(self, program: Program, geometry: Geometry, layout: Layout
                     ) -> tuple[list[str], list[tuple[str, int, int]]]:
        columns = ["cpu"] + [f"scratch{j}" for j in range(1, geometry.scratch)]
        columns += [program.address_name(address) for address in range(geometry.memory)]
        columns += [program.label_at(index) or f"i{index}"
                    for index in range(geometry.instructions)]
        regions = [(name, span.start, span.stop) for name, span in layout.regions.items()]
        return columns, regions

    def export_fields(self, program: Program, geometry: Geometry) -> tuple[int, dict]:
        return geometry.bits, {
            "pc_column": 0, "halt_pc": geometry.eof_column,
            "pc_encoding": "pm1-binary-msb-first (absolute column index)",
            "memory_names": {name: [s.address, s.address + s.size]
                             for name, s in program.symbols.items()}}

    def paper(self, program: Program | None, geometry: Geometry) -> PaperComparison:
        return PAPER

    def save_csv(self, program: Program, directory: str, scratch: int) -> tuple[Path, Path]:
        return save_csv(program, directory, scratch)


SUBLEQ = Subleq()
