"""The oracle of standard SUBLEQ: one array of N-bit words, code and data alike.

At pc the three words a, b, c form an instruction: mem[b] = wrap(mem[b] - mem[a]);
if the result is <= 0 then pc = c else pc += 3. Conventions (those of Mazonka's sqrun
and the eForth SUBLEQ image): a = -1 reads one input byte into mem[b] (-1 at end of
input), b = -1 writes mem[a] as an output byte (its low 8 bits); neither branches. A next
pc outside the memory (negative, or >= its size) halts; the halting instruction's write
still happens and pc stays on it. Memory is padded with zeros to a power of two m, and
every other address (a, b, pc + 1, pc + 2) is taken modulo m, which is what a
transformer keyed by the low log2(m) bits of a word does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Callable

from vm.common.errors import InputError
from vm.common.limits import is_whole_number
from vm.machines.stepping import DEFAULT_MAX_STEPS, step_until_halted

MIN_MEMORY = 4
MAX_BITS = 64


def wrap(value: int, bits: int) -> int:
    """`value` as an N-bit two's-complement word."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


@dataclass(frozen=True)
class Image:
    """A memory image: the words (padded to a power of two) and the word size N."""

    memory: tuple[int, ...]
    bits: int
    length: int
    """How many words the source gave (the rest is zero padding)."""
    source: str = "<image>"

    def __post_init__(self) -> None:
        """Refuse what the machine cannot hold, however the image was made, and hold the
        words as Python ints: a float word failed deep in the reference (TypeError in
        `wrap`) and was truncated on the transformer, numpy's uint8 words wrapped in the
        reference's subtraction, a memory of 3 words ran on the reference alone, a str
        word or word size failed in a comparison."""
        if not is_whole_number(self.bits) or not 2 <= self.bits <= MAX_BITS:
            raise InputError(f"word size must be between 2 and {MAX_BITS} bits, got "
                             f"{self.bits!r:.40}")
        if not isinstance(self.memory, (tuple, list)):
            raise InputError(f"an image's memory must be a tuple of words, got "
                             f"{type(self.memory).__name__}")
        low, high = -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        for index, word in enumerate(self.memory):
            if not is_whole_number(word):
                raise InputError(f"word {index} is {word!r:.40}, not a whole number")
            if not low <= word <= high:
                raise InputError(f"word {index} is {word}, outside the {self.bits}-bit range "
                                 f"{low}..{high}")
        object.__setattr__(self, "memory", tuple(int(word) for word in self.memory))
        size = len(self.memory)
        if size < MIN_MEMORY or size & (size - 1):
            raise InputError(f"an image's memory must be a power of two of at least "
                             f"{MIN_MEMORY} words (Image.from_words pads it), got {size}")
        if not is_whole_number(self.length) or not 1 <= self.length <= size:
            raise InputError(f"an image's length must be from 1 to its {size} cells, got "
                             f"{self.length!r:.40}")
        if size > 1 << (self.bits - 1):
            raise InputError(f"{self.length} words need {size} cells, more than {self.bits}-bit "
                             f"words can address ({1 << (self.bits - 1)})")

    @classmethod
    def from_words(cls, words: Sequence[int], bits: int = 16, source: str = "<image>"
                   ) -> "Image":
        """Pad `words` to a power of two >= 4; refuse words or sizes N bits cannot hold,
        and an image of no words."""
        if isinstance(words, (str, bytes)) or not isinstance(words, Iterable):
            raise InputError(f"an image's words must be a list of whole numbers, got "
                             f"{type(words).__name__}")
        words = tuple(words)
        if not words:
            raise InputError("an image needs at least one word")
        size = MIN_MEMORY
        while size < len(words):
            size *= 2
        return cls(words + (0,) * (size - len(words)), bits, len(words), source)

    @property
    def size(self) -> int:
        return len(self.memory)


@dataclass(frozen=True)
class Step:
    """One executed instruction: its operands, what it wrote and where it went."""

    step: int
    pc: int
    a: int
    b: int
    c: int
    old: int
    new: int
    jumped: bool
    next_pc: int
    halted: bool
    io: str | None = None
    """'in' or 'out' for an I/O instruction, else None."""


@dataclass
class Result:
    """The state after a run (the shape `vm.isa` commands print)."""

    memory: list[int]
    pc: int
    steps: int
    halted: bool
    output: bytes = b""
    trace: list[Step] = field(default_factory=list)


def check_image(image: object) -> Image:
    """`image` if it is an Image, else InputError naming what it is (None failed on
    `.memory`)."""
    if not isinstance(image, Image):
        raise InputError(f"a standard SUBLEQ run takes an Image (Image.from_words, or a .dec "
                         f"or .vsq loaded), got {type(image).__name__}")
    return image


def check_input_bytes(input_bytes: object) -> bytes:
    """The input stream as bytes, or InputError for anything else: a str failed with
    "string argument without an encoding", [300] with "bytes must be in range(0, 256)"."""
    if not isinstance(input_bytes, (bytes, bytearray, memoryview)):
        raise InputError(f"input_bytes must be bytes (text.encode() for a str), got "
                         f"{type(input_bytes).__name__}")
    return bytes(input_bytes)


class Reference:
    """Executes an `Image` one instruction at a time, with byte input and output."""

    def __init__(self, image: Image, input_bytes: bytes = b"") -> None:
        self.image = check_image(image)
        self.memory = list(image.memory)
        self.input = check_input_bytes(input_bytes)
        self.read = 0
        self.output = bytearray()
        self.pc = 0
        self.steps = 0
        self.halted = False

    def step(self) -> Step:
        """Execute the instruction at pc (nothing once halted)."""
        if self.halted:
            raise RuntimeError("the machine has halted")
        memory, size, bits, pc = self.memory, self.image.size, self.image.bits, self.pc
        a, b, c = memory[pc], memory[(pc + 1) % size], memory[(pc + 2) % size]
        io = "in" if a == -1 else "out" if b == -1 else None
        if io == "in":
            old = memory[b % size]
            new = wrap(self.input[self.read], bits) if self.read < len(self.input) else -1
            self.read += self.read < len(self.input)
            memory[b % size] = new
            jumped = False
        elif io == "out":
            old = new = memory[a % size]
            self.output.append(new & 0xFF)
            jumped = False
        else:
            old = memory[b % size]
            new = wrap(old - memory[a % size], bits)
            memory[b % size] = new
            jumped = new <= 0
        target = c if jumped else pc + 3
        self.halted = not 0 <= target < size
        record = Step(self.steps, pc, a, b, c, old, new, jumped,
                      pc if self.halted else target, self.halted, io)
        self.pc = record.next_pc
        self.steps += 1
        return record

    def run(self, max_steps: int, trace: bool = False,
            progress: Callable[[int], None] | None = None) -> Result:
        """Run until halted or `max_steps` instructions; `progress` (a step count now and
        then) may end the run by raising."""
        records = step_until_halted(self, max_steps, trace, progress)
        return Result(list(self.memory), self.pc, self.steps, self.halted,
                      bytes(self.output), records)


def run_reference(image: Image, max_steps: int = DEFAULT_MAX_STEPS, input_bytes: bytes = b"",
                  trace: bool = False, progress: Callable[[int], None] | None = None
                  ) -> Result:
    """Run `image` from its initial state on the reference interpreter."""
    return Reference(image, input_bytes).run(max_steps, trace, progress)
