"""What every instruction set offers the commands: one object per ISA.

A command asks the object for the program's ISA once (`vm.isa.for_path`, `for_program`)
and then calls it: assemble, choose a geometry, build the machine, run the reference,
compare, print a state, name columns. Adding an instruction set is a grammar in
`assembler/`, a folder in `vm/machines/` and one `InstructionSet` here, not an
`isinstance` in every command.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from assembler.diagnostics import check_progress
from vm.common.errors import InputError
from vm.common.limits import check_flag
from vm.machines.stepping import DEFAULT_MAX_STEPS, check_max_steps
from vm.machines.subleq.reference import RunResult
from vm.runtime.config import EngineConfig, check_dtype_name
from vm.transformer.layout import Layout
from vm.transformer.modes import ATTENTION_MODES

OUTPUT_FORMATS = ("text", "decimal", "hex")
"""How `ltvm run` shows an output stream: bytes as text, or their values."""

CHECKED_ARGUMENTS: dict[str, tuple[str | tuple[str, str], ...]] = {
    "load": ("options",), "assemble_text": ("file",), "geometry_for": ("program",),
    "machine": ("geometry",),
    "layout": ("geometry",), "encode": ("program", "geometry"),
    "run_reference": ("program", "trace"), "reference_checks": ("program", ("result", "run")),
    "run_transformer": ("program", "geometry", "trace"), "compare": ("program", "geometry"),
    "compare_report": (("result", "comparison"), "as_json"),
    "result_lines": (("result", "run"), "as_json"),
    "run_checks": ("program",), "named_memory": ("program",),
    "trace_line": ("program", "record"),
    "listing": ("program",), "column_names": ("program", "geometry"),
    "export_fields": ("program", "geometry"), "export": ("program", "geometry"),
    "paper": ("geometry", ("program", "program_or_none")), "save_csv": ("program",)}
"""The methods of an instruction set whose program and geometry it refuses when they are
another instruction set's (or None), and which of the two each takes (`paper` takes None
or its own program); `load` refuses options that are no ProgramOptions, `assemble_text` a
file name that is no path (`check_file`), the runs a trace flag that is no bool,
`compare_report` what is not its `compare`'s result, `reference_checks` and `result_lines`
what is no run's result. A (parameter, check) pair names a check unlike its parameter:
`result` is a comparison to one method, a run to others. Checked in one place,
`InstructionSet.__init_subclass__`: calls that missed a check failed on a missing
attribute (SUBLEQ.named_memory(fleq_program)) or answered for the wrong machine
(FLEQ.listing(subleq_program) printed a SUBLEQ listing). A `layout` beside the geometry
is checked to be that geometry's (`check_layout`), and a program beside a geometry to fit
it (`check_fits`: column_names named the columns of a geometry too small for the
program)."""


def _checking(method: Callable, arguments: tuple[str, ...]) -> Callable:
    """`method` calling the instruction set's check_<name> on each of its `arguments` first.
    The arguments given are named from the parameters' order (a wrong call still fails in
    `method` itself): binding the signature per call cost 4 us, 3.5x `trace_line`'s own
    work, which `run --trace` calls for every printed step."""
    parameters = list(inspect.signature(method).parameters)[1:]
    checks = [(name, f"check_{name}") if isinstance(name, str) else (name[0], f"check_{name[1]}")
              for name in arguments]
    fits = "program" in arguments and "geometry" in arguments  # `paper` takes None for one

    @functools.wraps(method)
    def checked(self: InstructionSet, *args: Any, **kwargs: Any) -> Any:
        bound = dict(zip(parameters, args))
        bound.update(kwargs)
        for name, check in checks:
            if name in bound:
                getattr(self, check)(bound[name])
        if "geometry" in bound:  # else `method` says which argument is missing
            if "layout" in bound:
                self.check_layout(bound["layout"], bound["geometry"])
            if fits and "program" in bound:
                self.check_fits(bound["program"], bound["geometry"])
        return method(self, *args, **kwargs)

    checked.checks_arguments = True
    return checked


def check_output_format(output_format: Any) -> None:
    """InputError unless `output_format` is one of OUTPUT_FORMATS ("binary" or "Decimal"
    printed hex)."""
    if output_format not in OUTPUT_FORMATS:
        raise InputError(f"output_format must be one of {', '.join(OUTPUT_FORMATS)}, got "
                         f"{output_format!r}")


def replay_arguments(steps: Any, dtype: Any) -> int:
    """`run_checks`' step count as an int, once it and `dtype` (None or one of DTYPE_NAMES)
    are known good: steps=None failed in `<`, dtype 'float16' with a KeyError."""
    steps = check_max_steps(steps)
    if dtype is not None:
        check_dtype_name(dtype)
    return steps


def format_value(value: int | float | list) -> str:
    """A memory value as commands print it: integers as they are, reals to 10 digits,
    lists (arrays, matrices) in brackets."""
    if isinstance(value, list):
        return f"[{', '.join(format_value(v) for v in value)}]"
    return f"{value:.10g}" if isinstance(value, float) else str(value)


def agreement_line(agreeing: str, steps: int, halted: bool) -> str:
    """The line `ltvm compare` ends with when no divergence was found: OK once the program
    halted, else a line that says the run stopped at the step limit (exit 1), which read
    "OK: ... (step limit reached)" beside an exit status of 1."""
    if halted:
        return f"OK: {agreeing} for {steps} steps (halted)"
    return (f"NOT HALTED: {agreeing} for {steps} steps, the step limit, and the program has "
            f"not halted (raise --max-steps)")


@dataclass(frozen=True)
class ProgramOptions:
    """What the command line may say about how to assemble a program; each ISA takes the
    options that apply to it and refuses the others."""

    bits: int | None = None
    scratch: int | None = None
    block_size: int | None = None
    parameters: dict[str, dict[str, float]] = field(default_factory=dict)
    functions: list[str] | None = None
    dtype: str | None = None
    progress: Callable[[int], None] | None = None
    """Called with the count of source lines parsed (a long assembly shows progress)."""

    def __post_init__(self) -> None:
        """Refuse here the options an instruction set may not read: SUBLEQ and VSUBLEQ took
        dtype='float16' and progress=5 (the assemblers that read them refuse them)."""
        if self.dtype is not None:
            check_dtype_name(self.dtype)
        check_progress(self.progress)


@dataclass(frozen=True)
class PaperComparison:
    """What `ltvm inspect` prints beside the built machine: the paper's numbers."""

    layers: int
    heads: int | None
    statement: str
    blocks: list[dict] = field(default_factory=list)
    routines: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class RunChecks:
    """Checks a finished transformer run must pass beyond halting (FLEQ: block domains)."""

    lines: dict[str, str] = field(default_factory=dict)
    ok: bool = True
    stop: int | None = None
    """The steps after which the exact run stops (FLEQ: a written value the machine cannot
    hold at all), where the transformer's went on past them; None when it does not stop."""


