"""Options and helpers shared by the subcommands that take a program."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

import numpy as np

from assembler.csv_format import DEFAULT_CSV_SCRATCH, SETTINGS_FILE, csv_settings, load_csv
from vm.common.files import open_for_reading
from vm.common.json_values import finite_or_null
from vm.common.errors import InputError, shown_path
from vm.isa import SUBLEQ, InstructionSet, ProgramOptions, for_path, for_program
from vm.isa.base import format_value
from vm.machines.subleq.punchcard import DEFAULT_SCRATCH
from vm.machines.subleq.reference import RunResult
from vm.common.limits import MAX_TEMPERATURE, MAX_THREADS
from vm.runtime.config import AUTO_ACTIVE_CELLS, DTYPE_NAMES, EVALUATIONS, EngineConfig
from vm.transformer.modes import ATTENTION_MODES


ASCII_INTEGER = re.compile(r"[+-]?[0-9]+")
MAX_OPTION_DIGITS = 4_300
"""Most significant digits an integer option may have: as many as int() converts (Python
refuses more with a ValueError); a huge value such as 10**400 steps reaches the option's own
check, which says what it is too large for."""


def _quoted(text: str) -> str:
    """`text` as an option's error quotes it: its first 40 characters, control characters
    escaped (an ESC in a pasted value recoloured the terminal)."""
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text[:40])
    return f"'{shown}{'...' if len(text) > 40 else ''}'"


def integer(text: str) -> int:
    """argparse type: an integer in ASCII digits with an optional sign. int() alone also took
    other scripts' digits ('--bits ٨', an Arabic-Indic eight, ran with 8-bit words), '８'
    and '1_000'."""
    digits = text.strip()
    if not ASCII_INTEGER.fullmatch(digits):
        raise argparse.ArgumentTypeError(f"{_quoted(text)} is not an integer (digits 0-9)")
    if len(digits.lstrip("+-").lstrip("0")) > MAX_OPTION_DIGITS:
        raise argparse.ArgumentTypeError(f"'{digits[:20]}...' has more than "
                                         f"{MAX_OPTION_DIGITS} digits")
    return int(digits)


def _int_at_least(text: str, minimum: int) -> int:
    value = integer(text)
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_at_least(text, 1)


def directory_path(text: str) -> Path:
    """argparse type: an output directory; '' is refused (Path('') is the current
    directory, where --out "" wrote its files)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no directory")
    return Path(text)


