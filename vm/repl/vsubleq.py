"""`ltvm repl IMAGE.dec|.vsq`: step a standard SUBLEQ image on the transformer beside the
reference, watch pc, memory and output, and feed input while it runs.

Both tapes' lengths are in the weights, so feeding input (or an output tape that runs
full) rebuilds the transformer for longer tapes and loads the state it had reached
(`punchcard.encode_state`): the machine goes on from the same memory, pc, input pointer
and output, and reads the new bytes where end of input was. An input instruction that ran
before the bytes were fed read -1, on both engines alike.
"""

from __future__ import annotations

import copy
import re
import unicodedata

import torch

from vm.common.errors import InputError, PrecisionError, counted, shown_path
from vm.isa import VSUBLEQ
from vm.isa.vsubleq import engine_settings
from vm.machines.stepping import check_max_steps
from vm.machines.vsubleq.layout import MAX_COLUMNS
from vm.machines.vsubleq.punchcard import VState, encode_state
from vm.machines.vsubleq.reference import Image, Reference, Step
from vm.machines.vsubleq.run import TransformerRun
from vm.repl import check_max_seconds
from vm.repl.names import error_line, parse_int, shown_int
from vm.runtime.compare import check_exact
from vm.runtime.config import EngineConfig
from vm.tools.progress import Progress, TimeLimitExceeded

OUTPUT_SLACK = 64
"""Output columns added beyond what is written each time the tape grows."""
SHOWN_STEPS = 20
"""Steps of a `step K` listed one by one; the rest are only counted."""
COMMAND = re.compile(r"(\S*)\s?(.*)", re.DOTALL)
"""A command line: the command, one blank (a space or a tab), the argument."""
NO_ARGUMENT = frozenset({"continue", "c", "pc", "where", "output", "help", "quit", "q",
                         "exit"})
"""Commands that take no argument: one is refused, not ignored."""
HELP = """commands:
  step [K]       (s) run K steps (default 1, at most --max-steps) on both engines,
                 listing them; --max-seconds bounds its time
  continue       (c) run until the image halts, --max-steps more steps or --max-seconds
  input TEXT     feed TEXT's bytes (its spaces too) to the input stream: characters as
                 UTF-8, escapes \\n \\t \\r \\0 \\\\ \\' \\" \\a \\b \\f \\v, \\xHH and \\ooo one byte,
                 \\uXXXX \\UXXXXXXXX \\N{NAME} a character (as UTF-8)
  pc             (where) the pc and the instruction there
  print [A[:B]]  (p) memory words A..B-1, B above A (default: all words of the image)
  output         the bytes written so far, as UTF-8 text in the escapes `input` takes
                 (\\xHH for a byte that is not part of UTF-8 text)
  help, quit     (q, exit)"""


class TapeLimit(InputError):
    """The output tape ran full and a longer one would pass the column limit."""


