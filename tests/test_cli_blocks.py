"""`ltvm blocks`: every registered block and routine, with shapes the assembler accepts,
domains, bounds and parameters; one entry by name; bad names exit 2; no torch at startup."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from assembler.diagnostics import SourceError
from vm.cli import main
from vm.functions import REGISTRY, dtype_parameters, make_block
from vm.isa import FLEQ
from vm.routines import ROUTINES

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"1": 1, "n": 2, "m": 3, "k": 4}
"""Sizes substituted for the symbols of a shape pattern (distinct, so a mix-up shows)."""


def entries(capsys, *argv: str) -> tuple[int, list[dict] | str, str]:
    code = main(["blocks", *argv])
    captured = capsys.readouterr()
    out = json.loads(captured.out) if "--json" in argv and code == 0 else captured.out
    return code, out, captured.err


def test_json_lists_every_registered_block_and_routine_once(capsys):
    code, out, _ = entries(capsys, "--json")
    assert code == 0
    names = [(entry["kind"], entry["name"]) for entry in out]
    assert sorted(names) == sorted([("block", n) for n in REGISTRY] +
                                   [("routine", n) for n in ROUTINES])


@pytest.mark.parametrize("name, shapes", [
    ("add", ["a nxm, b nxm -> c nxm"]),
    ("mul", ["a 1x1, b 1x1 -> c 1x1"]),
    ("inv", ["a nxm -> c nxm"]),
    ("matmul", ["a nxm, b mxk -> c nxk"]),
    ("matmul_tn", ["a nxm, b nxk -> c mxk"]),
    ("scale", ["a nxm, b 1x1 -> c nxm"]),
])
def test_shapes_in_argument_order(capsys, name, shapes):
    code, out, _ = entries(capsys, name, "--json")
    assert code == 0 and len(out) == 1
    assert out[0]["shapes"] == shapes and out[0]["call"].startswith(f"c = {name}(a")


def instantiate(pattern: str) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """`a nxm, b nxm -> c nxm` -> operand shapes and result shape at n=2, m=3, k=4."""
    shapes = [tuple(SIZES[s] for s in dims.split("x"))
              for dims in re.findall(r"[abc] ([1nmk]x[1nmk])", pattern)]
    return shapes[:-1], shapes[-1]


def test_every_listed_shape_assembles_and_the_result_has_the_listed_shape(capsys):
    """Independent of how the list is made: the assembler accepts each pattern, and refuses
    the same call with the result cell one row taller."""
    _, out, _ = entries(capsys, "--json")
    checked = 0
    for entry in out:
        for pattern in entry.get("shapes", []):
            operands, (rows, columns) = instantiate(pattern)
            data = [f"x{i}: .zeros {r}x{c}" for i, (r, c) in enumerate(operands)]
            call = f"{entry['name']}({', '.join(f'x{i}' for i in range(len(operands)))})"
            good = ".d 5\n.data\n" + "\n".join(data) + f"\ny: .zeros {rows}x{columns}\n"
            FLEQ.assemble_text(good + f".code\ny = {call}\n")
            bad = ".d 5\n.data\n" + "\n".join(data) + f"\ny: .zeros {rows + 1}x{columns}\n"
            with pytest.raises(SourceError):
                FLEQ.assemble_text(bad + f".code\ny = {call}\n")
            checked += 1
    assert checked >= len(REGISTRY) - 1, "all blocks but fixed-shape ones list a pattern"


def test_bounds_domains_and_parameters_match_what_the_blocks_document(capsys):
    _, out, _ = entries(capsys, "--json")
    for entry in (e for e in out if e["kind"] == "block"):
        block = make_block(entry["name"])
        for dtype in ("float32", "float64"):
            bound = entry["error_bound"][dtype]
            own = make_block(entry["name"], **dtype_parameters(dtype, [entry["name"]]).get(
                entry["name"], {}))
            assert bound["absolute"] + 100 * bound["relative"] == pytest.approx(
                float(own.bound_at(dtype, np.array(100.0))))
        assert entry["domain"] == block.domain().description
        values = {p["name"]: p["default"] for p in entry["parameters"]}
        assert values == block.values, "defaults are what a block is built with"
    mul = next(e for e in out if e["name"] == "mul")
    assert mul["float32_defaults"] == {"scale": 5e-3}


def test_text_names_the_param_that_widens_a_domain(capsys):
    code, out, _ = entries(capsys, "mul")
    assert code == 0
    assert out.splitlines()[0].startswith("c = mul(a, b)    [block]")
    assert "  domain: |result| <= 1e+06 (widen it with --param mul.span=N)" in out.splitlines()
    assert any(line.startswith("  --param mul.span=1e+06: ") for line in out.splitlines())
    code, out, _ = entries(capsys, "inverse")
    assert code == 0 and out.startswith("x = inverse(a1, iters=20)    [routine]")


def test_an_unknown_name_exits_2_listing_the_known_ones(capsys):
    code, out, err = entries(capsys, "nope")
    assert code == 2 and out == ""
    assert "no block or routine named 'nope'" in err and "matmul_tn" in err and "inverse" in err


def test_an_unknown_name_is_shown_with_its_control_characters_escaped(capsys):
    """A name with an ANSI escape was echoed raw, recolouring the user's terminal."""
    code, _, err = entries(capsys, "a\x1b[31mred")
    assert code == 2 and "\x1b" not in err and "named 'a\\x1b[31mred'" in err


def test_blocks_starts_without_torch():
    probe = ("import contextlib, io, sys\nfrom vm.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n    code = main(['blocks'])\n"
             "print(code, [m for m in ('torch', 'numba', 'matplotlib') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.stdout.split() == ["0", "[]"], done.stderr