def file_path(text: str) -> str:
    """argparse type: a file to read or write. '' is refused (trace took it as no --gif at
    all, and said there was nothing to draw; --csv read it as the current directory), and so
    is a path ending in '/', which names a directory: `--gif out.gif/` wrote a file out.gif."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no file")
    if text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"{shown_path(text)} ends in '/', which names a "
                                         "directory; give a file")
    return text


def thread_count(text: str) -> int:
    """argparse type: a CPU thread count, 1 to MAX_THREADS."""
    value = _int_at_least(text, 1)
    if value > MAX_THREADS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_THREADS}, got {value}")
    return value


MAX_SEED = (1 << 63) - 1
"""Seeds go to torch and numpy generators, which take 0 to 2^64 - 1: a seed plus a sample's
index stays in range below 2^63."""


def seed_value(text: str) -> int:
    """argparse type: a random seed, 0 to MAX_SEED."""
    value = _int_at_least(text, 0)
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be at most 2^63 - 1, got {value}")
    return value


ASCII_REAL = re.compile(r"\s*[+-]?(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"
                        r"|inf(inity)?|nan)\s*", re.IGNORECASE)


def ascii_float(text: str) -> float:
    """float(text) of a number written in ASCII, else ValueError: float() alone also took
    other scripts' digits ('--max-seconds ٥' ran for 5 s, '--param mul.scale=٠.٥') and
    '1_0.5'."""
    if not ASCII_REAL.fullmatch(text):
        raise ValueError(f"not a number in ASCII: {text!r}")
    return float(text)


def number(text: str) -> float:
    """argparse type: a number in ASCII, inf and nan included (for an option that checks its
    own range and names itself in the message)."""
    try:
        return ascii_float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_quoted(text)} is not a number") from None


def finite_float(text: str) -> float:
    """Any finite number (a learning rate, an offset), for argparse."""
    value = number(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be finite, got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number above 0 (seconds, temperatures), for argparse."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive and finite, got {text}")
    return value


def temperature_value(text: str) -> float:
    """argparse type: a softmax temperature lam, above 0 and at most MAX_TEMPERATURE."""
    value = positive_float(text)
    if value > MAX_TEMPERATURE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_TEMPERATURE:g}, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number at or above 0 (a spread that may be zero), for argparse."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return value


def add_time_limit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-seconds", type=positive_float, metavar="S",
                        help="stop a run that has not halted after S seconds of wall time "
                             "(exit 1, with the step it reached); default: no limit")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def add_program_arguments(parser: argparse.ArgumentParser) -> None:
    """PROG or --csv CMDS MEM, with the geometry overrides (--bits/--scratch for SUBLEQ,
    --block-size/--param/--functions for FLEQ)."""
    parser.add_argument("program", nargs="?", type=file_path, metavar="PROG",
                        help="assembly source (.sq for SUBLEQ, .fleq for FLEQ)")
    parser.add_argument("--csv", nargs=2, type=file_path, metavar=("CMDS", "MEM"),
                        help="run a column-index CSV pair instead of a source file")
    parser.add_argument("--bits", type=positive_int, metavar="N",
                        help="memory word size N (default: the program's .bits, else the "
                             "smallest that holds every literal, at least 8)")
    parser.add_argument("--scratch", type=positive_int, metavar="S",
                        help=f"scratch columns (default {DEFAULT_SCRATCH}; "
                             f"{DEFAULT_CSV_SCRATCH} for --csv)")
    fleq = parser.add_argument_group("FLEQ programs")
    fleq.add_argument("--block-size", type=positive_int, metavar="D",
                      help="block size d (default: the program's .d, else its largest shape)")
    fleq.add_argument("--param", action="append", default=[], metavar="FUNC.KEY=VALUE",
                      help="a function block parameter, e.g. mul.scale=1e-5 (repeatable)")
    fleq.add_argument("--functions", type=_names, metavar="F,G,...",
                      help="also build these function blocks (to share weights across programs)")


def _names(text: str) -> list[str]:
    """Comma-separated names; none at all (`--functions ,`) is refused, not taken as unset."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected one or more names separated by commas")
    return names


def block_parameters(settings: list[str]) -> dict[str, dict[str, float]]:
    """Parse FUNC.KEY=VALUE settings into {FUNC: {KEY: VALUE}}. A value below float64's
    smallest normal number is refused, as a `.function` header refuses it: 1e-310 built
    mul's weights past float64 ('not finite'), and 1e-400, read as 0, was 'must be in
    (0, 1]'."""
    from assembler.fleq import UNDERFLOW, underflows  # lark: not for every `ltvm` call

    parameters: dict[str, dict[str, float]] = {}
    for setting in settings:
        name, _, value = setting.partition("=")
        function, _, key = name.partition(".")
        try:
            number = ascii_float(value)
        except ValueError:
            raise InputError(f"--param {setting}: expected FUNC.KEY=NUMBER") from None
        if not (function and key):
            raise InputError(f"--param {setting}: expected FUNC.KEY=NUMBER")
        if not math.isfinite(number):
            raise InputError(f"--param {setting}: the value must be a finite number")
        if underflows(value, number):
            raise InputError(f"--param {setting}: {UNDERFLOW}")
        given = parameters.setdefault(function, {})
        if key in given:  # the last one won in silence; a .function header refuses it too
            raise InputError(f"--param {function}.{key} is given twice ({given[key]:g} and "
                             f"{number:g})")
        given[key] = number
    return parameters


