"""`ltvm blocks [NAME] [--json]`: what a FLEQ program may call, read from the registries.

Every registered function block with its argument order, the operand shapes it accepts,
its domain, its documented error bound and its parameters with their defaults; every
routine with its operand count and keywords. The shapes come from probing each block's
own `output_shape` (the check the assembler makes), so the list cannot drift from the
code: shapes are tried with sizes 1, n, m and k, and a pattern that is a special case of
another accepted one (m = 1, m = n, ...) is left out.
"""

from __future__ import annotations

import argparse
import itertools
import json
from typing import Any

from vm.common.errors import InputError

PROBE = {1: "1", 7: "n", 11: "m", 13: "k"}
"""Probe sizes and the symbols they print as (primes above the common block sizes, so a
size a block fixes by a parameter does not pass for a symbol)."""
DTYPES = ("float32", "float64")


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "blocks", help="list the FLEQ function blocks and routines with their signatures",
        description="Every registered FLEQ function block (c = f(a, b): argument order, "
                    "accepted operand shapes and result shape, domain, documented error "
                    "bound |error| <= abs + rel * |result| per dtype, parameters with their "
                    "defaults and what they mean) and every routine (X = r(A, ..., key=v)). "
                    "Shapes use n, m, k for any size up to the block size d.",
        epilog="example: ltvm blocks mul; ltvm blocks --json")
    parser.add_argument("name", nargs="?", metavar="NAME",
                        help="one block or routine (default: all)")
    parser.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    parser.set_defaults(func=run)


def _canonical(pattern: tuple[str, ...]) -> tuple[str, ...]:
    """Rename the symbols n, m, k in order of first appearance."""
    names: dict[str, str] = {}
    for token in pattern:
        if token not in ("1",) and not token.isdigit() and token not in names:
            names[token] = "nmk"[len(names)]
    return tuple(names.get(token, token) for token in pattern)


def _instance(special: tuple[str, ...], general: tuple[str, ...]) -> bool:
    """Whether `special` is `general` with its symbols replaced (each consistently)."""
    mapping: dict[str, str] = {}
    for g, s in zip(general, special):
        if g.isdigit():
            if g != s:
                return False
        elif mapping.setdefault(g, s) != s:
            return False
    return True


def shape_patterns(block: Any) -> tuple[list[str], str | None]:
    """The operand and result shapes `block` accepts, as `a nxm, b nxm -> c nxm` lines,
    and the block's own message when no size-generic pattern fits (fixed shapes)."""
    sizes = list(PROBE)
    shapes = list(itertools.product(sizes, sizes))
    accepted: set[tuple[str, ...]] = set()
    message = None
    for a in shapes:
        for b in (shapes if block.arity == 2 else [None]):
            try:
                c = block.output_shape(a, b)
            except ValueError as error:
                message = message or str(error).split(", got ")[0]
                continue
            dims = [*a, *(b or ()), *c]
            accepted.add(_canonical(tuple(PROBE.get(x, str(x)) for x in dims)))
    general = [p for p in accepted
               if not any(q != p and _instance(p, q) for q in accepted)]
    lines = []
    for pattern in sorted(general, key=lambda p: (sum(t == "1" for t in p) * -1, p)):
        parts = [pattern[i:i + 2] for i in range(0, len(pattern), 2)]
        roles = ["a", "b"][:block.arity]
        text = ", ".join(f"{role} {'x'.join(dims)}" for role, dims in zip(roles, parts))
        lines.append(f"{text} -> c {'x'.join(parts[-1])}")
    return lines, (None if lines else message)


def block_entry(name: str) -> dict[str, Any]:
    """One block's signature, domain, bounds and parameters (defaults built, float32's own
    defaults beside them)."""
    from vm.functions import REGISTRY, dtype_parameters, make_block

    block = make_block(name)
    cls = REGISTRY[name]
    operands = ["a", "b"][:block.arity]
    shapes, fixed = shape_patterns(block)
    domain = block.domain()
    return {
        "name": name, "kind": "block",
        "call": f"c = {name}({', '.join(operands)})",
        "arity": block.arity, "summary": cls.summary, "lemma": cls.lemma,
        "shapes": shapes, "shape_rule": fixed,
        "integer_preserving": block.integer_preserving,
        "domain": domain.description, "domain_applies_to": domain.applies_to,
        "widen": domain.widen,
        "error_bound": {dtype: _bound(name, dtype) for dtype in DTYPES},
        "parameters": [{"name": p.name, "default": p.default, "doc": p.doc}
                       for p in cls.parameters],
        "float32_defaults": dtype_parameters("float32", [name]).get(name, {}),
    }


def _bound(name: str, dtype: str) -> dict[str, float]:
    """The bound in `dtype` at the defaults runs in that dtype use (`dtype_parameters`)."""
    from vm.functions import dtype_parameters, make_block

    block = make_block(name, **dtype_parameters(dtype, [name]).get(name, {}))
    return {"absolute": block.error_bound(dtype), "relative": block.relative_error_bound(dtype)}


def routine_entry(name: str) -> dict[str, Any]:
    from vm.routines import ROUTINES

    routine = ROUTINES[name]
    operands = [f"a{i + 1}" for i in range(routine.arity)]
    keywords = [f"{key}={value:g}" for key, value in routine.keywords.items()]
    return {"name": name, "kind": "routine",
            "call": f"x = {name}({', '.join(operands + keywords)})",
            "arity": routine.arity, "summary": routine.summary,
            "keywords": dict(routine.keywords)}


def catalogue(name: str | None) -> list[dict[str, Any]]:
    """Every block then every routine, or the one called `name` (InputError if none is)."""
    from vm.functions import REGISTRY
    from vm.routines import ROUTINES

    if name is not None and name not in REGISTRY and name not in ROUTINES:
        raise InputError(f"no block or routine named {name!r} (blocks: "  # !r: escapes
                         f"{', '.join(sorted(REGISTRY))}; routines: "
                         f"{', '.join(sorted(ROUTINES))})")
    blocks = [block_entry(n) for n in sorted(REGISTRY) if name in (None, n)]
    return blocks + [routine_entry(n) for n in sorted(ROUTINES) if name in (None, n)]


def describe(entry: dict[str, Any]) -> list[str]:
    """The text lines of one entry."""
    lines = [f"{entry['call']}    [{entry['kind']}] {entry['summary']}"]
    if entry["kind"] == "routine":
        return lines
    if entry["lemma"]:
        lines[0] += f" ({entry['lemma']})"
    for shape in entry["shapes"]:
        lines.append(f"  shapes: {shape}")
    if entry["shape_rule"]:
        lines.append(f"  shapes: {entry['shape_rule']}")
    lines.append(f"  domain: {entry['domain']}"
                 + (f" (widen it with {entry['widen']})" if entry["widen"] else "")
                 + ("; counters stay integers" if entry["integer_preserving"] else ""))
    for dtype, bound in entry["error_bound"].items():
        lines.append(f"  bound {dtype}: {bound['absolute']:.3g} + {bound['relative']:.3g} "
                     "* |result|")
    for parameter in entry["parameters"]:
        float32 = entry["float32_defaults"].get(parameter["name"])
        extra = f", float32 {float32:g}" if float32 is not None else ""
        lines.append(f"  --param {entry['name']}.{parameter['name']}={parameter['default']:g}"
                     f"{extra}: {parameter['doc']}")
    return lines


def run(args: argparse.Namespace) -> int:
    entries = catalogue(args.name)
    if args.json:
        print(json.dumps(entries, indent=2))
    else:
        print("\n".join(line for entry in entries for line in describe(entry)))
    return 0
