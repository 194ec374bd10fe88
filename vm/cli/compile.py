"""`ltvm compile`: compile the fused pass's kernels (numba) once, ahead of the runs that use
them. Runs with the default evaluation never wait for this compile: until it is done they
use the torch active pass or the full one, and say so in a note."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from vm.common.errors import InputError, RunFailure
from vm.runtime.config import DTYPE_NAMES


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "compile", help="compile the fused CPU pass with numba, once per machine",
        description="Compile the fused pass's kernels with numba (the CPU form of "
                    "--evaluation fused, docs/speed.md) into numba's cache on disk, for each "
                    "dtype side by side: about four minutes on 2 cores, once per machine and "
                    "version of ltvm. Runs with the default evaluation use the fused pass "
                    "only once it is compiled (before that: the torch active pass or the full "
                    "one, and a note); `make install` runs this command.")
    parser.add_argument("--dtype", choices=list(DTYPE_NAMES), action="append",
                        help="compile for this dtype only (may be given twice; default: both)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("numba") is None:
        raise InputError("numba is not installed, so there is nothing to compile: pip "
                         "install 'ltvm[fast]' for the fused pass (runs use the torch passes "
                         "without it)")
    from vm.tools.precompile import compile_side_by_side  # torch: not for every `ltvm` call

    dtypes = list(dict.fromkeys(args.dtype or DTYPE_NAMES))
    print(f"ltvm: compiling the fused pass's kernels for {', '.join(dtypes)} with numba (about "
          "four minutes on 2 cores where nothing is compiled yet) ...", file=sys.stderr,
          flush=True)
    try:
        done = compile_side_by_side(dtypes)
    except RuntimeError as failed:
        raise RunFailure(str(failed)) from None
    for compiled in done:
        verb = "compiled" if compiled.compiled else "already compiled, loaded"
        print(f"{compiled.dtype}: {verb} in {compiled.seconds:.1f} s")
    return 0