def bound_text(block: dict, dtype: str) -> str:
    """A block's documented error bound (a row of `isa.paper(...).blocks`) as `abs + rel|f|`,
    leaving out a part that is 0."""
    absolute, relative = block[f"error_bound_{dtype}"], block[f"relative_error_bound_{dtype}"]
    parts = ([f"{absolute:.2g}"] if absolute or not relative else []) + \
        ([f"{relative:.2g}|f|"] if relative else [])
    return " + ".join(parts)


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """How the transformer runs: dtype, device, attention, temperature, checked mode."""
    group = parser.add_argument_group("transformer")
    group.add_argument("--dtype", choices=list(DTYPE_NAMES),
                       help="floating-point type of X and the weights (default float32 for "
                            "SUBLEQ, float64 for FLEQ)")
    group.add_argument("--device", default="cpu",
                       help="torch device, e.g. cpu or cuda (default cpu)")
    group.add_argument("--attention", choices=list(ATTENTION_MODES), default="masked",
                       help="masked: scratch columns attend globally, others to themselves and "
                            "the scratchpad, O(n) a pass (default); dense: every column to "
                            "every column, O(n^2)")
    group.add_argument("--temperature", type=temperature_value, metavar="LAM",
                       help="softmax temperature lam, above 0 and at most 1e6 (default for "
                            "SUBLEQ: ln((n-1)/2^-54)/2, which makes every read exact to the "
                            "last bit; for FLEQ: 800, and at least 746 in float64 or 104 in "
                            "float32, where moved reals arrive bit-exact)")
    group.add_argument("--checked", action="store_true",
                       help="validate every read and the state after every pass; stop with a "
                            "precision error instead of computing on (also on automatically "
                            "below the provably safe temperature)")
    group.add_argument("--evaluation", choices=list(EVALUATIONS), default="auto",
                       help="active: compute each pass only on the columns it can change, "
                            "bit-identical to full and falling back to it when a run-time guard "
                            "cannot prove a skipped column unchanged (SUBLEQ, masked attention); "
                            "FLEQ: skip the blocks the instruction does not select; "
                            "fused: the SUBLEQ pass compiled with numba into one call on the CPU "
                            "(pip install 'ltvm[fast]'; compiled once by `ltvm compile`, about "
                            "four minutes on 2 cores, or on first use of --evaluation fused), "
                            "captured as CUDA graphs of 32 passes on a GPU; FLEQ: the active "
                            "pass as two CUDA graphs a pass on a GPU; full: every column in "
                            "every layer, the definition (always used by --checked and by "
                            "trace); auto (default): fused where it is available and already "
                            "compiled (it never waits for a compile: a note names `ltvm "
                            "compile`), else active (on the CPU from "
                            f"{AUTO_ACTIVE_CELLS} batch x columns on, where it is faster)"
                            " (docs/speed.md)")


SAMPLING_OPTIONS = ("--noise", "--seed", "--samples", "--strategy", "--reward", "--cell")
"""`ltvm sample`'s options, taken by the commands that run the exact transformer (run,
compare, repl) only to be refused by name: argparse's 'unrecognized arguments' did not say
that the command runs the exact transformer, or where such options belong."""


def add_sampling_refusal(parser: argparse.ArgumentParser) -> None:
    """Take `ltvm sample`'s options, hidden from --help, for `refuse_sampling_options`."""
    for option in SAMPLING_OPTIONS:
        parser.add_argument(option, dest=_sampling_name(option), help=argparse.SUPPRESS)


def _sampling_name(option: str) -> str:
    return f"sampling_{option.removeprefix('--')}"


