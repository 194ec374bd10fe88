"""Image <-> X for the standard SUBLEQ machine: memory words in the memory columns, the
input bytes on the input tape (then the -1 sentinel), an empty output tape, the position
codes beside them, pc = 0, 1, 2, the tape pointers at the tapes' starts and halted = 0 in
the cpu column."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from vm.common.encoding import code_value, pm1_code, pm1_codes, word_values
from vm.common.errors import InputError, RunFailure
from vm.common.limits import is_whole_number
from vm.machines.vsubleq.layout import MAX_COLUMNS, VGeometry, vsubleq_layout
from vm.machines.stepping import step_until_halted
from vm.machines.vsubleq.reference import Image, Reference, wrap
from vm.transformer.layout import Layout

SIZING_STEPS = 100_000
"""Steps the reference runs to size an output tape when neither a length nor a step limit is
given (`ltvm run`'s default limit)."""


@dataclass(frozen=True)
class VState:
    """What the reference also keeps: memory, pc, halted, bytes read, output; and whether
    the output tape ran full."""

    memory: list[int]
    pc: int
    halted: bool
    read: int
    output: bytes
    overflow: bool


def check_max_output(max_output: object) -> int | None:
    """`max_output` if it is None (size the tape by a reference run) or a whole number of
    bytes, else InputError: 1.5 failed with "no attribute 'bit_length'", and True built a
    tape of one byte."""
    if max_output is not None and not is_whole_number(max_output):
        raise InputError(f"max_output must be a whole number of bytes or None, got "
                         f"{max_output!r:.40}")
    return None if max_output is None else int(max_output)


def output_needed(image: Image, input_bytes: bytes = b"", max_steps: int = SIZING_STEPS,
                  progress: Callable[[int], None] | None = None,
                  limit: int | None = None) -> int:
    """The output tape a run of at most `max_steps` steps needs: the bytes the reference
    writes in as many steps. Every output column costs every pass attention over it, so a
    tape sized by a fixed default (256 bytes) made a 32-word image's passes nine times
    wider than its memory; sized this way an image that writes nothing gets no tape.
    `progress` gets the reference's step count (millions of steps take a while) and may
    end the sizing by raising. The sizing stops once more than `limit` bytes are written
    (and returns that count; by default the longest tape the column limit leaves beside the
    image and its input): no longer tape could be built (`ltvm trace --step 5000000` of an
    image that writes on and on ran 5 million steps, then the geometry refused 2.5 MB)."""
    if limit is None:
        limit = max(0, output_room(image, len(input_bytes)))
    reference = Reference(image, input_bytes)
    stop = lambda: len(reference.output) > limit  # noqa: E731
    step_until_halted(reference, max_steps, progress=progress, stop=stop)
    return len(reference.output)


def output_room(image: Image, inputs: int = 0) -> int:
    """The longest output tape the column limit leaves beside `image` and `inputs` input
    bytes (negative when even those do not fit)."""
    return MAX_COLUMNS - 2 - image.size - inputs


def default_outputs(image: Image, input_bytes: bytes, max_steps: int,
                    progress: Callable[[int], None] | None = None) -> int:
    """The output tape of a run of at most `max_steps` steps when none was asked for: what
    the reference writes in as many steps. Refused (InputError) before the sizing run when
    the input alone leaves no room, and as soon as the reference writes more than the
    column limit leaves, rather than after all `max_steps` steps (an image that writes on
    and on ran 20 million reference steps for a minute, then was refused)."""
    VGeometry(image.size, image.bits, len(input_bytes))  # the input alone must fit
    room = output_room(image, len(input_bytes))
    needed = output_needed(image, input_bytes, max_steps, _sizing(progress, max_steps),
                           limit=room)
    if needed > room:
        raise InputError(f"the image writes more than {room:,} bytes within {max_steps:,} "
                         f"steps, the longest output tape the transformer's {MAX_COLUMNS:,} "
                         f"columns leave beside {image.size:,} memory words and "
                         f"{len(input_bytes):,} input bytes; run fewer --max-steps, or give "
                         f"--max-output BYTES to stop when that many are written")
    return needed


def _sizing(progress: Callable[[int], None] | None, max_steps: int
            ) -> Callable[[int], None] | None:
    """`progress` as the sizing run reports to it: the run it counts has made no step yet, so
    it hears 0 (its time limit still stops the sizing), and a stop says what was running.
    Told the reference's steps, a --max-seconds reached there said 'stopped after 4,096
    compared steps' of a comparison that had compared none."""
    if progress is None:
        return None

    def sizing(steps: int) -> None:
        try:
            progress(0)
        except RunFailure as stopped:
            stopped.args = (f"{stopped} (the reference was sizing the output tape: {steps:,} "
                            f"of {max_steps:,} steps run; --max-output BYTES skips that)",)
            raise
    return sizing


def geometry_for(image: Image, inputs: int = 0, outputs: int | None = None) -> VGeometry:
    """The geometry of an image with tapes of `inputs` and `outputs` bytes (by default, what
    a run without input writes in `SIZING_STEPS` steps, at most what the column limit
    leaves: an image of 2^14 words that writes on and on was refused by every command,
    the reference's too, for a tape no run asked for; one that fills it is told so)."""
    if outputs is None:
        room = output_room(image, inputs)
        outputs = max(0, min(output_needed(image, limit=max(0, room)), room))
    return VGeometry(image.size, image.bits, inputs, outputs)


def check_fits(image: Image, geometry: VGeometry) -> None:
    """Raise InputError unless the geometry has the image's memory size and word size (its
    tapes may be any)."""
    if (image.size, image.bits) != (geometry.memory, geometry.bits):
        raise InputError(f"image has {image.size} {image.bits}-bit words, the geometry "
                         f"{geometry.memory} {geometry.bits}-bit words")


def encode(image: Image, geometry: VGeometry, layout: Layout | None = None,
           input_bytes: bytes = b"") -> np.ndarray:
    """The punchcard X (rows x n, float64) of `image` and its input before the first pass."""
    check_fits(image, geometry)
    if len(input_bytes) != geometry.inputs:
        raise InputError(f"{len(input_bytes)} input bytes for an input tape of "
                         f"{geometry.inputs}")
    layout = layout or vsubleq_layout(geometry)
    P, X = geometry.code_bits, np.zeros((layout.rows, layout.columns))
    X[layout["scratch"], 0] = 1
    X[layout["cpu"], 0] = 1
    X[layout["pos"], 1:] = pm1_codes(np.arange(layout.columns - 1), P).T
    words = list(image.memory) + [wrap(byte, geometry.bits) for byte in input_bytes] + [-1]
    X[layout["mem"], 1:1 + len(words)] = pm1_codes(np.array(words, dtype=np.int64),
                                                   geometry.bits).T
    for offset in range(3):
        X[layout[f"pc{offset}"], 0] = pm1_code(offset, geometry.pos_bits)
    X[layout["inp"], 0] = pm1_code(geometry.input_start, P)
    X[layout["outp"], 0] = pm1_code(geometry.output_start, P)
    return X


def decode_state(X: np.ndarray, geometry: VGeometry, layout: Layout) -> VState:
    """The whole machine state read back from X (signs decide bits)."""
    X = np.asarray(X)
    memory = word_values(X[layout["mem"], 1:1 + geometry.memory])
    written = code_value(X[layout["outp"], 0]) - geometry.output_start
    start = 1 + geometry.output_start
    output = bytes(word & 0xFF for word in word_values(X[layout["mem"], start:start + written]))
    return VState(memory, code_value(X[layout["pc0"], 0]),
                  bool(X[layout["halted"], 0][0] > 0.5),
                  code_value(X[layout["inp"], 0]) - geometry.input_start, output,
                  bool(X[layout["overflow"], 0][0] > 0.5))


def decode(X: np.ndarray, layout: Layout, geometry: VGeometry) -> tuple[list[int], int, bool]:
    """(memory, pc, halted) read back from X."""
    state = decode_state(X, geometry, layout)
    return state.memory, state.pc, state.halted


def encode_state(image: Image, geometry: VGeometry, layout: Layout, input_bytes: bytes,
                 state: VState) -> np.ndarray:
    """The punchcard of a machine already in `state` (its memory, pc, bytes read and output),
    with `input_bytes` on the input tape: what the REPL loads when fed input or when the
    output tape must grow, since both tapes' lengths are in the weights."""
    if len(state.output) > geometry.outputs:
        raise InputError(f"{len(state.output)} output bytes for an output tape of "
                         f"{geometry.outputs}")
    X = encode(Image(tuple(state.memory), image.bits, image.length, image.source), geometry,
               layout, input_bytes)
    P, size = geometry.code_bits, geometry.memory
    for offset in range(3):
        X[layout[f"pc{offset}"], 0] = pm1_code((state.pc + offset) % size, geometry.pos_bits)
    X[layout["inp"], 0] = pm1_code(geometry.input_start + state.read, P)
    X[layout["outp"], 0] = pm1_code(geometry.output_start + len(state.output), P)
    if state.output:
        start = 1 + geometry.output_start
        X[layout["mem"], start:start + len(state.output)] = pm1_codes(
            np.array([wrap(byte, geometry.bits) for byte in state.output], dtype=np.int64),
            geometry.bits).T
    X[layout["halted"], 0] = float(state.halted)
    return X
