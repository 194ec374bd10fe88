"""The `ltvm` command line: one module per subcommand, each with `register`."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import pkgutil
import signal
import sys
import threading
import warnings
from contextlib import contextmanager
from typing import Iterator

from vm import __version__
from assembler.diagnostics import shown_in_source
from vm.common.errors import LtvmError, NotCompiledWarning, escaped, shown_path
from vm.common.signals import raise_dropped_stop, stops_dropped_noticed

COMMAND_ORDER: list[str] = [
    "demo",
    "asm",
    "run",
    "compare",
    "inspect",
    "export",
    "bench",
    "compile",
    "attention",
    "calc",
    "repl",
    "trace",
]
"""How `ltvm --help` lists the commands; modules not named here follow, sorted."""


def command_modules() -> list[str]:
    """Every module of this package that defines `register` (a new command is one module)."""
    names = [info.name for info in pkgutil.iter_modules(__path__)
             if info.name not in ("__main__", "common")]
    known = [name for name in COMMAND_ORDER if name in names]
    return known + sorted(set(names) - set(known))


def _as_typed(value: object, nargs: int | str | None) -> str:
    """An option's converted value written as a user types it: 5.0 as 5, the list a
    comma-separated type made as 64,128, the words of an option of several (nargs) apart."""
    if isinstance(value, (list, tuple)):
        separator = "," if nargs is None else " "
        return separator.join(_as_typed(item, None) for item in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


class _StoreOnce(argparse.Action):
    """argparse's plain store, refusing an option given twice: argparse kept the last value in
    silence, so `ltvm asm p.sq --bits 8 --bits 16` assembled 16-bit words."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if self.option_strings and self.dest in parser.options_given:
            first = getattr(namespace, self.dest)
            raise argparse.ArgumentError(
                self, f"given twice ({_as_typed(first, self.nargs):.60} and "
                      f"{_as_typed(values, self.nargs):.60}); give it once")
        parser.options_given.add(self.dest)
        setattr(namespace, self.dest, values)


SHOWN_ERROR = 1_000
"""Most characters of an error the command line prints: a 4,000-digit --scratch came back
as a 10 KB line, all of it digits."""


def shown_error(message: str) -> str:
    """`message` as printed: control characters escaped (newlines of a located error's
    line and caret kept), and cut to SHOWN_ERROR characters."""
    message = escaped(message, keep="\n")
    if len(message) <= SHOWN_ERROR:
        return message
    return f"{message[:SHOWN_ERROR]}... ({len(message):,} characters)"