def refuse_sampling_options(args: argparse.Namespace) -> None:
    """InputError naming the `ltvm sample` options given to a command that runs the exact
    transformer (`add_sampling_refusal`)."""
    given = [option for option in SAMPLING_OPTIONS
             if getattr(args, _sampling_name(option)) is not None]
    if given:
        raise InputError(f"{', '.join(given)}: {'options' if len(given) > 1 else 'an option'} "
                         f"of `ltvm sample`; {args.command} runs the exact transformer "
                         "(--temperature is the softmax's)")


def engine_options_given(args: argparse.Namespace) -> list[str]:
    """The transformer's options (`add_engine_arguments`) set to other than their defaults,
    as `--name`: for commands that may run no transformer to refuse rather than ignore."""
    parser = argparse.ArgumentParser(add_help=False)
    add_engine_arguments(parser)
    defaults = vars(parser.parse_args([]))
    return [f"--{name}" for name, default in defaults.items() if getattr(args, name) != default]


MAX_INPUT_BYTES = 1 << 24
"""The most input an --input-file may hold (reading stops there: /dev/zero never ends)."""


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """The input stream and output tape of programs that read input (standard SUBLEQ)."""
    given = parser.add_mutually_exclusive_group()
    given.add_argument("--input", metavar="TEXT",
                       help="the input stream of a standard SUBLEQ image (.dec, .vsq): its "
                            "bytes in UTF-8, then end of input")
    given.add_argument("--input-file", metavar="FILE",
                       help="the input stream of a standard SUBLEQ image: the file's bytes, "
                            "then end of input")
    parser.add_argument("--max-output", type=positive_int, metavar="BYTES",
                        help="output tape length of a standard SUBLEQ image on the "
                             "transformer (default: the bytes the reference writes within "
                             "--max-steps, so the tape is never too short nor wider than "
                             "needed); a run that writes more stops with an error")


def input_options(args: argparse.Namespace, isa: InstructionSet, transformer: bool = True
                  ) -> dict:
    """`input_bytes` and `max_output` as given on the command line (only those given), for
    an ISA that reads input; the options are refused for any other."""
    given: dict = {}
    if args.input is not None:
        given["input_bytes"] = os.fsencode(args.input)
    elif args.input_file is not None:
        try:
            with open(open_for_reading(args.input_file), "rb") as stream:
                given["input_bytes"] = stream.read(MAX_INPUT_BYTES + 1)
        except OSError as error:
            raise InputError(f"cannot read {shown_path(args.input_file)}: "
                             f"{error.strerror or error}") from None
        if len(given["input_bytes"]) > MAX_INPUT_BYTES:
            raise InputError(f"{shown_path(args.input_file)}: input longer than "
                             f"{MAX_INPUT_BYTES:,} bytes")
    if given and not isa.reads_input:
        raise InputError(f"--input and --input-file apply to programs that read input "
                         f"(standard SUBLEQ images: .dec, .vsq), not {isa.name.upper()}")
    if args.max_output is not None:
        if not isa.reads_input:
            raise InputError(f"--max-output applies to standard SUBLEQ images (.dec, .vsq), "
                             f"not {isa.name.upper()}")
        if not transformer:  # silently ignored before
            raise InputError("--max-output sizes the transformer's output tape; the reference "
                             "engine's output has no fixed size")
        given["max_output"] = args.max_output
    return given


def engine_config(args: argparse.Namespace, geometry: object | None = None) -> EngineConfig:
    """The engine the command line asks for; a note on stderr when something in it runs
    every pass in full although --evaluation fused or active was asked for (`geometry`, where
    given, lets a --temperature below the safe one be named too)."""
    full_because = args.evaluation in ("fused", "active") and (
        _runs_in_full(args) or _unsafe_temperature(args, geometry))
    if full_because:
        print(f"ltvm: note: {full_because} runs every pass in full (--evaluation "
              f"{args.evaluation} does not apply)", file=sys.stderr)
    return EngineConfig(dtype=args.dtype, device=args.device, attention=args.attention,
                        temperature=args.temperature, checked=True if args.checked else None,
                        evaluation=args.evaluation)


