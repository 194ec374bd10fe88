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
    return Program([draw(instructions(cells, count)) for _ in range(count)], memory, bits=bits,
                   source="<random>")


@st.composite
def instructions(draw, cells: int, count: int) -> Instruction:
    """A random instruction that leaves the EOF cells 0 and 1 alone (or clears one with
    `subleq x, x`, which keeps it valid)."""
    a = draw(st.integers(0, cells - 1))
    b = draw(st.integers(0, cells - 1))
    if b < 2 and a != b:
        b = a if draw(st.booleans()) or cells == 2 else draw(st.integers(2, cells - 1))
    return Instruction(a, b, draw(st.integers(0, count)))


@st.composite
def vsubleq_images(draw, bits: int, size: int = 32, max_instructions: int = 6,
                   io: bool = False):
    """A random standard SUBLEQ image of `size` words: instructions at 0, 3, ... reading any
    word (code included) and writing only data words, jumping to an instruction, to a
    negative address or past the memory (both halt); a halting `h h -1` after the last
    one, random data words after that. With `io`, a or b may be -1 (input, output, or
    both: input into the last word); else no operand is -1."""
    from vm.machines.vsubleq.reference import Image
    count = draw(st.integers(1, max_instructions))
    data = 3 * (count + 1)
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    targets = st.one_of(st.sampled_from([3 * k for k in range(count + 1)]),
                        st.integers(low, -1), st.integers(size, high))
    code: list[int] = []
    reads, writes = st.integers(0, size - 1), st.integers(data, size - 1)
    if io:
        reads, writes = st.one_of(reads, st.just(-1)), st.one_of(writes, st.just(-1))
    for _ in range(count):
        code += [draw(reads), draw(writes), draw(targets)]
    code += [data, data, -1]
    words = draw(st.lists(st.integers(low, high), min_size=size - data, max_size=size - data))
    return Image.from_words(code + words, bits)