class _Parser(argparse.ArgumentParser):
    """The parser of `ltvm` and its commands (subparsers take the same class): options that
    store a value take it once."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)
        self.options_given: set[str] = set()

    def error(self, message: str):
        """argparse's error, the words from the command line escaped: 'unrecognized
        arguments' echoed an ESC [31m typed or pasted there, and recoloured the terminal."""
        super().error(shown_error(escaped(message)))  # a newline too: one line

    def parse_known_args(self, args=None, namespace=None):
        self.options_given = set()  # a parser may parse more than one command line
        return super().parse_known_args(args, namespace)

    def parse_args(self, args=None, namespace=None):
        """argparse's, but the command refuses words it does not take, with its own usage:
        `ltvm run --bogus` showed ltvm's 'usage: ltvm [-h] [--version] COMMAND ...'."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._chosen(parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def _chosen(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The innermost command `parsed` chose (`bench rope`'s parser), else this one."""
        parser = self
        while True:
            choices = [action for action in parser._actions
                       if isinstance(action, argparse._SubParsersAction)]
            name = getattr(parsed, choices[0].dest, None) if choices else None
            if name not in (choices[0].choices if choices else {}):
                return parser
            parser = choices[0].choices[name]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ltvm",
        description="Looped-transformer virtual machine: assemble SUBLEQ/FLEQ programs into "
        "punchcards, run them on a transformer with hardcoded weights, and check them "
        "against the reference interpreter.",
    )
    parser.add_argument("--version", action="version", version=f"ltvm {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in command_modules():
        module = importlib.import_module(f"vm.cli.{name}")
        if hasattr(module, "register"):
            module.register(commands)
    return parser


OUT_OF_MEMORY_ADVICE = ("run a smaller program, fewer programs at once (--batch, where the "
                        "command has it) or less data")


def _out_of_memory(error: RuntimeError) -> bool:
    """Did torch's allocator run out (a GPU's OutOfMemoryError, or the CPU allocator's
    error)? `TransformerExecutor.check_memory` refuses most such runs before they start;
    this catches what its estimate leaves out. torch is looked up, not imported: a command
    that never imported it cannot have raised its errors."""
    torch = sys.modules.get("torch")
    return ((torch is not None and isinstance(error, torch.OutOfMemoryError))
            or "DefaultCPUAllocator: can't allocate memory" in str(error))


class _NamedOutput:
    """Standard output whose write errors name it: `ltvm run p.sq > /dev/full` said only
    "No space left on device", as if a file of the command's had failed. A standard output
    the caller closed (`ltvm asm p.sq >&-`, None in Python) fails its first write the same
    way, where it was an AttributeError traceback."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        with self._named():
            return self._open().write(text)

    def flush(self) -> None:
        with self._named():
            self._open().flush()

    def _open(self):
        if self._stream is None:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return self._stream

    @staticmethod
    @contextmanager
    def _named() -> Iterator[None]:
        try:
            yield
        except OSError as error:
            error.filename = error.filename or "standard output"
            raise

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _end_progress_lines() -> None:
    """End the progress lines a command left drawn, before its error or `ltvm: interrupted`
    is printed. The module is looked up, not imported: a command that never imported it
    (tqdm) drew no line."""
    progress = sys.modules.get("vm.tools.progress")
    if progress is not None:
        progress.end_progress_lines()


STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals that end a command as Ctrl-C does: `kill`, `timeout`, and a terminal that closed
(an ssh connection that dropped) sends SIGHUP."""


class Terminated(BaseException):
    """A stopping signal, raised where the command is, as Ctrl-C raises KeyboardInterrupt,
    so that its cleanup runs: `timeout 2 ltvm trace P --gif out.gif` was killed outright and
    left the hidden temporary file beside out.gif. Not a KeyboardInterrupt, which the REPL
    takes as 'end this command' and goes on."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _terminate_cleanly() -> Iterator[None]:
    """Each stopping signal raises Terminated while the command runs, every time, as Ctrl-C
    does: one raised while a `__del__` runs is dropped by Python (it is noted, and ends the
    command when the command returns), and ignoring the next ones left a command that no
    SIGTERM could stop. Only the main thread can set a handler (a command run from another
    thread keeps the default), and a signal its parent chose to ignore (`nohup` ignores
    SIGHUP) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame) -> None:
        raise Terminated(signum)

    previous = {number: signal.signal(number, terminate) for number in STOPPING_SIGNALS
                if signal.getsignal(number) is not signal.SIG_IGN}
    try:
        with stops_dropped_noticed((KeyboardInterrupt, Terminated)):
            yield
    finally:
        for number, handler in previous.items():  # None: set outside Python
            signal.signal(number, handler or signal.SIG_DFL)


def _stand_in_for_closed_input_and_errors() -> None:
    """A standard input or error the caller closed (`ltvm repl <&-`, `ltvm run p.sq 2>&-`)
    is None in Python, and its first use was an AttributeError traceback (the progress line
    asks its stream whether it is a terminal): they read and write /dev/null instead, empty
    and discarded, as closing them means."""
    if sys.stdin is None:
        sys.stdin = open(os.devnull, encoding="utf-8")
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    _stand_in_for_closed_input_and_errors()
    stdout, sys.stdout = sys.stdout, _NamedOutput(sys.stdout)
    try:
        with _terminate_cleanly():
            return _run(argv)
    finally:
        sys.stdout = stdout


