"""Standard SUBLEQ (.vsq, .dec) under hostile but realistic use: each test names the input
that misbehaved and what it did before."""

from __future__ import annotations

from pathlib import Path

import pytest

from assembler.dec import load_image
from assembler.diagnostics import SourceError
from assembler.vsq import assemble
from vm.common.errors import InputError
from vm.machines.vsubleq.layout import VGeometry
from vm.machines.vsubleq.punchcard import output_needed
from vm.machines.vsubleq.reference import Image
from vm.machines.vsubleq.run import compare, run_transformer
from vm.tools.progress import TimeLimitExceeded

ECHO = Path(__file__).resolve().parents[1] / "programs" / "vsubleq" / "echo.dec"
SPEW = [6, -1, 3, 7, 7, 0, 65, 0]
"""`l: subleq x, -1` / `goto l` / `x: .word 65`: writes 'A' forever, one byte in two steps."""


def _no_long_sizing(limit: int):
    def progress(steps: int) -> None:
        if steps > limit:
            raise AssertionError(f"the sizing run went on to {steps:,} steps")
    return progress


@pytest.mark.parametrize("engine", [run_transformer, compare])
def test_an_endless_writer_is_refused_once_it_passes_the_column_limit(engine) -> None:
    """`ltvm run spew.vsq --max-steps 20000000` ran all 20 million reference steps to size
    the output tape (a minute), then said 'the tapes must have 0 or more bytes and all
    columns at most 65536, got input 0, output 10000000'. The sizing now stops once the
    image has written more than the columns leave (about 131,000 steps here)."""
    with pytest.raises(InputError, match=r"writes more than 65,526 bytes within "
                                         r"1,000,000,000 steps.*--max-output"):
        engine(Image.from_words(SPEW, 16), 10 ** 9, progress=_no_long_sizing(200_000))


def test_an_input_too_long_for_the_columns_is_refused_before_the_sizing_run() -> None:
    """70,000 input bytes cannot fit beside any memory, but the reference ran first for up to
    --max-steps steps to size the output tape."""
    image = Image.from_words(load_image(ECHO.read_text(), str(ECHO), 16), 16)
    with pytest.raises(InputError, match="an input tape of 70,000 bytes"):
        run_transformer(image, 10 ** 6, input_bytes=b"x" * 70_000,
                        progress=_no_long_sizing(0))


@pytest.mark.parametrize("separator", ["\f", "\v", "\x1c", "\x85", "\u2028"])
def test_a_page_break_in_a_comment_leaves_errors_on_their_line(separator: str) -> None:
    """str.splitlines, which picks the line an error shows, ends a line at a form feed (and
    at \\v, \\x1c-\\x1e, \\x85, U+2028/9); the lexer counts newlines only. So after
    `; page 1<FF> page 2` an error on line 3 showed line 2 ('halt') under its caret."""
    with pytest.raises(SourceError) as error:
        assemble(f"; page 1{separator} page 2\nhalt\nfoo 1\n", "f.vsq")
    assert str(error.value).splitlines() == [
        "f.vsq:3:1: error: unknown mnemonic 'foo' (expected subleq, goto or halt)",
        "    foo 1", "    ^~~"]


def test_a_form_feed_line_is_blank() -> None:
    """A page break alone on its line (old sources have them) was 'unexpected character',
    shown under an empty line; it is a blank, as in .dec images."""
    assert assemble("halt\n\f\n.word 7\n").words == [4, 4, -1, 7, 0]


def _out_of_time(steps: int) -> None:
    raise TimeLimitExceeded(f"stopped by --max-seconds after {steps} steps, before the "
                            f"program halted")


def test_a_run_that_halted_is_not_reported_as_stopped_by_the_time_limit() -> None:
    """`ltvm run calc.vsq --bits 32 --input '7 + 5' --max-seconds 0.001` said 'stopped by
    --max-seconds 0.001 after 188 steps, before the program halted' (exit 1): the last
    chunk of passes halted the machine, then the clock was asked."""
    result = run_transformer(Image.from_words([0, 0, -1], 8), 100, progress=_out_of_time)
    assert (result.halted, result.steps) == (True, 1)


def test_a_comparison_that_reached_the_halt_is_not_reported_as_stopped() -> None:
    """compare asked the clock after each step before looking at it, so the step that
    halted both engines (or showed a divergence) was reported as a time limit."""
    comparison = compare(Image.from_words([0, 0, -1], 8), 100, progress=_out_of_time)
    assert (comparison.ok, comparison.halted, comparison.steps) == (True, True, 1)


def test_dense_attention_beyond_the_free_memory_is_refused_before_any_pass(monkeypatch):
    """`ltvm run big.vsq --attention dense --input-file 32k` (n = 64,770) allocated a head's
    n x n scores and softmax, 31 GiB in float32, in the first pass, until the machine ran
    out. Here the free memory is made smaller than a 4-word image's scores instead."""
    import vm.transformer.memory

    monkeypatch.setattr(vm.transformer.memory, "free_memory", lambda device: 100)
    image = Image.from_words([0, 0, -1], 8)
    with pytest.raises(InputError, match=r"--attention dense at n = 6 columns .* GiB free on "
                                         r"cpu: use --attention masked"):
        run_transformer(image, 10, attention="dense")
    assert run_transformer(image, 10, attention="masked").halted  # masked: linear, not asked


def test_the_sizing_run_stops_where_no_longer_tape_could_be_built() -> None:
    """`ltvm trace spew.vsq --step 5000000 --gif s.gif` sized its tape by 5 million
    reference steps, then the geometry refused 2.5 MB of tape; the sizing stops one byte
    past the longest tape the columns leave, and the geometry says what does not fit."""
    image = Image.from_words(SPEW, 16)
    needed = output_needed(image, b"", 10 ** 9, _no_long_sizing(200_000))
    assert needed == 65_527
    with pytest.raises(InputError, match=r"^8 memory words, an input tape of 0 bytes and an "
                                         r"output tape of 65,527 bytes need 65,537 columns, "
                                         r"more than the transformer's 65,536$"):
        VGeometry(image.size, image.bits, 0, needed)


@pytest.mark.parametrize("engine", [run_transformer, compare])
def test_a_time_limit_in_the_sizing_run_counts_no_step_of_the_run(engine) -> None:
    """The sizing run told `progress` the reference's steps, so a --max-seconds reached there
    said 'stopped by --max-seconds 2 after 4,096 compared steps' of a comparison that had
    compared none (`ltvm compare loop.dec --max-steps 100000000 --max-seconds 2`)."""
    from vm.machines.stepping import CLOCK_EVERY
    heard = []

    def progress(steps: int) -> None:
        heard.append(steps)
        if len(heard) == 2:
            raise TimeLimitExceeded(f"stopped by --max-seconds 1 after {steps:,} steps, before "
                                    f"the program halted")
    with pytest.raises(TimeLimitExceeded) as stopped:
        engine(Image.from_words([3, 3, 0], 8), 10 ** 9, progress=progress)
    assert heard == [0, 0]
    assert str(stopped.value) == (
        f"stopped by --max-seconds 1 after 0 steps, before the program halted (the reference "
        f"was sizing the output tape: {2 * CLOCK_EVERY:,} of 1,000,000,000 steps run; "
        f"--max-output BYTES skips that)")
