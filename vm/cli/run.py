"""`ltvm run`: execute a program and print its final memory by name."""

from __future__ import annotations

import argparse
import sys
import time

from vm.cli.common import (add_engine_arguments, add_input_arguments, add_program_arguments,
                           add_sampling_refusal, add_time_limit, block_parameters, bound_text,
                           engine_config, engine_options_given, input_options, load_program,
                           positive_int, print_result, refuse_sampling_options)
from vm.common.errors import InputError
from vm.isa import for_program
from vm.isa.base import OUTPUT_FORMATS
from vm.tools.progress import Progress

DEFAULT_MAX_STEPS = 100_000


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "run", help="run a program and print its final memory by name",
        description="Run PROG (or --csv CMDS MEM) until it reaches its EOF instruction or the "
                    "step limit, on the looped transformer (default) or the reference "
                    "interpreter. Exit code 0 when it halted, 1 when it did not (the step "
                    "limit, or --max-seconds on either engine), when the checked mode "
                    "reported a precision error, or (FLEQ) when a block was called outside "
                    "the domain its error bound covers or a value left the machine's domain "
                    "(the `domain:` line names the first such step; where a value left the "
                    "machine's domain, both engines' runs stop there: the transformer runs "
                    "again to that step, with --max-seconds S of its own, so a first run that "
                    "took most of S is not cut short in the rerun; the command may then take "
                    "up to about 2S).")
    add_program_arguments(parser)
    parser.add_argument("--engine", choices=["transformer", "reference"], default="transformer",
                        help="transformer: the looped transformer (default); reference: the "
                             "exact interpreter")
    parser.add_argument("--max-steps", type=positive_int, default=DEFAULT_MAX_STEPS,
                        metavar="K", help=f"step limit (default {DEFAULT_MAX_STEPS})")
    parser.add_argument("--trace", action="store_true",
                        help="print every executed instruction (pc, cell written, branch)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_input_arguments(parser)
    parser.add_argument("--output-format", choices=OUTPUT_FORMATS,
                        help="how the output stream of a standard SUBLEQ image is shown: text "
                             "(default; a JSON string of the bytes read as UTF-8, a byte that is "
                             "not UTF-8 as \\udcHH), or the byte values in decimal or hex")
    add_time_limit(parser)
    add_engine_arguments(parser)
    add_sampling_refusal(parser)
    parser.set_defaults(func=run)


TRACE_STEP_BYTES = 256
"""Memory a --trace run keeps per step until it prints (measured ~195 bytes a SUBLEQ or
standard SUBLEQ step): --trace --max-steps 10^8 on a loop would have taken ~20 GB."""


def check_trace_memory(max_steps: int) -> None:
    """Refuse, before the run, a --trace whose steps could not all be kept in memory."""
    import torch  # here: `ltvm run --help` does not load torch

    from vm.transformer.memory import free_memory
    free = free_memory(torch.device("cpu"))
    if free is not None and max_steps * TRACE_STEP_BYTES > free:  # no float: 10**400 steps
        raise InputError(f"--trace keeps every step until the run ends (about "
                         f"{TRACE_STEP_BYTES} bytes a step): the {free / 2 ** 30:.1f} GiB "
                         f"free hold about {free // TRACE_STEP_BYTES:,} steps, fewer than "
                         f"--max-steps {max_steps:,}; lower --max-steps")


def _say_bounds_of_set_blocks(settings: list[str], blocks: list[dict], dtype: str) -> None:
    """A note with the error bound of each block --param sets: a setting can make it anything
    (hadamard.scale=1: 6.7e8), and the result, within it, came at exit 0 with no word of it."""
    named = block_parameters(settings)
    shown = [f"{block['function']} {bound_text(block, dtype)}" for block in blocks
             if block["function"] in named]
    if shown:
        print(f"ltvm: note: with --param, the error bound of a call ({dtype}): "
              f"{', '.join(shown)}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()  # --max-seconds bounds the command, loading included
    refuse_sampling_options(args)
    if args.trace:
        check_trace_memory(args.max_steps)
    program, geometry = load_program(args)
    isa = for_program(program)
    if args.output_format is not None and not isa.reads_input:
        raise InputError(f"--output-format applies to standard SUBLEQ images (.dec, .vsq), "
                         f"not {isa.name.upper()}")
    output_format = args.output_format or "text"
    if args.engine == "reference":
        ignored = engine_options_given(args)
        if ignored:  # silently ignored before, --device garbage included
            kind = "a transformer option" if len(ignored) == 1 else "transformer options"
            raise InputError(f"{', '.join(ignored)}: {kind}, but --engine reference runs no "
                             "transformer")
        given = input_options(args, isa, transformer=False)
        progress = Progress("steps", args.max_steps, max_seconds=args.max_seconds,
                            since=started)
        result = isa.run_reference(program, args.max_steps, trace=args.trace,
                                   progress=progress, **given)
        progress.done()
        checks = isa.reference_checks(program, result)
        print_result(program, result, "reference", args.json,
                     {**checks.lines, **isa.result_lines(result, output_format, args.json)})
        return 0 if result.halted and checks.ok else 1
    given = input_options(args, isa)
    config = engine_config(args, geometry)
    if args.param:
        _say_bounds_of_set_blocks(args.param, isa.paper(program, geometry).blocks,
                                  config.dtype or isa.default_dtype)
    progress = Progress("steps", args.max_steps, max_seconds=args.max_seconds, since=started)
    result = isa.run_transformer(program, geometry, args.max_steps, config, progress,
                                 trace=args.trace, **given)
    progress.done()
    checks = isa.run_checks(program, result.steps, config.dtype)
    if checks.stop is not None and checks.stop < result.steps:
        # past a value the machine cannot hold the run's values mean nothing (a program that
        # never halts 'halted' there): run again to that step, where the reference stops. Its
        # own clock: sharing the first run's cut a run that had finished in time short
        progress = Progress("steps", checks.stop, max_seconds=args.max_seconds)
        result = isa.run_transformer(program, geometry, checks.stop, config, progress,
                                     trace=args.trace, **given)
        progress.done()
    extra = {"dtype": config.dtype or isa.default_dtype, "attention": config.attention,
             **checks.lines, **isa.result_lines(result, output_format, args.json)}
    print_result(program, result, "transformer", args.json, extra)
    return 0 if result.halted and checks.ok else 1
