"""`ltvm asm`: assemble a program and show (or save) its punchcard X."""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import BinaryIO, TextIO

import numpy as np

from assembler.csv_format import CSV_FILES, SETTINGS_FILE
from vm.cli.common import add_program_arguments, load_program
from vm.common.files import open_for_writing
from vm.common.errors import InputError, shown_path
from vm.isa import for_program
from vm.common.outputs import atomic_path, check_directory, is_standard_output, staged_files


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "asm", help="assemble a program; print its geometry and punchcard summary",
        description="Assemble PROG (or import --csv CMDS MEM), print the geometry and a "
                    "summary of the punchcard X; optionally save X, a listing or a CSV pair.")
    add_program_arguments(parser)
    parser.add_argument("-o", "--output", metavar="X.npy",
                        help="save the punchcard X (.npy); -o /dev/stdout writes it to standard "
                             "output, and the summary and listing then go to standard error")
    parser.add_argument("--listing", action="store_true",
                        help="print the disassembly (labels, names, one instruction a line)")
    parser.add_argument("--export-csv", metavar="DIR",
                        help="write DIR/commands.csv, DIR/memory.csv (column-index format) "
                             "and DIR/program.json, all or none; DIR is created if its "
                             "parent exists")
    parser.set_defaults(func=run)


def _refuse_an_input(output: str, sources: list[str]) -> None:
    """Refuse an -o that is one of the files being read (by any name: a link, a hard link):
    saving X there would replace the source it was assembled from."""
    if not os.path.exists(output):
        return
    for source in sources:
        if os.path.exists(source) and os.path.samefile(output, source):
            raise InputError(f"-o {shown_path(output)} is the input {shown_path(source)}: saving "
                             "X there would replace the source; choose another file")


def _refuse_another_suffix(output: str) -> None:
    """Refuse an -o whose suffix is not .npy (a name without one stays: a device, a pipe):
    -o out.txt wrote numpy's binary .npy data under a text file's name without a word."""
    suffix = Path(output).suffix
    if suffix and suffix.lower() != ".npy":
        raise InputError(f"cannot write {shown_path(output)}: -o saves X as .npy data, under a "
                         f"name ending in .npy or with no suffix, not {shown_path(suffix)}; "
                         "name it X.npy")


def _inputs(args: argparse.Namespace) -> list[str]:
    """The files the command reads: PROG, or the CSV pair and the program.json beside it."""
    if args.program:
        return [args.program]
    if args.csv:
        return [*args.csv, str(Path(args.csv[0]).parent / SETTINGS_FILE)]
    return []


