"""Standard (von Neumann) SUBLEQ as one object: `.dec` and `.vsq` images, the 5-layer machine
that fetches its instructions from the memory it writes and does byte I/O on tapes, the
exact interpreter, and how its states are printed and named."""

from __future__ import annotations

from functools import partial

import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from assembler.dec import load_image
from assembler.program import check_memory
from assembler.diagnostics import check_word_size, read_source
from assembler.vsq import assemble as assemble_vsq
from vm.common.errors import InputError
from vm.isa.base import (InstructionSet, PaperComparison, ProgramOptions, agreement_line,
                         check_output_format)
from vm.machines.stepping import DEFAULT_MAX_STEPS
from vm.machines.vsubleq.layout import VGeometry, vsubleq_layout
from vm.machines.vsubleq.machine import VsubleqMachine, vsubleq_machine
from vm.machines.vsubleq.punchcard import check_fits, check_max_output, encode, geometry_for
from vm.machines.vsubleq.reference import (MAX_BITS, Image, Result, Step, check_input_bytes,
                                           run_reference)
from vm.runtime.config import EngineConfig, check_config
from vm.transformer.layout import Layout

if TYPE_CHECKING:  # torch: only runs that compare import it
    from vm.machines.vsubleq.run import Comparison

DEFAULT_BITS = 16
"""Word size of an image unless --bits says otherwise (that of the eForth SUBLEQ image)."""
PAPER = PaperComparison(9, 2, "Lemma 4 (there with code apart from data)")


def engine_settings(config: EngineConfig) -> dict:
    """The engine settings this machine honours, as TransformerRun's keywords (the REPL's
    too); the others are refused, not ignored."""
    if check_config(config).sampling is not None:
        raise InputError("sampling is not available for standard SUBLEQ images (.dec, .vsq)")
    return {"dtype": config.dtype or VsubleqMachine.default_dtype,
            "attention": config.attention, "temperature": config.temperature,
            "device": config.device, "checked": config.checked,
            "accelerate": partial(_evaluator, evaluation=config.evaluation)}


def _tapes(input_bytes: bytes, max_output: int | None = None) -> bytes:
    """The input as bytes, after refusing what is not bytes or a tape length that is not a
    whole number (by the machine's own checks, before any work)."""
    check_max_output(max_output)
    return check_input_bytes(input_bytes)


def _evaluator(model, weights, layout, scratch: int, evaluation: str):
    """The runtime's active/fused evaluation for this machine (torch and numba: imported by
    transformer runs only)."""
    from vm.runtime.executor import evaluator_for
    return evaluator_for(model, weights, layout, scratch, evaluation)


