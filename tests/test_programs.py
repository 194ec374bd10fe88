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
from vm.machines.subleq.punchcard import geometry_for
from vm.runtime.executor import TransformerExecutor, run_transformer
from vm.machines.subleq.reference import run_reference

ROOT = Path(__file__).resolve().parents[1]
SUBLEQ_DIR = ROOT / "programs" / "subleq"
CSV_DIR = ROOT / "programs" / "csv"

ENGINES = ["reference", "transformer"]
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
    if engine == "transformer":
        result = run_transformer(program, geometry_for(program), max_steps)
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
# Each property: a strategy for the program's inputs and a check of its outputs.
# The reference runs them one by one through hypothesis; the transformer runs a
# hypothesis-drawn batch of inputs at once (one geometry, one batch), as users do.


def fibonacci(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def expect_search(i, o):
    return o["index"] == (i["xs"].index(i["key"]) if i["key"] in i["xs"] else -1)


def expect_isqrt(i, o):
    return (o["root"], o["rem"]) == (math.isqrt(i["n"]), i["n"] - math.isqrt(i["n"]) ** 2)


ARRAY7 = st.lists(st.integers(-1000, 1000), min_size=7, max_size=7)
PROPERTIES = {
    "multiply": (st.fixed_dictionaries({"a": st.integers(-60, 60), "b": st.integers(-60, 60)}),
                 lambda i, o: o["prod"] == i["a"] * i["b"]),
    "divmod": (st.fixed_dictionaries({"a": st.integers(0, 500), "b": st.integers(1, 60)}),
               lambda i, o: (o["q"], o["r"]) == divmod(i["a"], i["b"])),
    "gcd": (st.fixed_dictionaries({"a": st.integers(1, 300), "b": st.integers(1, 300)}),
            lambda i, o: o["g"] == math.gcd(i["a"], i["b"])),
    "bubble_sort": (st.fixed_dictionaries({"xs": ARRAY7}),
                    lambda i, o: o["xs"] == sorted(i["xs"])),
    "reverse": (st.fixed_dictionaries({"xs": ARRAY7}), lambda i, o: o["xs"] == i["xs"][::-1]),
    "linear_search": (st.fixed_dictionaries({"xs": st.lists(st.integers(-4, 4), min_size=8,
                                                            max_size=8),
                                             "key": st.integers(-5, 5)}), expect_search),
    "array_max": (st.fixed_dictionaries({"xs": st.lists(st.integers(-1000, 1000), min_size=8,
                                                        max_size=8)}),
                  lambda i, o: (o["best"], o["at"]) == (max(i["xs"]),
                                                        i["xs"].index(max(i["xs"])))),
    # F(23) = 28657 is the last one below 2^15
    "fibonacci": (st.fixed_dictionaries({"n": st.integers(0, 23)}),
                  lambda i, o: o["fib"] == fibonacci(i["n"])
                  and o["fibs"] == [fibonacci(k) for k in range(10)]),
    "isqrt": (st.fixed_dictionaries({"n": st.integers(0, 3000)}), expect_isqrt),
}


@pytest.mark.parametrize("name", PROPERTIES)
@PROPERTY
@given(data=st.data())
def test_property_on_the_reference(name: str, data):
    inputs, check = data.draw(PROPERTIES[name][0]), PROPERTIES[name][1]
    assert check(inputs, run_with("reference", name, **inputs))


TRANSFORMER_BATCH = 12


@pytest.mark.parametrize("name", PROPERTIES)
@settings(max_examples=1, deadline=None)
@given(data=st.data())
def test_property_on_the_transformer_in_one_batch(name: str, data):
    strategy, check = PROPERTIES[name]
    cases = data.draw(st.lists(strategy, min_size=TRANSFORMER_BATCH, max_size=TRANSFORMER_BATCH))
    programs = [assemble(with_data(source(name), **inputs), f"{name}.sq") for inputs in cases]
    geometry = geometry_for(programs[0])
    executor = TransformerExecutor(geometry)
    results = executor.results(executor.run(executor.load(programs), MAX_STEPS))
    for inputs, program, result in zip(cases, programs, results, strict=True):
        assert result.halted, inputs
        assert check(inputs, named(program, result.memory)), inputs