class VsubleqRepl:
    """One image, its transformer and its reference in lockstep (the `interact` loop's
    `execute` / `completions` / `finished` protocol)."""

    def __init__(self, image: Image, path: str, config: EngineConfig = EngineConfig(),
                 max_steps: int = 1_000_000, max_seconds: float | None = None) -> None:
        if not isinstance(image, Image):  # None failed on `.memory`
            raise InputError(f"VsubleqRepl runs an Image (a .dec or .vsq), got "
                             f"{type(image).__name__}")
        check_exact(config, "the REPL")
        self.engine = engine_settings(config)  # None is refused
        # None raised a TypeError out of `continue`: a crash
        max_steps = check_max_steps(max_steps)
        self.max_seconds = check_max_seconds(max_seconds)
        self.image, self.path, self.max_steps = image, path, max_steps
        self.fed = b""
        self.reference = Reference(image)
        self.finished = False
        self.run = self._build(None, OUTPUT_SLACK, self.fed)

    def summary(self) -> str:
        return (f"loaded {shown_path(self.path)}: {self.image.length} words in "
                f"{self.image.size} cells, {self.image.bits}-bit words")

    def _build(self, state: VState | None, outputs: int, fed: bytes) -> TransformerRun:
        """A transformer for the input `fed` and `outputs` output bytes, in `state`."""
        run = TransformerRun(self.image, input_bytes=fed, max_output=outputs, **self.engine)
        if state is not None:
            run.load_card(torch.as_tensor(encode_state(self.image, run.geometry,
                                                       run.machine.layout, fed, state)[None],
                                          dtype=run.X.dtype, device=run.X.device))
        return run

    def execute(self, line: str) -> str:
        """Run one command line; InputErrors come back as the line to print. `input` feeds
        what follows its one separating blank as it is: stripped, 'input  a ' fed 'a'."""
        if not isinstance(line, str):  # None failed on `.rstrip`, out of the session
            return f"error: a command line is a string, got {type(line).__name__}"
        command, argument = COMMAND.fullmatch(line.rstrip("\r\n").lstrip()).groups()
        handler = {"step": self._step, "s": self._step, "continue": self._continue,
                   "c": self._continue, "input": self._input, "pc": self._pc,
                   "where": self._pc, "print": self._print, "p": self._print,
                   "output": self._output, "help": lambda _: HELP,
                   "quit": self._quit, "q": self._quit, "exit": self._quit}.get(command)
        if not command:
            return ""
        if handler is None:
            return error_line(f"error: unknown command '{command}' (help lists them)")
        if argument.strip() and command in NO_ARGUMENT:  # 'pc 5' meant 'print 5'
            return f"error: '{command}' takes no argument"
        try:
            return handler(argument if command == "input" else argument.strip())
        except InputError as error:
            return error_line(f"error: {error}")

    def completions(self, line: str) -> list[str]:
        words = ["step", "continue", "input", "pc", "where", "print", "output", "help", "quit"]
        return [word for word in words if word.startswith(line.strip())] if " " not in line \
            else []

    def _advance(self, limit: int, listed: int) -> str:
        """Step both engines up to `limit` times, listing the first `listed` steps; stops at
        the halt, a divergence, a precision error, --max-seconds or Ctrl-C. A step is
        computed on a copy of the reference and committed with the transformer's pass, so a
        Ctrl-C (the pass changes X in place) puts both engines back before the step it
        interrupted."""
        lines, written = [], len(self.reference.output)
        start = self.reference.steps
        progress = Progress("steps", limit if limit < self.max_steps else None,
                            max_seconds=self.max_seconds, unfinished="the image halted")
        state = self.run.state()  # each step's state is the next one's start: decoded once
        try:
            while self.reference.steps - start < limit and not self.reference.halted:
                before = state
                try:
                    record, state = self._step_both(before)
                except PrecisionError as error:  # the checked mode: X is off; keep `before`
                    self.run = self._build(before, len(before.output) + OUTPUT_SLACK,
                                           self.fed)
                    lines.append(f"error: {error}; both engines stay before this step")
                    break
                except KeyboardInterrupt:
                    self.run = self._build(before, self.run.geometry.outputs, self.fed)
                    done = self.reference.steps - start
                    lines.append(f"interrupted after {counted(done, 'step')}")
                    break
                except TapeLimit as error:  # the pass ran on X in place: take it back
                    self.run = self._build(before, self.run.geometry.outputs, self.fed)
                    lines.append(f"error: {error}; both engines stay before this step")
                    break
                if len(lines) < listed:
                    lines.append(VSUBLEQ.trace_line(self.image, record))
                difference = self._difference(state)
                if difference:
                    lines.append(f"DIVERGENCE after step {record.step}: {difference}")
                    break
                try:
                    progress(self.reference.steps - start)
                except TimeLimitExceeded as error:  # after a whole step on both engines
                    lines.append(str(error))
                    break
        finally:
            progress.done()
        skipped = self.reference.steps - start - min(listed, self.reference.steps - start)
        if skipped > 0:
            lines.append(f"... {counted(skipped, 'more step')}")
        new = bytes(self.reference.output[written:])
        if new:
            lines.append(f"output: {shown(new)}")
        lines.append(self._where())
        return "\n".join(lines)

    def _step_both(self, before: VState) -> tuple[Step, VState]:
        """One step on both engines from `before`; the reference's is committed last."""
        reference = copy.copy(self.reference)
        reference.memory, reference.output = list(reference.memory), bytearray(reference.output)
        self.run.advance(1)
        record = reference.step()
        state = self.run.state()
        if state.overflow:  # the tape ran full: grow it, redo the pass from `before`
            try:
                self.run = self._build(before, len(before.output) + OUTPUT_SLACK, self.fed)
            except InputError:
                raise TapeLimit(f"the output tape is full ({len(before.output):,} bytes) and "
                                f"cannot grow: the transformer holds at most "
                                f"{MAX_COLUMNS:,} columns") from None
            self.run.advance(1)
            state = self.run.state()
        self.reference = reference
        return record, state

    def _difference(self, state: VState) -> str | None:
        reference = self.reference
        for name, expected, got in (("memory", reference.memory, state.memory),
                                    ("pc", reference.pc, state.pc),
                                    ("halted", reference.halted, state.halted),
                                    ("bytes read", reference.read, state.read),
                                    ("output", bytes(reference.output), state.output)):
            if expected != got:
                return f"{name} differs between the reference and the transformer"
        return None

    def _step(self, argument: str) -> str:
        count = _count(argument) if argument else 1
        if count <= self.max_steps:
            return self._advance(count, SHOWN_STEPS)
        # step 10**20 on an image that never halts ran on past --max-steps until killed
        start = self.reference.steps
        report = self._advance(self.max_steps, SHOWN_STEPS)
        if not self.reference.halted and self.reference.steps - start == self.max_steps:
            report += (f"\nstopped after --max-steps ({self.max_steps:,}) steps; step asked "
                       f"for {shown_int(count, grouped=True)}")
        return report

    def _continue(self, argument: str) -> str:
        start = self.reference.steps
        report = self._advance(self.max_steps, 0)
        if not self.reference.halted and self.reference.steps - start == self.max_steps:
            report += (f"\nstopped after --max-steps ({self.max_steps:,}) steps without a "
                       "halt; continue goes on from here")
        return report

    def _input(self, argument: str) -> str:
        data = unescape(argument)
        if not data:
            raise InputError("nothing to feed: input TEXT")
        state = self.run.state()
        fed = self.fed + data
        run = self._build(state, max(self.run.geometry.outputs, len(state.output)), fed)
        self.run, self.fed = run, fed  # only now: a tape too long leaves the session as it was
        self.reference.input += data
        if self.reference.halted:
            return (f"fed {counted(len(data), 'byte')} ({len(self.fed)} in all), but the image "
                    "has halted")
        unread = len(self.fed) - self.reference.read
        return f"fed {counted(len(data), 'byte')} ({unread} not read yet)"

    def _where(self) -> str:
        memory, pc, size = self.reference.memory, self.reference.pc, self.image.size
        words = " ".join(str(memory[(pc + offset) % size]) for offset in range(3))
        ending = " (halted)" if self.reference.halted else ""
        return f"step {self.reference.steps}  pc {pc}: {words}{ending}"

    def _pc(self, argument: str) -> str:
        return self._where()

    def _print(self, argument: str) -> str:
        memory = self.run.state().memory
        low, high = 0, self.image.length
        if argument:
            first, colon, last = argument.partition(":")
            low = _address(first, self.image.size)
            high = _address(last, self.image.size + 1) if colon else low + 1
            if high <= low:
                raise InputError(f"empty range {low}:{high} (A:B lists words A..B-1, so B "
                                 "must be above A)")
        rows = (memory[address:min(address + 8, high)] for address in range(low, high, 8))
        return "\n".join(f"{low + 8 * index:>6}: {' '.join(str(word) for word in row)}"
                         for index, row in enumerate(rows))

    def _output(self, argument: str) -> str:
        output = self.run.state().output
        return f"output ({counted(len(output), 'byte')}): {shown(output)}"

    def _quit(self, argument: str) -> str:
        self.finished = True
        return ""