def _runs_in_full(args: argparse.Namespace) -> str | None:
    """What in the command line makes every pass the full one, whatever --evaluation asks."""
    if args.command == "trace":
        return "trace"
    if args.checked:
        return "--checked"
    if args.attention == "dense":
        return "dense attention"
    return None


def _unsafe_temperature(args: argparse.Namespace, geometry: object | None) -> str | None:
    """A --temperature below the machine's provably safe one turns the checked mode on,
    which runs every pass in full: --evaluation fused then ran in full without a word."""
    from vm.machines import BUILDERS, machine_for  # weights: only runs that give a temperature
    if geometry is None or args.temperature is None or type(geometry) not in BUILDERS:
        return None
    machine = machine_for(geometry, args.temperature)
    if machine.temperature_is_safe(args.dtype or machine.default_dtype):
        return None
    return (f"--temperature {args.temperature:g}, below the provably safe one, turns on "
            "checking that")


def load_program(args: argparse.Namespace) -> tuple[object, object]:
    """The program named on the command line and its geometry."""
    if args.csv and args.program:
        raise InputError("give either PROG or --csv CMDS MEM, not both")
    if args.csv:
        if args.block_size or args.param or args.functions:  # as for a .sq PROG
            raise InputError("--block-size, --param and --functions apply to .fleq programs")
        saved = csv_settings(args.csv[0]) or {}
        scratch = args.scratch or saved.get("scratch") or DEFAULT_CSV_SCRATCH
        if not saved:
            assumed = [] if args.scratch else [f"scratch {scratch}"]
            if not args.bits:
                assumed.append("the fewest bits a word needs to hold the values")
            if assumed:
                print(f"ltvm: note: no {SETTINGS_FILE} beside {shown_path(args.csv[0])}; assumed "
                      f"{' and '.join(assumed)} (--scratch, --bits)", file=sys.stderr)
        program = load_csv(args.csv[0], args.csv[1], scratch=scratch,
                           bits=args.bits or saved.get("bits"))
        return program, SUBLEQ.geometry_for(program, scratch)
    if not args.program:
        raise InputError("no program given (PROG or --csv CMDS MEM)")
    from vm.tools.progress import Progress  # tqdm: not for the commands that load nothing

    # lark parses some 30,000 tokens a second: a full-size .sq or a routine call's expansion
    # took seconds to minutes without a word
    progress = Progress("lines assembled")
    options = ProgramOptions(bits=args.bits, scratch=args.scratch, block_size=args.block_size,
                             parameters=block_parameters(args.param),
                             functions=args.functions, dtype=getattr(args, "dtype", None),
                             progress=progress)
    try:
        return for_path(args.program).load(Path(args.program), options)
    finally:
        progress.done()


def _jsonable(record) -> dict:
    return {key: (value.tolist() if isinstance(value, np.ndarray) else value)
            for key, value in record.__dict__.items()}


def print_result(program: object, result: RunResult, engine: str, as_json: bool,
                 extra: dict | None = None) -> None:
    """The final memory by name, steps, halted; or the same as one JSON object."""
    isa: InstructionSet = for_program(program)
    memory = isa.named_memory(program, result.memory)
    if as_json:
        payload = {"engine": engine, "halted": result.halted, "steps": result.steps,
                   "pc": result.pc, "memory": memory, **(extra or {})}
        if result.trace:
            payload["trace"] = [_jsonable(record) for record in result.trace]
        print(json.dumps(finite_or_null(payload), indent=2, allow_nan=False))
        return
    for record in result.trace:
        print(isa.trace_line(program, record))
    print(f"engine: {engine}")
    for key, value in (extra or {}).items():
        print(f"{key}: {value}")
    print(f"halted: {'yes' if result.halted else 'no'}")
    print(f"steps: {result.steps}")
    for name, value in memory.items():
        print(f"{name} = {format_value(value)}")
