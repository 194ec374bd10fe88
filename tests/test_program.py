"""assembler/program.py: the names a SUBLEQ program gives its cells and instructions."""

from __future__ import annotations

import numpy as np
import pytest

from assembler.subleq import assemble
from vm.common.errors import InputError
from vm.isa import SUBLEQ

SOURCE = """.data
x: 5
xs: .array 1, 2, 3
.code
top:  subleq x, xs+2
again:
next: subleq xs, x, top
      halt
"""


class CountingDict(dict):
    """A dict that counts the scans of its items."""

    scans = 0

    def items(self):
        CountingDict.scans += 1
        return super().items()


def test_cells_and_instructions_are_named_by_their_first_symbol_and_label():
    program = assemble(SOURCE, "names.sq")
    assert [program.address_name(a) for a in range(len(program.memory) + 1)] == [
        "@zero", "@minus_one", "x", "xs+0", "xs+1", "xs+2", "mem[6]"]
    assert [program.label_at(i) for i in range(program.eof + 1)] == ["top", "again", None,
                                                                    "EOF"]


def test_naming_every_instruction_scans_the_labels_once_not_once_a_name():
    """label_at scanned every label for each call: a trace of 30,000 steps through 30,000
    labels took over a minute in it."""
    program = assemble(SOURCE, "names.sq")
    program.labels = CountingDict(program.labels)
    CountingDict.scans = 0
    names = [program.label_at(i) for i in range(program.eof)] * 100
    assert names[:3] == ["top", "again", None] and CountingDict.scans <= 1


@pytest.mark.parametrize("memory,message", [
    ([0, -1], "memory holds 2 words, the program has 6"),
    ([0] * 20, "memory holds 20 words, the program has 6"),
    (None, "must be a list of the program's 6 words, got NoneType")])
def test_named_memory_refuses_a_memory_of_another_length(memory, message):
    """A short memory failed with an IndexError, None with a TypeError, and a longer one
    (another program's) was named as if it were this program's."""
    program = assemble(SOURCE, "names.sq")
    with pytest.raises(InputError, match=message):
        program.named_memory(memory)
    unnamed = assemble(".code\nhalt\n", "unnamed.sq")  # SUBLEQ names none of it: `mem`
    with pytest.raises(InputError, match="memory holds 1 word, the program has 2"):
        SUBLEQ.named_memory(unnamed, [0])


@pytest.mark.parametrize("value", [1.5, "3", None])
def test_named_memory_refuses_words_that_are_no_integers(value):
    """[1.5] * 6 came back named, a word of 1.5 under each name."""
    program = assemble(SOURCE, "names.sq")
    with pytest.raises(InputError, match="memory words must be integers"):
        program.named_memory([0] * 5 + [value])
    assert program.named_memory([0] * 5 + [np.int64(3)]) == program.named_memory([0] * 5 + [3])
    unnamed = assemble(".code\nhalt\n", "unnamed.sq")
    with pytest.raises(InputError, match="memory words must be integers"):
        SUBLEQ.named_memory(unnamed, [value, 0])


@pytest.mark.parametrize("value,message", [
    (2.5, "memory values must be integers, got 2.5"),
    (True, "memory values must be integers, got True"),
    ("1", "memory values must be integers, got '1'"),
    (float("nan"), "memory values must be integers, got nan")])
def test_a_memory_value_that_is_no_integer_is_refused(value, message):
    """dataclasses.replace(program, memory=...) took 2.5: the reference then computed
    with 2.5 and the transformer with the word it encoded, and they disagreed in silence;
    '1' failed with a TypeError in a comparison."""
    import dataclasses
    program = assemble(SOURCE, "p.sq")
    memory = list(program.memory)
    memory[program.symbols["x"].address] = value
    with pytest.raises(InputError, match=message):
        dataclasses.replace(program, memory=memory)


