"""The README's example programs assemble and run as the README says."""

from __future__ import annotations

import re
from pathlib import Path

from vm.isa import FLEQ
from vm.machines.fleq.punchcard import fleq_geometry_for
from assembler.subleq import assemble
from vm.runtime.compare import compare_fleq
from vm.machines.subleq.reference import run_reference
from vm.machines.vsubleq.reference import Image, run_reference as run_vsubleq
from assembler.dec import load_image

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def example(opening: str) -> str:
    """The fenced block of the README whose first line starts with `opening`."""
    blocks = re.findall(r"```\n(.*?)```", README, flags=re.S)
    return next(b for b in blocks if b.startswith(opening))


def test_subleq_example_halts_as_its_comments_say():
    """Per the comments: n counts 6 down to 0, and each of the 5 passes that continue
    subtracts xs+2 (0x10) from buf."""
    program = assemble(example("; factorial-style skeleton"), "README.sq")
    result = run_reference(program, 1000)
    assert result.halted
    assert program.named_memory(result.memory) == \
        {"n": 0, "xs": [3, -1, 16], "buf": [-80, 0, 0], "one": 1}


def test_fleq_example_runs_on_the_transformer_like_the_reference():
    program = FLEQ.assemble_text(example("; a FLEQ program"), "README.fleq")
    comparison = compare_fleq(program, fleq_geometry_for(program), 100)
    assert comparison.ok and comparison.halted
    assert comparison.steps == 16


def test_standard_subleq_image_prints_hello_world():
    image = Image.from_words(load_image(example("# the pointer is word 0 itself")))
    result = run_vsubleq(image, 1000)
    assert result.halted and result.output == b"Hello, world!\n"
