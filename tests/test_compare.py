"""Lockstep comparison: zero divergences on random programs; faults are reported."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from assembler.program import Instruction, Program, word_range
from vm.machines.subleq.punchcard import geometry_for
from assembler.subleq import assemble
from strategies import instructions as random_instruction
from vm.runtime.compare import compare_program, compare_programs
from vm.runtime.executor import EngineConfig, Runner, TransformerExecutor


@st.composite
def batches(draw, max_memory: int = 10, max_instructions: int = 14):
    """A random geometry and several random programs of exactly that geometry."""
    bits = draw(st.sampled_from([2, 3, 4, 8, 12, 16, 17, 24, 32]))
    cells = draw(st.integers(2, max_memory))
    count = draw(st.integers(1, max_instructions))
    low, high = word_range(bits)
    programs = []
    for _ in range(draw(st.integers(1, 6))):
        memory = [0, -1] + draw(st.lists(st.integers(low, high), min_size=cells - 2,
                                         max_size=cells - 2))
        programs.append(Program([draw(random_instruction(cells, count)) for _ in range(count)],
                                memory, bits=bits, source="<random>"))
    return programs, draw(st.integers(1, 3))


@settings(max_examples=25, deadline=None)
@given(batches(), st.sampled_from(["float32", "float64"]), st.sampled_from(["masked", "dense"]))
def test_random_programs_run_in_lockstep_with_zero_divergences(batch, dtype, attention):
    programs, scratch = batch
    geometry = geometry_for(programs[0], scratch)
    results = compare_programs(programs, geometry, max_steps=100,
                               config=EngineConfig(dtype=dtype, attention=attention))
    for program, result in zip(programs, results, strict=True):
        assert result.ok, result.divergence.describe()


def test_wide_programs_use_the_linear_masked_path_and_agree():
    """n above the bias threshold exercises the O(n) masked attention."""
    import random
    rng = random.Random(7)
    cells, count = 60, 250
    memory = [0, -1] + [rng.randint(-128, 127) for _ in range(cells - 2)]
    instructions = [Instruction(rng.randrange(cells), rng.randrange(2, cells), rng.randrange(count))
                    for _ in range(count)]
    program = Program(instructions, memory, bits=8)
    geometry = geometry_for(program)
    assert geometry.columns > 256
    for attention in ("masked", "dense"):
        result = compare_program(program, geometry, 150, EngineConfig(attention=attention))
        assert result.ok and result.steps == 150


def test_a_fault_is_reported_with_step_instruction_field_and_values(monkeypatch):
    program = assemble(".data\nx: 5\ny: 9\n.code\nsubleq x, y\nsubleq x, y\nhalt\n", "t.sq")
    geometry = geometry_for(program)
    real_advance = Runner.advance

    def faulty_advance(self, max_steps, progress=None):
        real_advance(self, max_steps, progress)
        if self.done == 2:  # flip the lowest bit of y after the second instruction
            row = self.executor.layout.row("mem", geometry.bits - 1)
            with torch.inference_mode():
                self.X[row, :, geometry.memory_column(program.symbols["y"].address)] *= -1

    monkeypatch.setattr(Runner, "advance", faulty_advance)
    result = compare_program(program, geometry, 100)
    assert not result.ok
    divergence = result.divergence
    assert (divergence.step, divergence.pc, divergence.field) == (1, 1, "y")
    assert divergence.instruction == "subleq x, y"
    assert (divergence.reference, divergence.transformer) == (-1, -2)  # ...1111 -> ...1110
    assert "step 1" in divergence.describe() and "y is -1 on the reference" in divergence.describe()


def test_halting_program_reports_its_step_count():
    program = assemble(".data\nx: 3\n.code\nl: subleq one, x, end\ngoto l\nend: halt\n"
                       ".data\none: 1\n", "t.sq")
    result = compare_program(program, geometry_for(program), 1000)
    assert result.ok and result.halted and result.steps == 6


def test_decoded_state_is_exactly_integral_at_the_default_temperature():
    program = assemble(".bits 32\n.data\nx: 123456789\ny: -987654321\n.code\n"
                       "l: subleq x, y, l\nhalt\n", "t.sq")
    executor = TransformerExecutor(geometry_for(program), EngineConfig(dtype="float32"))
    X = executor.load([program])
    for step in range(40):
        X = executor.step(X, step)
        assert torch.equal(X, X.round())


def test_a_max_steps_that_is_not_a_whole_number_is_refused():
    """-1 compared nothing and reported 'not halted'; 2.5 failed in range()."""
    import pytest
    from vm.common.errors import InputError
    program = assemble(".data\nx: 5\ny: 0\n.code\nsubleq x, y\nhalt\n", "c.sq")
    for max_steps in (-1, 2.5):
        with pytest.raises(InputError, match="max_steps"):
            compare_program(program, geometry_for(program), max_steps)


def test_a_progress_that_is_not_a_function_is_refused():
    """compare_program(..., progress=5) failed with "'int' object is not callable" after
    the first step."""
    import pytest
    from vm.common.errors import InputError
    program = assemble(".data\nx: 5\ny: 0\n.code\nsubleq x, y\nhalt\n", "c.sq")
    with pytest.raises(InputError, match="progress"):
        compare_program(program, geometry_for(program), 10, progress=5)


def test_a_fleq_program_is_refused_naming_compare_fleq():
    """compare_program(fleq_program, fleq_geometry) failed in the SUBLEQ reference with
    "'FleqProgram' object has no attribute 'memory'"."""
    import pytest
    from vm.common.errors import InputError
    from vm.isa import FLEQ
    program = FLEQ.assemble_text(".data\na: 3.0\nc: 0.0\n.code\nc = mul(a, a)\nhalt\n")
    with pytest.raises(InputError, match="compare_fleq"):
        compare_program(program, FLEQ.geometry_for(program), 10)


def test_a_standard_subleq_image_is_refused_naming_its_own_compare():
    """compare_program(image, its VGeometry) was told that FLEQ programs compare with
    compare_fleq, which refuses an image too."""
    import pytest
    from vm.common.errors import InputError
    from pathlib import Path
    from vm.isa import ProgramOptions, for_path
    path = Path(__file__).resolve().parents[1] / "programs" / "vsubleq" / "echo.vsq"
    image, geometry = for_path(str(path)).load(path, ProgramOptions())
    with pytest.raises(InputError, match="standard SUBLEQ images with "
                                         "vm.machines.vsubleq.run.compare"):
        compare_program(image, geometry, 10)


def test_a_sampling_config_is_refused_by_both_comparisons():
    """compare_program with EngineConfig(sampling=0.5) ran stochastic reads and reported
    gcd.sq 'diverging at step 8' as if the exact machine computed it wrong."""
    import pytest
    from vm.common.errors import InputError
    from vm.isa import FLEQ
    from vm.runtime.compare import compare_fleq
    program = assemble(".data\na: 7\nb: 3\n.code\nsubleq a, b\n")
    with pytest.raises(InputError, match="stochastic reads .sampling=0.5.: sampled runs are "
                                         "`ltvm sample`'s"):
        compare_program(program, geometry_for(program), 10, EngineConfig(sampling=0.5))
    fleq = FLEQ.assemble_text(".data\na: 3.0\nc: 0.0\n.code\nc = mul(a, a)\nhalt\n")
    with pytest.raises(InputError, match="stochastic reads"):
        compare_fleq(fleq, FLEQ.geometry_for(fleq), 10, EngineConfig(sampling=5.0, seed=1))


@pytest.mark.parametrize("options", [["--noise", "0.5"], ["--seed", "3"], ["--samples", "4"],
                                     ["--strategy", "majority"], ["--reward", "reference"],
                                     ["--cell", "a"], ["--seed=3", "--noise", "1"]])
def test_ltvm_compare_refuses_the_sampling_options_of_ltvm_sample(options, capsys):
    """`ltvm compare prog --noise 0.5 --seed 3` said only 'unrecognized arguments', not that
    compare runs the exact transformer and where such options belong."""
    from pathlib import Path
    from vm.cli import main
    program = Path(__file__).resolve().parents[1] / "programs" / "subleq" / "gcd.sq"
    assert main(["compare", str(program), *options]) == 2
    captured = capsys.readouterr()
    named = {option.split("=")[0] for option in options if option.startswith("--")}
    assert captured.out == "" and captured.err.count("\n") == 1
    listed, _, reason = captured.err.removeprefix("ltvm: error: ").partition(": ")
    assert set(listed.split(", ")) == named
    assert "of `ltvm sample`; compare runs the exact transformer" in reason