DECIMAL = re.compile(r"[+-]?[0-9]+")
"""An integer as this REPL reads one: decimal, in ASCII digits, with an optional sign."""


def _decimal(text: str) -> int:
    """A decimal integer in ASCII digits, else ValueError (int() took other scripts'
    digits, 'step ٣' ran 3 steps, and underscores, 'step 1_0' ran 10, where the .sq REPL
    and the assembler refuse them)."""
    if not DECIMAL.fullmatch(text):
        raise ValueError(text)
    return parse_int(text)


def _count(text: str) -> int:
    try:
        value = _decimal(text)
    except ValueError:
        raise InputError(f"expected a number of steps, got '{text}'") from None
    if value < 1:
        raise InputError(f"the number of steps must be positive, got {shown_int(value)}")
    return value


def _address(text: str, limit: int) -> int:
    try:
        value = _decimal(text)
    except ValueError:
        raise InputError(f"expected an address, got '{text}'") from None
    if not 0 <= value < limit:
        raise InputError(f"address {shown_int(value)} is outside 0..{limit - 1}")
    return value


SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a",
                  "b": "\b", "f": "\f", "v": "\v"}
"""Escapes that stand for one character, as in Python strings."""
CHARACTER_ESCAPES = {"u": 4, "U": 8}
"""Escapes followed by a fixed number of hex digits naming a character."""