def run(args: argparse.Namespace) -> int:
    for option, value in (("-o", args.output), ("--export-csv", args.export_csv)):
        if value == "":
            raise InputError(f"{option} is an empty path")
    if args.output == "-":  # wrote a file named '-', where '-' reads as standard output
        raise InputError("-o - : X is not written to standard output by '-': name it -o "
                         "/dev/stdout (the summary then goes to standard error), or give a "
                         "file, e.g. -o x.npy (./- for a file named '-')")
    if args.output and args.output.endswith(("/", os.sep)):  # written as a file 'D' before
        raise InputError(f"cannot write {shown_path(args.output)}: -o takes a file (X.npy), and a "
                         "path ending in '/' names a directory")
    if args.output and args.output.lower().endswith(".npz"):  # .npy bytes under a zip's name
        raise InputError(f"cannot write {shown_path(args.output)}: -o saves X as one .npy "
                         "array, and .npz names numpy's zip archive of arrays; name it X.npy")
    if args.output:
        _refuse_an_input(args.output, _inputs(args))
    to_stdout = bool(args.output) and is_standard_output(args.output)
    if to_stdout and sys.stdout.isatty():
        raise InputError(f"-o {shown_path(args.output)} is the terminal, which cannot show X "
                         "(binary .npy data): redirect standard output to a file or a pipe")
    program, geometry = load_program(args)
    isa = for_program(program)
    if args.export_csv is not None:
        if not isa.writes_csv:
            raise InputError(f"--export-csv writes SUBLEQ programs only (the CSV format has "
                             f"no {isa.name.upper()} instructions)")
        check_directory(args.export_csv, CSV_FILES)  # before -o writes anything
        csv_paths = {os.path.realpath(Path(args.export_csv) / name) for name in CSV_FILES}
        if args.output and os.path.realpath(args.output) == os.path.realpath(args.export_csv):
            raise InputError(f"-o {shown_path(args.output)} is the --export-csv directory: X and "
                             "the CSV files cannot both go there; choose another file")
        if args.output and os.path.realpath(args.output) in csv_paths:
            raise InputError(f"-o {shown_path(args.output)} is one of the files --export-csv "
                             "writes, which would replace X; choose another file")
    if args.output:  # after the checks naming the file -o would replace, which say more
        _refuse_another_suffix(args.output)
    layout = isa.layout(geometry)
    X = isa.encode(program, geometry, layout)
    npy = io.BytesIO()
    if args.output:
        np.save(npy, X)  # whole, as numpy cannot tell() its place in a pipe
    # X goes in place only after the CSV files did: a failure of either leaves neither (X
    # on standard output, which cannot be taken back, goes last)
    with (atomic_path(args.output) if args.output and not to_stdout else nullcontext()) \
            as path, (staged_files(args.export_csv, CSV_FILES) if args.export_csv is not None
                      else nullcontext()) as staging:
        if path is not None:
            _write(npy, args.output, lambda: open_for_writing(path))
        if args.export_csv is not None:
            isa.save_csv(program, str(staging), geometry.scratch)
    if to_stdout:
        sys.stdout.flush()
        _write(npy, args.output, lambda: os.fdopen(os.dup(sys.stdout.fileno()), "wb"),
               stdout=True)
    _print_summary(args, program, geometry, layout, X, isa,
                   out=sys.stderr if to_stdout else sys.stdout)
    return 0


def _write(npy: io.BytesIO, output: str, opened: Callable[[], BinaryIO],
           stdout: bool = False) -> None:
    """The .npy bytes into the file `opened` gives, a failure (/dev/full) named by -o."""
    try:
        with opened() as handle:
            handle.write(npy.getbuffer())
    except OSError as error:
        if stdout and isinstance(error, BrokenPipeError):
            raise  # the reader had enough (`| head -c 10`), as for any standard output
        raise InputError(f"cannot write {shown_path(output)}: {error.strerror or error}"
                         ) from None


def _print_summary(args: argparse.Namespace, program, geometry, layout, X: np.ndarray, isa,
                   out: TextIO) -> None:
    """The geometry, the layout of X, the listing if asked and what was written, on `out`:
    standard error when X itself went to standard output."""
    lines = [f"program: {shown_path(program.source)}",
             f"geometry: {geometry.describe()}",
             f"punchcard: X has {layout.rows} rows x {layout.columns} columns, "
             f"{int(np.count_nonzero(X))} nonzero entries",
             "regions:  " + ", ".join(f"{name} {span.start}..{span.stop - 1}"
                                      for name, span in layout.regions.items() if len(span)),
             "fields:"]
    for name in layout.fields:
        span = layout[name]
        kind = "state" if name in layout.persistent else "work"
        lines.append(f"  {name:<12} rows {span.start:>3}..{span.stop - 1:<3} {kind}")
    print("\n".join(lines), file=out)
    if args.listing:
        print(isa.listing(program), end="", file=out)
    if args.output:
        print(f"wrote {shown_path(args.output)}", file=out)
    if args.export_csv is not None:
        commands, memory, settings = (Path(args.export_csv) / name for name in CSV_FILES)
        print(f"wrote {shown_path(commands)}, {shown_path(memory)} and {shown_path(settings)}",
              file=out)
