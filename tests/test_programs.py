"""The example programs: each one runs on every engine and ends as expected.

Every `programs/subleq/NAME.sq` has a `NAME.expected.json` (values worked out
from the inputs by hand, not copied from a run) and every directory under
`programs/csv/` holds `commands.csv`, `memory.csv` and `expected.json`.
Property tests substitute other inputs into the sources and compare with
Python's own arithmetic.

To test another engine, add its name to `ENGINES` and a branch to
`run_program`; every test here is parametrized over `ENGINES`.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assembler.csv_format import load_csv
from assembler.program import Program
from assembler.subleq import assemble, assemble_file
from vm.reference import run_reference

ROOT = Path(__file__).resolve().parents[1]
SUBLEQ_DIR = ROOT / "programs" / "subleq"
CSV_DIR = ROOT / "programs" / "csv"

ENGINES = ["reference"]
MAX_STEPS = 100_000

# Limits that keep the examples cheap enough for the slow (transformer) engines.
MAX_EXAMPLE_STEPS = 3000
MAX_INSTRUCTIONS = 120  # EOF included
MAX_MEMORY_CELLS = 40   # reserved cells included

SQ_PROGRAMS = sorted(SUBLEQ_DIR.glob("*.sq"))
CSV_PROGRAMS = sorted(path for path in CSV_DIR.iterdir() if path.is_dir()) \
    if CSV_DIR.is_dir() else []

PROPERTY = settings(max_examples=25, deadline=None)


def run_program(engine: str, program: Program, max_steps: int = MAX_STEPS
                ) -> tuple[list[int], bool]:
    """Run `program` from its initial state on `engine`: (final memory, halted)."""
    if engine == "reference":
        result = run_reference(program, max_steps)
        return result.memory, result.halted
    raise ValueError(f"unknown engine {engine!r}")


def named(program: Program, memory: list[int]) -> dict[str, int | list[int]]:
    return program.named_memory(memory)


@cache
def source(name: str) -> str:
    return (SUBLEQ_DIR / f"{name}.sq").read_text()


def with_data(text: str, **values: int | list[int]) -> str:
    """`text` with the data lines `name: ...` given new values (comments kept).

    A list becomes `.array v0, v1, ...`; the program's code is unrolled for a
    fixed array length, so a list must have the length of the original array.
    """
    for name, value in values.items():
        shown = (".array " + ", ".join(map(str, value)) if isinstance(value, (list, tuple))
                 else str(value))
        pattern = re.compile(rf"^([ \t]*{re.escape(name)}:[ \t]*)[^;\n]*?([ \t]*(;[^\n]*)?)$",
                             re.MULTILINE)
        text, count = pattern.subn(lambda m, shown=shown: m.group(1) + shown + m.group(2), text)
        assert count == 1, f"expected one data line '{name}:', found {count}"
    return text


def run_with(engine: str, name: str, **values: int | list[int]) -> dict[str, int | list[int]]:
    """Assemble `name`.sq with the given inputs, run it, return its memory by name."""
    program = assemble(with_data(source(name), **values), f"{name}.sq")
    for cell, value in values.items():
        size = len(value) if isinstance(value, (list, tuple)) else 1
        assert program.symbols[cell].size == size, f"'{cell}' changed size"
    memory, halted = run_program(engine, program)
    assert halted, f"{name} did not halt within {MAX_STEPS} steps for {values}"
    return named(program, memory)


# -- every example against its expected results ---------------------------------------------

def test_examples_exist():
    assert SQ_PROGRAMS, "no programs/subleq/*.sq found"
    assert CSV_PROGRAMS, "no programs/csv/*/ directory found"


def test_no_expected_file_without_a_program():
    orphans = [path.name for path in SUBLEQ_DIR.glob("*.expected.json")
               if not path.with_name(path.name.replace(".expected.json", ".sq")).exists()]
    assert not orphans


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("path", SQ_PROGRAMS, ids=lambda path: path.stem)
def test_subleq_program(engine: str, path: Path):
    expected_path = path.with_suffix(".expected.json")
    assert expected_path.exists(), f"{path.name} has no {expected_path.name}"
    expected = json.loads(expected_path.read_text())
    assert expected["description"]
    program = assemble_file(path)
    memory, halted = run_program(engine, program)
    assert halted == expected["halts"]
    actual = named(program, memory)
    for cell, value in expected["memory"].items():
        assert cell in actual, f"{path.name} has no data cell '{cell}'"
        assert actual[cell] == value, f"{path.name}: {cell}"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("path", CSV_PROGRAMS, ids=lambda path: path.name)
def test_csv_program(engine: str, path: Path):
    expected_path = path / "expected.json"
    assert expected_path.exists(), f"{path.name} has no expected.json"
    expected = json.loads(expected_path.read_text())
    program = load_csv(path / "commands.csv", path / "memory.csv", scratch=expected["scratch"])
    memory, halted = run_program(engine, program)
    assert halted == expected["halts"]
    assert memory == expected["memory"]


@pytest.mark.parametrize("path", SQ_PROGRAMS + CSV_PROGRAMS,
                         ids=lambda path: path.stem if path.suffix else path.name)
def test_examples_stay_small(path: Path):
    """Size and step budgets, so that the slow engines can run every example."""
    if path.is_dir():
        expected = json.loads((path / "expected.json").read_text())
        program = load_csv(path / "commands.csv", path / "memory.csv",
                           scratch=expected["scratch"])
    else:
        program = assemble_file(path)
    assert len(program.instructions) + 1 <= MAX_INSTRUCTIONS
    assert len(program.memory) <= MAX_MEMORY_CELLS
    assert run_reference(program, MAX_EXAMPLE_STEPS).halted, \
        f"more than {MAX_EXAMPLE_STEPS} steps"


def test_with_data_keeps_comments_and_other_lines():
    text = "a:   1   ; first\nab: 2\nxs: .array 1, 2 ; list\n"
    assert with_data(text, a=-5, xs=[3, 4]) == "a:   -5   ; first\nab: 2\nxs: .array 3, 4 ; list\n"


# -- other inputs against Python's arithmetic ------------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
@PROPERTY
@given(a=st.integers(-60, 60), b=st.integers(-60, 60))
def test_multiply(engine: str, a: int, b: int):
    assert run_with(engine, "multiply", a=a, b=b)["prod"] == a * b


@pytest.mark.parametrize("engine", ENGINES)
@PROPERTY
@given(a=st.integers(0, 500), b=st.integers(1, 60))
def test_divmod(engine: str, a: int, b: int):
    result = run_with(engine, "divmod", a=a, b=b)
    assert (result["q"], result["r"]) == divmod(a, b)


@pytest.mark.parametrize("engine", ENGINES)
@PROPERTY
@given(a=st.integers(1, 300), b=st.integers(1, 300))
def test_gcd(engine: str, a: int, b: int):
    assert run_with(engine, "gcd", a=a, b=b)["g"] == math.gcd(a, b)


@pytest.mark.parametrize("engine", ENGINES)
@PROPERTY
@given(xs=st.lists(st.integers(-1000, 1000), min_size=7, max_size=7))
def test_bubble_sort(engine: str, xs: list[int]):
    assert run_with(engine, "bubble_sort", xs=xs)["xs"] == sorted(xs)


@pytest.mark.parametrize("engine", ENGINES)
@PROPERTY
@given(xs=st.lists(st.integers(-1000, 1000), min_size=7, max_size=7))
def test_reverse(engine: str, xs: list[int]):
    assert run_with(engine, "reverse", xs=xs)["xs"] == xs[::-1]


@pytest.mark.parametrize("engine", ENGINES)
@PROPERTY
@given(xs=st.lists(st.integers(-4, 4), min_size=8, max_size=8), key=st.integers(-5, 5))
def test_linear_search(engine: str, xs: list[int], key: int):
    expected = xs.index(key) if key in xs else -1
    assert run_with(engine, "linear_search", xs=xs, key=key)["index"] == expected


@pytest.mark.parametrize("engine", ENGINES)
@PROPERTY
@given(xs=st.lists(st.integers(-1000, 1000), min_size=8, max_size=8))
def test_array_max(engine: str, xs: list[int]):
    result = run_with(engine, "array_max", xs=xs)
    assert (result["best"], result["at"]) == (max(xs), xs.index(max(xs)))


def fibonacci(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


@pytest.mark.parametrize("engine", ENGINES)
@PROPERTY
@given(n=st.integers(0, 23))  # F(23) = 28657 is the last one below 2^15
def test_fibonacci(engine: str, n: int):
    result = run_with(engine, "fibonacci", n=n)
    assert result["fib"] == fibonacci(n)
    assert result["fibs"] == [fibonacci(i) for i in range(10)]


@pytest.mark.parametrize("engine", ENGINES)
@PROPERTY
@given(n=st.integers(0, 3000))
def test_isqrt(engine: str, n: int):
    result = run_with(engine, "isqrt", n=n)
    assert (result["root"], result["rem"]) == (math.isqrt(n), n - math.isqrt(n) ** 2)