def _run(argv: list[str] | None) -> int:
    """The command, its errors as one `ltvm: error:` line and an exit code. The command
    line is parsed here too: building the parser imports every command's module (a third
    of a second), and Ctrl-C then ended in a traceback."""
    try:
        args = build_parser().parse_args(argv)
        try:
            with _notes_after_the_command(getattr(args, "notes_at_once", False)) as notes:
                code = args.func(args) or 0
        finally:
            _end_progress_lines()
            for note in notes:
                _say(f"ltvm: note: {note}")
        raise_dropped_stop()  # one that landed in a __del__, which Python dropped
        return code
    except LtvmError as raised:
        error = shown_in_source(raised)  # escaped: a --set or --param value held an ESC
        message = shown_error(str(error))
        _say(message if error.located else f"ltvm: error: {message}")
        return error.exit_code
    except KeyboardInterrupt:
        _end_at_the_next_stop(argv)
        _say("ltvm: interrupted")
        return 128 + signal.SIGINT
    except Terminated as stopped:
        _end_at_the_next_stop(argv)
        _say(f"ltvm: terminated ({signal.Signals(stopped.signum).name})")
        return 128 + stopped.signum
    except BrokenPipeError:
        return 0
    except MemoryError:
        _say(f"ltvm: error: out of memory: {OUT_OF_MEMORY_ADVICE}")
        return 2
    except RuntimeError as error:
        if not _out_of_memory(error):
            raise
        _say(f"ltvm: error: out of memory ({str(error).splitlines()[0][:160]}): "
             f"{OUT_OF_MEMORY_ADVICE}")
        return 2
    except OSError as error:
        # A path the user named that cannot be read or written (permissions, a file where
        # a directory should be, a full disk): what went wrong and where, exit 2.
        where = f": {shown_path(error.filename)}" if error.filename else ""
        _say(f"ltvm: error: {error.strerror or error}{where}")
        return 2


@contextmanager
def _notes_after_the_command(at_once: bool = False) -> Iterator[list[str]]:
    """The command's NotCompiledWarning messages, each once, to be printed after it (not
    inside its progress line), or `at_once` when first warned (an interactive session,
    whose end may be hours after the slow steps the note explains); other warnings are
    shown as Python shows them."""
    notes: list[str] = []
    said: set[str] = set()
    show = warnings.showwarning

    def collect(message, category, filename, lineno, file=None, line=None) -> None:
        if not issubclass(category, NotCompiledWarning):
            show(message, category, filename, lineno, file, line)
        elif str(message) not in said:
            said.add(str(message))
            if at_once:
                _say_above_progress_lines(f"ltvm: note: {message}")
            else:
                notes.append(str(message))
    warnings.showwarning = collect
    try:
        yield notes
    finally:
        warnings.showwarning = show


def _end_at_the_next_stop(argv: list[str] | None) -> None:
    """Once a stop has ended the process's own command (`argv` None: not a caller's), a
    further Ctrl-C or SIGTERM ends the exiting process at once, silently, with that signal's
    status (130, 143): a second Ctrl-C raised a KeyboardInterrupt traceback out of main or
    the interpreter's shutdown (torch's atexit callbacks), after 'ltvm: interrupted'. A
    caller's process is left its handlers; a signal ignored (`nohup`) stays ignored."""
    if argv is not None or threading.current_thread() is not threading.main_thread():
        return
    for number in (signal.SIGINT, *STOPPING_SIGNALS):
        if callable(signal.getsignal(number)):
            signal.signal(number, signal.SIG_DFL)


def _say_above_progress_lines(message: str) -> None:
    """`message` on stderr while a progress line may be drawn: tqdm clears the line, prints
    and draws it again (without tqdm loaded, no line is drawn)."""
    tqdm = sys.modules.get("tqdm")
    if tqdm is None:
        _say(message)
        return
    try:
        tqdm.tqdm.write(message, file=sys.stderr)
    except OSError:
        pass


def _say(message: str) -> None:
    """`message` on stderr, if stderr can take it: on a full disk (`2>/dev/full`) the
    failed print was a second error, and the exit code became 1 whatever had happened."""
    try:
        print(message, file=sys.stderr, flush=True)
    except OSError:
        pass
