"""Where the fused pass's CPU time goes, by compiled function (Linux `perf`).

numba's machine code lives in anonymous memory, so `perf report` cannot name it. This
script compiles the fused kernels in this process (into an empty numba cache, removed at the
end; one to three minutes, so that their object code is at hand), writes a perf map
(/tmp/perf-PID.map) naming every function numba compiled, then runs a SUBLEQ batch while
`perf record` samples the process, and prints each function's share of the samples, then
what `objdump` finds in each kernel's object code that its source does not show: masked
vector stores (`vmaskmov`, microcode on AMD Zen) and calls to libm's `exp2` (numba's
`2.0 ** k`); the pass is written to have none (docs/speed.md, "A batch in lockstep"). Helpers
numba inlines count in their caller (`_lane_feed_forward` in `_lockstep`, `_top_two` in
`_attention_layer`, ...); `_attention_layer`, `_pass_proven`, `_commit`, `_one_pass` and
the kernels are functions of their own (docs/speed.md, "The fused pass").

    python examples/fused_profile.py --columns 64 --batch 256 --seconds 10
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FUNCTION = re.compile(r"fused(\d+)(\w+)")
"""A compiled function's name inside numba's mangled symbol (`..5fused9_lockstep...`)."""


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--columns", type=positive, default=64, help="n (default 64)")
    parser.add_argument("--batch", type=positive, default=256, help="programs (default 256)")
    parser.add_argument("--threads", type=positive, default=1, help="threads (default 1)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                        help="the machine's float type (default float32)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="seconds sampled (default 10, at most 600)")
    options = parser.parse_args()
    if not 0 < options.seconds <= 600:
        parser.error("--seconds: must be above 0 and at most 600")
    if options.columns < 6:
        parser.error("--columns: a benchmark program needs at least 6")
    if shutil.which("perf") is None:
        parser.error("Linux perf is not installed (the `perf` command)")
    return options


def short_name(symbol: str) -> str:
    """`_lockstep` from numba's mangled symbol; the symbol itself where it is not one."""
    found = FUNCTION.search(symbol)
    return found.group(2)[:int(found.group(1))] if found else symbol


def object_listings(kernels, tool: list[str]) -> list[tuple[object, str]]:
    """`tool` (a command taking an object file last) run on the object code of every
    compiled overload of `kernels`: (its library, the tool's output) each."""
    listings = []
    for kernel in kernels:
        for compiled in kernel.overloads.values():
            library = compiled.library
            with tempfile.NamedTemporaryFile(suffix=".o") as code:
                code.write(library._get_compiled_object())
                code.flush()
                listings.append((library, subprocess.run([*tool, code.name],
                                                         capture_output=True, text=True,
                                                         check=True).stdout))
    return listings


def hidden_costs(disassembly: str) -> tuple[int, int]:
    """Masked vector stores and calls to libm's exp2 in `objdump -dr` output."""
    lines = disassembly.splitlines()
    masked = sum(1 for line in lines if re.search(r"\svmaskmovp[sd]\s", line))
    exp2 = sum(1 for line in lines if re.search(r"R_X86_64_\w+\s+exp2(f)?$", line.strip()))
    return masked, exp2


def write_perf_map(kernels, path: Path) -> int:
    """Every function in the object code of the compiled `kernels`, at its address in this
    process, as perf's map of JIT code; returns how many."""
    entries = set()
    for library, listing in object_listings(kernels, ["nm", "-S", "--defined-only"]):
        for line in listing.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[2] in "tT":
                address = library.get_pointer_to_function(parts[3])
                if address:
                    entries.add((address, int(parts[1], 16), short_name(parts[3])))
    path.write_text("".join(f"{address:x} {size:x} {name}\n"
                            for address, size, name in sorted(entries)))
    return len(entries)


def main() -> int:
    options = arguments()
    cache = tempfile.mkdtemp(prefix="ltvm-profile-")
    os.environ["NUMBA_CACHE_DIR"] = cache
    perf_map = Path(f"/tmp/perf-{os.getpid()}.map")
    try:
        return profile(options, perf_map)
    finally:  # nothing left behind: the map, and the kernels compiled into the empty cache
        perf_map.unlink(missing_ok=True)
        shutil.rmtree(cache, ignore_errors=True)


def profile(options: argparse.Namespace, perf_map: Path) -> int:
    """Compile, write `perf_map`, sample a batch's passes and print the shares; 2 where the
    batch cannot run or perf fails."""
    from vm.common.errors import InputError
    from vm.runtime import fused
    from vm.runtime.executor import EngineConfig, TransformerExecutor
    from vm.tools.workloads import looping_programs, workload_geometry

    if not fused.available():
        print("numba is not installed: there is no fused pass to profile", file=sys.stderr)
        return 2
    try:
        shape = workload_geometry(options.columns)
        executor = TransformerExecutor(shape, EngineConfig(evaluation="fused",
                                                           dtype=options.dtype,
                                                           threads=options.threads))
        executor.check_memory(options.batch)
    except InputError as error:
        print(f"fused_profile.py: error: {error}", file=sys.stderr)
        return 2
    runner = executor.runner(executor.load(looping_programs(shape, options.batch, seed=0)))
    print("compiling the fused kernels (an empty numba cache) ...", file=sys.stderr)
    runner.advance(2 + runner.window)
    kernels = [value for value in vars(fused).values() if hasattr(value, "overloads")]
    print(f"{write_perf_map(kernels, perf_map)} functions in {perf_map}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "perf.data"
        recorder = subprocess.Popen(["perf", "record", "-q", "-F", "999", "-o", str(data),
                                     "-p", str(os.getpid()), "--", "sleep",
                                     str(options.seconds)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        passes, start = 0, time.perf_counter()
        while passes == 0 or recorder.poll() is None:
            runner.advance(runner.window)
            passes += runner.window
        seconds = time.perf_counter() - start
        recorder.wait()
        if recorder.returncode != 0:
            print(f"perf record failed: {recorder.stderr.read().strip()}", file=sys.stderr)
            return 2
        report = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--sort", "sym"],
                                capture_output=True, text=True, check=True).stdout
    print(f"n = {options.columns}, batch {options.batch}, {options.threads} thread(s), "
          f"{options.dtype}: {passes * options.batch / seconds:,.0f} program steps/s, "
          f"{seconds / passes / options.batch * 1e6 * options.threads:.2f} us of a core a "
          f"program-pass ({runner.evaluation})")
    for line in report.splitlines():
        share = re.match(r"\s*([\d.]+)%\s+\[\.\]\s+(\S+)", line)
        if share and float(share.group(1)) >= 0.5:
            print(f"{float(share.group(1)):6.2f} %  {short_name(share.group(2))}")
    print_hidden_costs(kernels)
    return 0


def print_hidden_costs(kernels) -> None:
    """Each kernel's masked vector stores and exp2 calls (`hidden_costs`), per overload."""
    if shutil.which("objdump") is None:
        print("objdump is not installed: object code not checked", file=sys.stderr)
        return
    for kernel in kernels:
        for library, listing in object_listings([kernel], ["objdump", "-dr"]):
            masked, exp2 = hidden_costs(listing)
            print(f"object code of {kernel.__name__}: masked vector stores {masked}, "
                  f"exp2 calls {exp2}")


if __name__ == "__main__":
    sys.exit(main())
