"""Options and helpers shared by the subcommands that take a program."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from assembler.csv_format import DEFAULT_CSV_SCRATCH, load_csv
from assembler.program import Program
from assembler.punchcard import DEFAULT_SCRATCH, geometry_for
from assembler.subleq import assemble_file
from vm.errors import InputError
from vm.executor import DTYPES, EngineConfig
from vm.geometry import Geometry
from vm.layers import ATTENTION_MODES
from vm.reference import RunResult, TraceStep


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_program_arguments(parser: argparse.ArgumentParser) -> None:
    """PROG or --csv CMDS MEM, with the geometry overrides --bits and --scratch."""
    parser.add_argument("program", nargs="?", metavar="PROG",
                        help="assembly source (.sq)")
    parser.add_argument("--csv", nargs=2, metavar=("CMDS", "MEM"),
                        help="run a column-index CSV pair instead of a source file")
    parser.add_argument("--bits", type=positive_int, metavar="N",
                        help="memory word size N (default: the program's .bits, else the "
                             "smallest that holds every literal, at least 8)")
    parser.add_argument("--scratch", type=positive_int, metavar="S",
                        help=f"scratch columns (default {DEFAULT_SCRATCH}; "
                             f"{DEFAULT_CSV_SCRATCH} for --csv)")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """How the transformer runs: dtype, device, attention, temperature, checked mode."""
    group = parser.add_argument_group("transformer")
    group.add_argument("--dtype", choices=list(DTYPES), default="float32",
                       help="floating-point type of X and the weights (default float32)")
    group.add_argument("--device", default="cpu",
                       help="torch device, e.g. cpu or cuda (default cpu)")
    group.add_argument("--attention", choices=list(ATTENTION_MODES), default="masked",
                       help="masked: scratch columns attend globally, others to themselves and "
                            "the scratchpad, O(n) a pass (default); dense: every column to "
                            "every column, O(n^2)")
    group.add_argument("--temperature", type=float, metavar="LAM",
                       help="softmax temperature lam (default: ln((n-1)/2^-54)/2, which makes "
                            "every read exact to the last bit)")
    group.add_argument("--checked", action="store_true",
                       help="validate every read and the state after every pass; stop with a "
                            "precision error instead of computing on (also on automatically "
                            "below the provably safe temperature)")


def engine_config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(dtype=args.dtype, device=args.device, attention=args.attention,
                        temperature=args.temperature, checked=True if args.checked else None)


def load_program(args: argparse.Namespace) -> tuple[Program, Geometry]:
    """The program named on the command line and its geometry."""
    if args.csv and args.program:
        raise InputError("give either PROG or --csv CMDS MEM, not both")
    if args.csv:
        scratch = args.scratch or DEFAULT_CSV_SCRATCH
        program = load_csv(args.csv[0], args.csv[1], scratch=scratch, bits=args.bits)
        return program, geometry_for(program, scratch)
    if not args.program:
        raise InputError("no program given (PROG or --csv CMDS MEM)")
    path = Path(args.program)
    if path.suffix not in (".sq", ""):
        raise InputError(f"{path}: unknown program type '{path.suffix}' (expected .sq)")
    program = assemble_file(path, bits=args.bits)
    return program, geometry_for(program, args.scratch)


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """A temporary path renamed onto `target` only if the block succeeds,
    so a failed command never leaves a half-written file."""
    target = Path(target)
    if target.parent and not target.parent.exists():
        raise InputError(f"cannot write {target}: directory {target.parent} does not exist")
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                         suffix=target.suffix)
    os.close(handle)
    try:
        yield Path(temporary)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def format_value(value: int | list[int]) -> str:
    return f"[{', '.join(map(str, value))}]" if isinstance(value, list) else str(value)


def named_memory(program: Program, memory: list[int]) -> dict[str, int | list[int]]:
    """Final memory by name; the whole memory as `mem` for programs without names."""
    return program.named_memory(memory) if program.symbols else {"mem": list(memory)}


def trace_line(program: Program, record: TraceStep) -> str:
    where = program.label_at(record.pc)
    location = f"{record.pc}" + (f" ({where})" if where else "")
    branch = f"jump -> {record.next_pc}" if record.jumped else f"next -> {record.next_pc}"
    return (f"{record.step:>6}  pc {location:<14} {program.address_name(record.b)} = "
            f"{record.old} - {program.address_name(record.a)} = {record.new}  {branch}")


def print_result(program: Program, result: RunResult, engine: str, as_json: bool,
                 extra: dict | None = None) -> None:
    """The final memory by name, steps, halted; or the same as one JSON object."""
    memory = named_memory(program, result.memory)
    if as_json:
        payload = {"engine": engine, "halted": result.halted, "steps": result.steps,
                   "pc": result.pc, "memory": memory, **(extra or {})}
        if result.trace:
            payload["trace"] = [record.__dict__ for record in result.trace]
        print(json.dumps(payload, indent=2))
        return
    for record in result.trace:
        print(trace_line(program, record))
    print(f"engine: {engine}")
    for key, value in (extra or {}).items():
        print(f"{key}: {value}")
    print(f"halted: {'yes' if result.halted else 'no'}")
    print(f"steps: {result.steps}")
    for name, value in memory.items():
        print(f"{name} = {format_value(value)}")