def test_numpy_memory_values_become_python_integers():
    """int8 values overflowed in the reference's arithmetic (an OverflowError), and the
    results of int64 ones were numpy integers."""
    import dataclasses

    import numpy as np
    program = assemble(SOURCE, "p.sq")
    copy = dataclasses.replace(program, memory=np.array(program.memory, dtype=np.int8))
    assert copy.memory == program.memory and all(type(v) is int for v in copy.memory)
    result = SUBLEQ.run_reference(copy, 10)
    assert result.memory == SUBLEQ.run_reference(program, 10).memory


@pytest.mark.parametrize("change,message", [
    ({"bits": 16.0}, "bits must be a whole number of bits, got 16.0"),
    ({"memory": None}, "memory must be a list of integers, got NoneType")])
def test_a_word_size_or_memory_of_the_wrong_type_is_refused(change, message):
    """bits=16.0 failed with a TypeError in `<<`, memory=None in len()."""
    import dataclasses
    with pytest.raises(InputError, match=message):
        dataclasses.replace(assemble(SOURCE, "p.sq"), **change)


def test_an_operand_that_is_no_integer_is_refused():
    """An instruction with a = 2.0 passed the range checks and failed in the reference
    with 'list indices must be integers'."""
    import dataclasses
    program = assemble(SOURCE, "p.sq")
    first = dataclasses.replace(program.instructions[0], a=2.0)
    with pytest.raises(InputError, match="operands must be integers"):
        dataclasses.replace(program, instructions=[first, *program.instructions[1:]])


@pytest.mark.parametrize("index", [-1, 1.5, True, None, "0", 10**6])
def test_lookups_by_index_refuse_what_is_no_index_of_the_program(index):
    """instruction_text(-1) gave the last instruction, (None) or (10**6) failed in list
    indexing, label_at(True) answered for instruction 1, address_name(1.5) 'mem[1.5]'."""
    program = assemble(SOURCE, "p.sq")
    for lookup in (program.instruction_text, program.label_at):
        with pytest.raises(InputError, match="index must be a whole number from 0 to"):
            lookup(index)
    if index != 10**6:  # past the memory is a geometry's padding
        with pytest.raises(InputError, match="address must be a whole number from 0"):
            program.address_name(index)
    assert program.instruction_text(np.int64(program.eof)).endswith("EOF")
    assert program.address_name(10**6) == "mem[1000000]"


@pytest.mark.parametrize("field, value, message", [
    ("instructions", None, "instructions must be a list of Instruction"),
    ("instructions", [None], "instruction 0 must be an Instruction"),
    ("symbols", None, "symbols must be a dict"), ("labels", [], "labels must be a dict")])
def test_a_program_refuses_instructions_or_names_of_the_wrong_kind(field, value, message):
    """replace(program, instructions=None) failed with a TypeError, [None] with "no
    attribute 'pos'", and symbols=None was taken, to fail in named_memory."""
    import dataclasses
    program = assemble(SOURCE, "p.sq")
    with pytest.raises(InputError, match=message):
        dataclasses.replace(program, **{field: value})
    assert dataclasses.replace(program, instructions=tuple(program.instructions)).eof == 3


def test_a_numpy_word_size_runs_as_a_python_int():
    """bits=np.int64(64) overflowed in the word range and in every wrap: gcd's reference
    run wrote -2^63 where it wrote 0; the block size of a FLEQ program likewise stays an
    int."""
    import dataclasses
    from pathlib import Path

    from vm.isa import FLEQ, ProgramOptions
    path = Path(__file__).resolve().parents[1] / "programs" / "subleq" / "gcd.sq"
    plain, _ = SUBLEQ.load(path, ProgramOptions(bits=64))
    program, _ = SUBLEQ.load(path, ProgramOptions(bits=np.int64(64)))
    assert type(program.bits) is int
    assert SUBLEQ.run_reference(program).memory == SUBLEQ.run_reference(plain).memory
    assert type(dataclasses.replace(plain, bits=np.int64(64)).bits) is int
    fleq = FLEQ.assemble_text(".data\nx: 1.0\n.code\nhalt\n")
    assert type(dataclasses.replace(fleq, d=np.int64(1)).d) is int