class Vsubleq(InstructionSet):
    name = "vsubleq"
    suffixes = (".dec", ".vsq")
    program_type = Image
    geometry_type = VGeometry
    record_type = Step
    result_type = Result
    comparison_type = ("vm.machines.vsubleq.run", "Comparison")
    reads_input = True

    def load(self, path: Path, options: ProgramOptions = ProgramOptions()
             ) -> tuple[Image, VGeometry]:
        if (options.block_size is not None or options.parameters or options.functions
                or options.scratch is not None):  # block_size=0 was taken as not given
            raise InputError("--block-size, --param, --functions and --scratch do not apply "
                             "to standard SUBLEQ images (.dec, .vsq)")
        image = self.assemble_file(path, bits=options.bits)
        return image, geometry_for(image)

    def assemble_text(self, text: str, file: str = "<source>.vsq", bits: int | None = None
                      ) -> Image:
        """A .vsq assembly source, or the words of a .dec image where `file` ends in .dec
        (`bits`: the word size, else the source's .bits or DEFAULT_BITS)."""
        if Path(file).suffix != ".dec":
            assembled = assemble_vsq(text, file, bits)
            words, bits = assembled.words, assembled.bits
        else:  # the word size is checked before the words are checked against it, as
            # for .vsq: 0 ran as the default 16, '8' and 8.0 failed with TypeErrors
            bits = check_word_size(bits, MAX_BITS)
            bits = DEFAULT_BITS if bits is None else bits
            words = load_image(text, file, bits)
        return Image.from_words(words, bits, file)

    def assemble_file(self, path: str | Path, bits: int | None = None) -> Image:
        return self.assemble_text(read_source(path), str(path), bits)

    def check_fits(self, program: Image, geometry: VGeometry) -> None:
        check_fits(program, geometry)

    def geometry_for(self, program: Image) -> VGeometry:
        return geometry_for(program)

    def machine(self, geometry: VGeometry, temperature: float | None = None) -> VsubleqMachine:
        return vsubleq_machine(geometry, temperature)

    def layout(self, geometry: VGeometry) -> Layout:
        return vsubleq_layout(geometry)

    def encode(self, program: Image, geometry: VGeometry, layout: Layout) -> np.ndarray:
        return encode(program, geometry, layout)

    @property
    def default_dtype(self) -> str:
        return VsubleqMachine.default_dtype

    def run_reference(self, program: Image, max_steps: int = DEFAULT_MAX_STEPS,
                      trace: bool = False,
                      progress: Callable[[int], None] | None = None,
                      input_bytes: bytes = b"") -> Result:
        return run_reference(program, max_steps, _tapes(input_bytes), trace, progress)

    def run_transformer(self, program: Image, geometry: VGeometry,
                        max_steps: int = DEFAULT_MAX_STEPS,
                        config: EngineConfig = EngineConfig(),
                        progress: Callable[[int], None] | None = None,
                        trace: bool = False, input_bytes: bytes = b"",
                        max_output: int | None = None) -> Result:
        """The tapes are sized by the input and `max_output` (a full output tape is an
        InputError; None: what the reference writes in `max_steps` steps), so the weights
        depend on both, and the run builds its geometry from the image and the tapes:
        `geometry` (`geometry_for(program)`, tapes empty) is only checked to be this
        instruction set's."""
        from vm.machines.vsubleq.run import run_transformer  # torch: transformer runs only
        return run_transformer(program, max_steps, progress=progress, trace=trace,
                               input_bytes=_tapes(input_bytes, max_output),
                               max_output=max_output,
                               **engine_settings(config))

    def compare(self, program: Image, geometry: VGeometry, max_steps: int = DEFAULT_MAX_STEPS,
                config: EngineConfig = EngineConfig(),
                progress: Callable[[int], None] | None = None,
                input_bytes: bytes = b"", max_output: int | None = None) -> Comparison:
        """Memory, pc, halted, bytes read and output compared after every step."""
        from vm.machines.vsubleq.run import compare  # torch: only runs that compare pay it
        return compare(program, max_steps, progress=progress,
                       input_bytes=_tapes(input_bytes, max_output), max_output=max_output,
                       **engine_settings(config))

    def compare_report(self, result: Comparison, as_json: bool) -> str:
        if as_json:
            return json.dumps({"ok": result.ok, "steps": result.steps, "halted": result.halted,
                               "divergence": result.divergence}, indent=2)
        if result.ok:
            return agreement_line("transformer and reference agree", result.steps,
                                  result.halted)
        return result.divergence

    def result_lines(self, result: Result, output_format: str = "text",
                     as_json: bool = False) -> dict[str, object]:
        """The output stream, when the run wrote one: text (a JSON string), or the byte
        values in decimal or hex (a JSON list of integers). Text is the bytes read as UTF-8,
        as --input writes them (read as Latin-1, echoing 'é' showed "\\u00c3\\u00a9", which
        JSON reads as 'Ã©'); a byte that is no part of UTF-8 text is the lone surrogate
        U+DC00 + byte (Python's surrogateescape, which --input turns back into the byte)."""
        check_output_format(output_format)
        if not result.output:
            return {}
        if output_format == "text":
            text = result.output.decode("utf-8", "surrogateescape")
            return {"output": text if as_json else json.dumps(text)}
        if as_json:
            return {"output": list(result.output)}
        shown = " ".join(str(byte) if output_format == "decimal" else f"{byte:02x}"
                         for byte in result.output)
        return {"output": shown}

    def named_memory(self, program: Image, memory: list) -> dict:
        check_memory(memory, program.size, "word", whole=True)
        return {"mem": list(memory)}

    def trace_line(self, program: Image, record: Step) -> str:
        a, b = record.a % program.size, record.b % program.size  # the words used, not the
        if record.io == "in":  # operands: b = -1 wrote word m - 1, b = 100 word 100 mod m
            action = f"mem[{b}] = input {record.new}"
        elif record.io == "out":
            action = f"output mem[{a}] = {record.new}"
        else:
            action = f"mem[{b}] = {record.old} - mem[{a}] = {record.new}"
        branch = ("halt" if record.halted else
                  f"jump -> {record.next_pc}" if record.jumped else f"next -> {record.next_pc}")
        return f"{record.step:>6}  pc {record.pc:<6} {action}  {branch}"

    def listing(self, program: Image) -> str:
        """The words three a line, each line at its address (code and data look alike)."""
        words = program.memory[:program.length]
        return "".join(f"{address:>6}: {' '.join(str(w) for w in words[address:address + 3])}\n"
                       for address in range(0, len(words), 3))

    def column_names(self, program: Image, geometry: VGeometry, layout: Layout
                     ) -> tuple[list[str], list[tuple[str, int, int]]]:
        columns = (["cpu"] + [f"m{address}" for address in range(geometry.memory)]
                   + [f"in{index}" for index in range(geometry.inputs)] + ["eof"]
                   + [f"out{index}" for index in range(geometry.outputs)])
        regions = [(name, span.start, span.stop) for name, span in layout.regions.items()]
        return columns, regions

    def export_fields(self, program: Image, geometry: VGeometry) -> tuple[int, dict]:
        return geometry.bits, {
            "machine": "vsubleq", "pc_column": 0, "pc_bits": geometry.pos_bits,
            "halted_field": "halted",
            "pc_encoding": "pm1-binary-msb-first memory address; the pc field holds the codes "
                           "of pc, pc + 1 and pc + 2; halted is 1 once the machine halted"}

    def paper(self, program: Image | None, geometry: VGeometry) -> PaperComparison:
        return PAPER


VSUBLEQ = Vsubleq()
