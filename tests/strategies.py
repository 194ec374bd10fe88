"""Hypothesis strategies shared by the tests: random valid SUBLEQ programs."""

from __future__ import annotations

from hypothesis import strategies as st

from assembler.program import Instruction, Program, word_range


@st.composite
def programs(draw, max_memory: int = 12, max_instructions: int = 16, min_bits: int = 2,
             max_bits: int = 16) -> Program:
    """A random program: random operands and jump targets (EOF included), random
    initial memory, with cells 0 and 1 the reserved 0 and -1."""
    bits = draw(st.integers(min_bits, max_bits))
    low, high = word_range(bits)
    cells = draw(st.integers(2, max_memory))
    memory = [0, -1] + draw(st.lists(st.integers(low, high), min_size=cells - 2,
                                     max_size=cells - 2))
    count = draw(st.integers(1, max_instructions))
    instructions = [Instruction(draw(st.integers(0, cells - 1)), draw(st.integers(0, cells - 1)),
                                draw(st.integers(0, count)))
                    for _ in range(count)]
    return Program(instructions, memory, bits=bits, source="<random>")