def unescape(text: str) -> bytes:
    """The bytes `input TEXT` feeds: characters as UTF-8 (as `ltvm run --input` does),
    \\xHH and \\ooo as one byte each; a malformed escape is an InputError naming it."""
    data, index = bytearray(), 0
    while index < len(text):
        character = text[index]
        index += 1
        if character != "\\":
            try:  # a byte the terminal could not decode came in as a lone surrogate
                data += character.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                raise InputError(f"{character!r} is not a character UTF-8 can encode") from None
            continue
        if index == len(text):
            raise InputError("a lone '\\' ends the text (write \\\\ for a backslash)")
        kind, start = text[index], index - 1
        index += 1
        if kind in SIMPLE_ESCAPES:
            data += SIMPLE_ESCAPES[kind].encode()
        elif kind == "x":
            data.append(_hex(text, index, 2, start))
            index += 2
        elif kind in "01234567":
            end = index
            while end < min(len(text), index + 2) and text[end] in "01234567":
                end += 1
            value = int(text[index - 1:end], 8)
            if value > 0xFF:
                raise InputError(f"'\\{text[index - 1:end]}' is {value}, more than one byte "
                                 "(octal escapes go up to \\377)")
            data.append(value)
            index = end
        elif kind in CHARACTER_ESCAPES:
            digits = CHARACTER_ESCAPES[kind]
            code = _hex(text, index, digits, start)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise InputError(f"'{text[start:index + digits]}' is not a Unicode character")
            data += chr(code).encode("utf-8")
            index += digits
        elif kind == "N":
            end = text.find("}", index)
            if not text.startswith("{", index) or end < 0:
                raise InputError("'\\N' needs a character name in braces, like \\N{EURO SIGN}")
            try:
                data += unicodedata.lookup(text[index + 1:end]).encode("utf-8")
            except KeyError:
                raise InputError(f"unknown character name in '{text[start:end + 1]}'") from None
            index = end + 1
        else:
            raise InputError(f"unknown escape '\\{kind}' (help lists the escapes)")
    return bytes(data)


def _hex(text: str, index: int, digits: int, start: int) -> int:
    """The `digits` hex digits at `index` of an escape that begins at `start`."""
    field = text[index:index + digits]
    if len(field) != digits or any(c not in "0123456789abcdefABCDEF" for c in field):
        raise InputError(f"'{text[start:index + digits]}' needs {digits} hex digits after "
                         f"'{text[start:index]}'")
    return int(field, 16)


def shown(data: bytes) -> str:
    """Output bytes as quoted UTF-8 text in the escapes `input` takes, so what was fed in
    reads back the same way; a byte that is not part of UTF-8 text shows as \\xHH."""
    text = data.decode("utf-8", "surrogateescape")
    parts = []
    for character in text:
        if "\udc80" <= character <= "\udcff":
            parts.append(f"\\x{ord(character) - 0xDC00:02x}")
        elif character in "\\'":
            parts.append("\\" + character)
        elif character.isprintable():
            parts.append(character)
        else:
            parts.append(repr(character)[1:-1])
    return "'" + "".join(parts) + "'"
