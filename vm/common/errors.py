"""Error types shared by the assembler, the machines and the CLI.

The CLI maps them to exit codes: 2 for bad input, 1 for a run that failed.
"""

from __future__ import annotations

import os


def escaped(text: str, keep: str = "") -> str:
    """`text` with every unprintable character not in `keep` written as its Python escape
    (ESC as \\x1b), so that no text from a user's file name, option or source can drive the
    terminal it is printed on."""
    return "".join(c if c.isprintable() or c in keep else ascii(c)[1:-1] for c in text)


def shown_path(path: str | bytes | os.PathLike | object) -> str:
    """`path` as every message names it: as it is when each character prints, else quoted
    with its unprintable characters escaped (a file named with ESC [31m turned the terminal
    red, one with a newline forged a line of the message). Anything else that names a
    source (a program built in Python with source=None) is shown by str(), not refused:
    a message must not fail while it names where a problem is. An empty path (an unset
    shell variable) is shown as '', not as nothing ("cannot read : No such file")."""
    text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    return text if text and text.isprintable() else f"'{escaped(text)}'"


def counted(number: int, noun: str) -> str:
    """'1 step', '0 steps', '4096 steps': a count and its noun as a message says them
    ('stopped after 1 steps')."""
    return f"{number} {noun}" + ("" if number == 1 else "s")


class LtvmError(Exception):
    """Base of every error the tool reports to a user as one clear message."""

    exit_code = 1
    located = False
    """True when the message already starts with its own `file:line:col:` location."""


class InputError(LtvmError):
    """Bad input: a source file, a data file, an option or a geometry."""

    exit_code = 2


class PlacedInputError(InputError):
    """Bad input found after assembly at a place in a source file (a counter beyond what
    the run's dtype counts): `file:line:col: message`, which the CLI shows with the line
    and a caret when it can read the file again (assembler/diagnostics.py `shown_in_source`)."""

    def __init__(self, message: str, file: str, line: int, column: int) -> None:
        self.message, self.file, self.line, self.column = message, file, line, column
        super().__init__(f"{shown_path(file)}:{line}:{column}: {message}")


class RunFailure(LtvmError):
    """A run that did not succeed: divergence, precision loss, step limit."""

    exit_code = 1


class StepLimitExceeded(RunFailure):
    """The program did not reach its EOF instruction within the step limit."""


class DivergenceError(RunFailure):
    """The transformer and the reference interpreter disagree."""


class PrecisionError(RunFailure):
    """A ±1 field left its tolerance band: temperature or dtype is not enough.

    Raised by the checked mode instead of returning a plausible wrong number.
    """

    def __init__(self, step: int, layer: int, column: int, field: str, value: float,
                 expected: str, program: int | None = None) -> None:
        self.step, self.layer, self.column, self.field = step, layer, column, field
        self.value, self.program = value, program
        where = "" if program is None else f" (program {program} of the batch)"
        super().__init__(
            f"precision error at step {step}, layer {layer}, column {column}, "
            f"field '{field}'{where}: value {value:.6g} is not {expected}; "
            "raise the temperature or use float64"
        )


class MagnitudeError(RunFailure):
    """A real on the transformer left the machine's magnitude domain (or became NaN/inf).

    Past it the 2^60 offsets that isolate blocks no longer hold, so every later number
    would carry no bound; the checked mode stops the run instead.
    """

    def __init__(self, step: int, column: int, field: str, value: float, limit: str,
                 program: int | None = None) -> None:
        self.step, self.column, self.field, self.value = step, column, field, value
        self.program = program
        where = "" if program is None else f" (program {program} of the batch)"
        super().__init__(
            f"magnitude error at step {step}, column {column}, field '{field}'{where}: "
            f"value {value:.6g} is outside the machine's domain ({limit}); the blocks' "
            "error bounds no longer hold, so the run stops here"
        )


class InexactMovesError(PrecisionError):
    """The temperature is too low for the FLEQ machine to move reals bit-exactly.

    Pointer reads can still be clean ±1 codes at such temperatures, so the checked mode's
    field checks would pass while every moved real carries softmax leakage.
    """

    def __init__(self, temperature: float, dtype: str, needed: float) -> None:
        self.step, self.layer, self.column, self.field = 0, 0, 0, "mem"
        self.value, self.program = temperature, None
        RunFailure.__init__(
            self, f"precision error at step 0: at temperature {temperature:g} the FLEQ "
            f"machine's data moves are not exact in {dtype} (off-match softmax weights "
            f"underflow to 0 only for temperature >= {needed:g}), so moved reals would carry "
            "leakage no check can see; raise the temperature (default 800)")


class NotCompiledWarning(UserWarning):
    """A run with the default evaluation went on without the fused pass because numba has
    not compiled it on this machine yet: the default does not make a run wait up to a
    minute for a compile. The command line prints it as a note after the command."""


NOT_COMPILED = ("numba has not compiled the fused pass on this machine yet, so runs went on "
                "without it (the torch active pass or the full one: the same bits, slower); "
                "`ltvm compile` compiles it once (about four minutes), or --evaluation fused "
                "compiles what a run needs on first use")
"""What a NotCompiledWarning says."""
