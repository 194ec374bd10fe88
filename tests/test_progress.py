"""Progress lines (vm/tools/progress.py, through tqdm): shown only for long work, with the
time left, and a wall-time limit that stops a run with a clear message."""

from __future__ import annotations

import errno
import io
import os
import re
import time
from pathlib import Path

import pytest

from vm.cli import main
from vm.common.errors import RunFailure
from vm.tools.progress import Progress, TimeLimitExceeded


def test_nothing_is_printed_for_short_work():
    stream = io.StringIO()
    progress = Progress("steps", 100, stream=stream)
    for count in range(100):
        progress(count)
    progress.done()
    assert stream.getvalue() == ""


def _last_line_after_1000_of(total: int) -> str:
    """The progress line shown after 1000 of `total` steps."""
    stream = io.StringIO()
    progress = Progress("steps", total, stream=stream, delay=0.0)
    progress(0)
    time.sleep(0.01)
    progress(1000)
    progress.done()
    return stream.getvalue().strip().split("\r")[-1]


def test_long_work_prints_the_count_the_total_and_the_rate():
    last = _last_line_after_1000_of(1_000_000)
    assert re.match(r"steps: +0%\|.*\| 1000/1000000 \[00:00<[\d:]+, [\d.]+/s\]$", last), last


def test_a_total_beyond_a_float_shows_the_count_alone():
    last = _last_line_after_1000_of(10 ** 400)
    assert re.match(r"steps: 1000 \[00:00, [\d.]+/s\]$", last), last


def test_a_stream_that_cannot_be_written_ends_the_line_not_the_work():
    """On a full disk (`ltvm run p.sq 2>/dev/full`) the first progress report raised
    OSError and the run stopped with no result."""
    class FullDisk(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    progress = Progress("steps", 10 ** 6, stream=FullDisk(), delay=0.0)
    for count in range(0, 5000, 1000):
        progress(count)
    progress.done()
    assert progress.bar is None


def test_a_call_past_the_limit_stops_the_work():
    progress = Progress("steps", 10, stream=io.StringIO(), max_seconds=0.01)
    progress(1)
    time.sleep(0.02)
    with pytest.raises(TimeLimitExceeded, match="--max-seconds 0.01 after 2 steps"):
        progress(2)


@pytest.mark.parametrize("label, said", [("steps", "1 step,"), ("passes", "1 pass,"),
                                          ("lines assembled", "1 line assembled,")])
def test_a_limit_after_one_counts_one_in_the_singular(label, said):
    """--max-seconds 1e-300 said 'stopped ... after 1 steps'."""
    progress = Progress(label, 10, stream=io.StringIO(), max_seconds=1e-300)
    with pytest.raises(TimeLimitExceeded, match=f"after {said} before"):
        progress(1)


def test_the_limit_can_count_from_an_earlier_start():
    progress = Progress("layers", 10, stream=io.StringIO(), max_seconds=5,
                        since=time.monotonic() - 6)
    with pytest.raises(TimeLimitExceeded, match="--max-seconds 5 after 0 layers"):
        progress(0)


def test_run_and_compare_obey_max_seconds(capsys, tmp_path):
    source = tmp_path / "loop.sq"
    source.write_text(".data\nx: 1\n.code\ntop: subleq x, x, top\n")
    for command in ("run", "compare"):
        started = time.monotonic()
        code = main([command, str(source), "--max-steps", "100000000", "--max-seconds", "1"])
        assert code == 1 and time.monotonic() - started < 60
        assert "stopped by --max-seconds 1 after" in capsys.readouterr().err


@pytest.mark.parametrize("stop, message", [
    (KeyboardInterrupt, "ltvm: interrupted"),
    (RunFailure("the engine failed"), "ltvm: error: the engine failed"),
], ids=["ctrl-c", "error"])
def test_a_command_stopped_part_way_ends_its_progress_line_before_its_message(
        capsys, monkeypatch, tmp_path, stop, message):
    """A run stopped by Ctrl-C or an error left its progress line half-drawn, and the
    message was printed on the end of it: `...[00:05<15:20, 108046/s]ltvm: interrupted`."""
    from vm.cli import run

    class StoppedAfterItsLineIsDrawn(Progress):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **{**kwargs, "delay": 0.0})

        def __call__(self, count: int) -> None:
            if self.bar is not None:
                raise stop
            super().__call__(count)

    monkeypatch.setattr(run, "Progress", StoppedAfterItsLineIsDrawn)
    source = tmp_path / "loop.sq"
    source.write_text(".data\nx: 1\n.code\ntop: subleq x, x, top\n")
    code = main(["run", str(source), "--engine", "reference", "--max-steps", "100000000"])
    err = capsys.readouterr().err
    assert code == (130 if stop is KeyboardInterrupt else 1)
    lines = err.split("\n")
    assert len(lines) == 3 and "steps" in lines[0] and lines[1:] == [message, ""], repr(err)


def test_a_long_assembly_shows_the_lines_assembled(capsys, monkeypatch):
    """Every command that loads a program shows the lines parsed, routine expansions
    included: a FLEQ call of chunked_attention over 128 chunks parsed 37,000 generated lines
    for 10 s without a word (shown here from the first line on)."""
    import vm.tools.progress

    class Immediate(Progress):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **{**kwargs, "delay": 0.0})

    monkeypatch.setattr(vm.tools.progress, "Progress", Immediate)
    program = Path(__file__).resolve().parents[1] / "programs/fleq/chunked_attention.fleq"
    assert main(["asm", str(program)]) == 0
    err = capsys.readouterr().err
    counts = [int(count) for count in re.findall(r"lines assembled: (\d+)", err)]
    assert counts and counts[-1] > len(program.read_text().splitlines()) + 181  # its expansion
    assert err.endswith("\n")