class InstructionSet(ABC):
    """One instruction set: its sources, geometry, machine, reference and presentation."""

    name: str
    suffixes: tuple[str, ...]
    program_type: type
    geometry_type: type
    record_type: type
    """What `trace_line` prints: one step of a traced run (`trace=True`)."""
    result_type: type
    """What its runs return (`run_reference`, `run_transformer`)."""
    comparison_type: tuple[str, str]
    """(module, class) of what `compare` returns, by name: the module imports torch, which
    an instruction set loads only for the runs that need it."""
    writes_csv: bool = False
    """Whether `save_csv` can hold its programs (the column-index CSV pair)."""
    reads_input: bool = False
    """Whether its programs read an input stream and write an output tape
    (`run_reference(..., input_bytes=)`, `run_transformer(..., input_bytes=, max_output=)`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Wrap each of CHECKED_ARGUMENTS' methods in the checks of its arguments."""
        super().__init_subclass__(**kwargs)
        for name, arguments in CHECKED_ARGUMENTS.items():
            method = getattr(cls, name)
            if not getattr(method, "checks_arguments", False):
                setattr(cls, name, _checking(method, arguments))

    def check_program(self, program: Any) -> None:
        """Refuse what is not this instruction set's program (another ISA's, None) by name:
        it failed deep in the machine or the reference on a missing attribute."""
        if not isinstance(program, self.program_type):
            raise InputError(f"{self.name.upper()} takes a {self.name.upper()} program "
                             f"({self.program_type.__name__}), got {type(program).__name__}")

    def check_program_or_none(self, program: Any) -> None:
        """`check_program`, where None stands for no program (`paper`: a SUBLEQ program, 5 or
        'x' gave FLEQ's numbers as if the program had been FLEQ's)."""
        if program is not None:
            self.check_program(program)

    def check_options(self, options: Any) -> None:
        """Refuse `load` options that are no ProgramOptions (None, a dict of them): they
        failed on a missing attribute (`.block_size`, `.bits`)."""
        if not isinstance(options, ProgramOptions):
            raise InputError(f"options must be a vm.isa.ProgramOptions, got "
                             f"{type(options).__name__}")

    def check_record(self, record: Any) -> None:
        """Refuse a `trace_line` record that is not one of this instruction set's traced
        steps: None, a number or another set's step failed on a missing attribute ('pc',
        'written', 'a')."""
        if not isinstance(record, self.record_type):
            raise InputError(f"{self.name.upper()}.trace_line takes a step of a traced run "
                             f"({self.record_type.__name__}, from trace=True), got "
                             f"{type(record).__name__}")

    def check_trace(self, trace: Any) -> None:
        """Refuse a `run_reference` trace flag that is not True or False: any truthy value
        ("no", 5) recorded every step, a run's whole history in memory."""
        check_flag(trace, "trace")

    def check_run(self, result: Any) -> None:
        """Refuse a run's result that is not one of this instruction set's runs (None, a
        comparison, another set's run): FLEQ.reference_checks(program, None) failed on a
        missing attribute ('domain'), VSUBLEQ.result_lines(None) on 'output', and the others
        answered for it."""
        if not isinstance(result, self.result_type):
            raise InputError(f"result must be a {self.name.upper()} run's result "
                             f"({self.result_type.__name__}, from run_reference or "
                             f"run_transformer), got {type(result).__name__}")

    def check_comparison(self, result: Any) -> None:
        """Refuse a `compare_report` result that is not this instruction set's comparison
        (None, a run's result, another set's): it failed on a missing attribute ('ok',
        'errors'). A class whose module is not imported yet has no instances to accept."""
        module, name = self.comparison_type
        loaded = sys.modules.get(module)
        if loaded is None or not isinstance(result, getattr(loaded, name)):
            raise InputError(f"{self.name.upper()}.compare_report takes the result of "
                             f"{self.name.upper()}.compare ({name}), got {type(result).__name__}")

    def check_as_json(self, as_json: Any) -> None:
        """Refuse an `as_json` flag that is not True or False, as `check_trace`: "no" gave
        JSON."""
        check_flag(as_json, "as_json")

    def check_file(self, file: Any) -> None:
        """Refuse an `assemble_text` file name that is no path (None, a number): VSUBLEQ
        failed with a TypeError in Path() on it, SUBLEQ and FLEQ named the source 'None'."""
        if not isinstance(file, (str, os.PathLike)):
            raise InputError(f"file must be the source's name (a str), got "
                             f"{type(file).__name__}")

    def check_layout(self, layout: Any, geometry: Any) -> None:
        """Refuse a layout that is not the geometry's (another geometry's, another
        instruction set's): encode failed with a numpy broadcast ValueError or a KeyError
        on a field, column_names named the columns of another punchcard."""
        if layout != self.layout(geometry):
            raise InputError(f"the layout is not this geometry's ({type(layout).__name__}: "
                             f"pass {self.name.upper()}.layout(geometry))")

    def check_geometry(self, geometry: Any) -> None:
        """Refuse another instruction set's geometry (or None) by name, as `check_program`."""
        if not isinstance(geometry, self.geometry_type):
            raise InputError(f"{self.name.upper()} takes a {self.name.upper()} geometry "
                             f"({self.geometry_type.__name__}, from geometry_for(program)), got "
                             f"{type(geometry).__name__}")

    # -- sources and geometry -----------------------------------------------------------
    @abstractmethod
    def load(self, path: Path, options: ProgramOptions = ProgramOptions()) -> tuple[Any, Any]:
        """(program, geometry) of a source file, assembled with the options that apply."""

    @abstractmethod
    def assemble_text(self, text: str, file: str = "<source>", **options: Any) -> Any:
        """The program of a source text; `file` names it in errors (and, where the ISA
        reads two formats, says which by its suffix). Options as `load`'s, by keyword."""

    @abstractmethod
    def assemble_file(self, path: str | Path, **options: Any) -> Any:
        """The program of a source file (`load` without the geometry)."""

    @abstractmethod
    def geometry_for(self, program: Any) -> Any:
        """The smallest geometry that fits the program."""

    @abstractmethod
    def check_fits(self, program: Any, geometry: Any) -> None:
        """Refuse a geometry the program does not fit (InputError); every method that takes
        both checks it first (`CHECKED_ARGUMENTS`)."""

    # -- the machine ----------------------------------------------------------------------
    @abstractmethod
    def machine(self, geometry: Any, temperature: float | None = None) -> Any:
        """The (cached) looped transformer of a geometry."""

    @abstractmethod
    def layout(self, geometry: Any) -> Layout:
        """The residual-stream map of a geometry, without building weights."""

    @abstractmethod
    def encode(self, program: Any, geometry: Any, layout: Layout) -> np.ndarray:
        """The punchcard X of the program before the first pass."""

    @property
    @abstractmethod
    def default_dtype(self) -> str:
        """The dtype runs use unless told otherwise."""

    # -- the reference and comparison -------------------------------------------------------
    @abstractmethod
    def run_reference(self, program: Any, max_steps: int = DEFAULT_MAX_STEPS, trace: bool = False,
                      progress: Callable[[int], None] | None = None) -> RunResult:
        """Run the exact interpreter; `progress` gets the step count now and then and may
        end the run by raising (TimeLimitExceeded)."""

    def reference_checks(self, program: Any, result: RunResult) -> RunChecks:
        """Checks a finished reference run must pass beyond halting; none unless the ISA
        has some (FLEQ: the machine's domain)."""
        return RunChecks()

    def run_transformer(self, program: Any, geometry: Any, max_steps: int = DEFAULT_MAX_STEPS,
                        config: EngineConfig = EngineConfig(),
                        progress: Callable[[int], None] | None = None,
                        trace: bool = False) -> RunResult:
        """Run on the looped transformer: the shared batched executor unless the ISA has
        its own runner."""
        from vm.runtime.executor import run_traced, run_transformer  # torch: transformer only
        if trace:
            return run_traced(program, geometry, max_steps, config, progress)
        return run_transformer(program, geometry, max_steps, config, progress)

    @abstractmethod
    def compare(self, program: Any, geometry: Any, max_steps: int = DEFAULT_MAX_STEPS,
                config: EngineConfig = EngineConfig(),
                progress: Callable[[int], None] | None = None) -> Any:
        """Transformer and reference in lockstep; the result has `ok` and `halted`."""

    @abstractmethod
    def compare_report(self, result: Any, as_json: bool) -> str:
        """The comparison as printed by `ltvm compare`."""

    def run_checks(self, program: Any, steps: int, dtype: str | None = None) -> RunChecks:
        """Checks after a transformer run of `steps` steps in `dtype` (None: the ISA's
        default); none unless the ISA has some, but the arguments are checked alike
        (`replay_arguments`: SUBLEQ.run_checks(program, -1, 'float16') answered 'ok')."""
        replay_arguments(steps, dtype)
        return RunChecks()

    # -- presentation -------------------------------------------------------------------
    def result_lines(self, result: Any, output_format: str = "text",
                     as_json: bool = False) -> dict[str, object]:
        """Lines a finished run prints beside its memory (an output stream, in
        `output_format`: one of OUTPUT_FORMATS); JSON values when `as_json`. None by default,
        but the format is checked alike: SUBLEQ and FLEQ took 'xml', which VSUBLEQ refused."""
        check_output_format(output_format)
        return {}

    @abstractmethod
    def named_memory(self, program: Any, memory: list) -> dict:
        """Final memory by name."""

    @abstractmethod
    def trace_line(self, program: Any, record: Any) -> str:
        """One executed step as `ltvm run --trace` prints it."""

    @abstractmethod
    def listing(self, program: Any) -> str:
        """The program one instruction a line (`ltvm asm --listing`)."""

    @abstractmethod
    def column_names(self, program: Any, geometry: Any, layout: Layout
                     ) -> tuple[list[str], list[tuple[str, int, int]]]:
        """A name for every column of X, and the named column regions (pictures)."""

    @abstractmethod
    def export_fields(self, program: Any, geometry: Any) -> tuple[int, dict]:
        """(bits of the pc code, the ISA's part of layout.json) for `ltvm export`."""

    def export(self, program: Any, geometry: Any, directory: str | Path,
               temperature: float | None = None, attention: str = "masked",
               fmt: str = "npz") -> Path:
        """What `ltvm export` writes, in one call (vm/runtime/export.py: the weights, layout.json
        and punchcard.npy, all or nothing): the machine is built at `temperature` and, for
        FLEQ, its moves are checked exact in the dtype the export names. Returns the
        directory."""
        from vm.runtime.export import FLEQ_DTYPE, check_export_directory, export
        if attention not in ATTENTION_MODES:
            raise InputError(f"attention must be one of {', '.join(ATTENTION_MODES)}, got "
                             f"{attention!r}")
        check_export_directory(directory)  # before the machine is built
        machine = self.machine(geometry, temperature)
        machine.check_exact_moves(FLEQ_DTYPE)
        bits, extra = self.export_fields(program, geometry)
        return export(directory, machine.weights, machine.layout, machine.encode(program), bits,
                      attention == "masked", extra, fmt)

    @abstractmethod
    def paper(self, program: Any, geometry: Any) -> PaperComparison:
        """The paper's layer and head counts for this machine (`ltvm inspect`)."""

    def save_csv(self, program: Any, directory: str, scratch: int) -> tuple[Path, Path]:
        """Write the column-index CSV pair (only where `writes_csv`)."""
        raise InputError(f"the CSV format has no {self.name.upper()} instructions")
