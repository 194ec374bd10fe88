"""`ltvm calc`: evaluate an arithmetic expression on the looped transformer."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time

from vm.cli.common import (add_engine_arguments, add_time_limit, ascii_float, block_parameters,
                           engine_config)
from vm.common.errors import InputError


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "calc", help="evaluate an arithmetic expression on the transformer (Section 7)",
        description="Compile EXPR (+ - * / with the usual precedence, postfix % for /100, "
                    "unary minus, sqrt(...), parentheses, numbers and named inputs) to a FLEQ "
                    "program with one function-block call per operator, run it on the looped "
                    "transformer and on the exact reference, and print the transformer's "
                    "value, the exact value, the error and the documented bound. Exit code 0 "
                    "when the error is within the bound, 1 when not, 2 for bad input (an "
                    "operand outside a block's domain, a value past the machine's |x| <= "
                    "2^50, or one below the smallest normal number, which it flushes to 0, "
                    "included).",
        epilog='example: ltvm calc "sqrt(1/(((a+b)-c)*d))/100" --set a=3 --set b=5 '
               '--set c=1 --set d=2; an expression may start with a minus: ltvm calc "-1/7"')
    # argparse takes any word starting with '-' for an option unless it looks like a negative
    # number (-7, -.5); calc's options are all long (and -h), so a word starting with one '-'
    # is EXPR: `ltvm calc "-1/7"` and `ltvm calc "-x*2"` work without `--`; so does a word
    # starting '--' and no letter (`--1`, minus minus one, said "arguments are required: EXPR").
    parser._negative_number_matcher = re.compile(r"^-(?!-[A-Za-z])")
    parser.add_argument("expression", metavar="EXPR", help="the expression, quoted")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        dest="inputs", help="value of a named input (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--show", action="store_true",
                        help="print the FLEQ program generated for EXPR first")
    parser.add_argument("--param", action="append", default=[], metavar="FUNC.KEY=VALUE",
                        help="a function block parameter, e.g. inv.terms=128 (repeatable)")
    add_time_limit(parser)  # a long expression is a step per operator: minutes, silent before
    add_engine_arguments(parser)
    parser.set_defaults(func=run)


def parse_inputs(settings: list[str]) -> dict[str, float]:
    from assembler.fleq import UNDERFLOW, underflows
    from vm.apps.calc import OVERFLOW

    inputs: dict[str, float] = {}
    for setting in settings:
        name, equals, value = setting.partition("=")
        try:
            number = ascii_float(value)
        except ValueError:
            number = None
        if not equals or not name.strip() or number is None:
            raise InputError(f"--set {setting}: expected NAME=NUMBER")
        if name.strip() in inputs:
            raise InputError(f"--set {name.strip()} given twice")
        if math.isinf(number) and "inf" not in value.lower():  # 1e309: "must be finite, got inf"
            raise InputError(f"--set {name.strip()}: {OVERFLOW}")
        if underflows(value, number):
            raise InputError(f"--set {setting}: {UNDERFLOW}")
        inputs[name.strip()] = number
    return inputs


def run(args: argparse.Namespace) -> int:
    from vm.apps.calc import calculate, compile_expression  # torch: not for every `ltvm` call
    from vm.tools.progress import Progress

    started = time.monotonic()  # --max-seconds bounds the command, as for `ltvm run`
    inputs = parse_inputs(args.inputs)
    compiled = compile_expression(args.expression, inputs)
    source = compiled.source if args.show else None
    if source is not None and not args.json:
        print(source)
    progress = Progress("steps", len(compiled.steps) + 1, max_seconds=args.max_seconds,
                        since=started)
    result = calculate(args.expression, inputs, block_parameters(args.param), engine_config(args),
                       progress)
    progress.done()
    if args.json:  # --show puts the program in the object: text before it broke JSON readers
        shown = {} if source is None else {"program": source}
        print(json.dumps({**result.as_dict(), **shown}, indent=2))
    else:
        values = result.as_dict()
        for key in ("transformer", "exact", "error", "relative_error", "bound"):
            shown = "none (the exact value is 0)" if values[key] is None else f"{values[key]:.10g}"
            print(f"{key}: {shown}")
        print(f"dtype: {result.dtype}")
        print(f"steps: {result.steps}")
    if not result.within_bound:  # on stderr, as linalg's: on stdout it broke --json
        print("ltvm: the error exceeds the documented bound", file=sys.stderr)
        return 1
    return 0
