"""The REPL at a terminal: line editing, history and tab completion through readline.

Why GNU readline (the standard library's `readline`) and not prompt_toolkit:
it adds no dependency; it gives the editing keys, Ctrl-R history search and
completion users already know from bash and gdb, configured by their own
~/.inputrc; and it writes nothing but the prompt and the echoed line, so a
session through a pseudo-terminal (pexpect, `script`, tmux logs) reads as
plain text, where prompt_toolkit redraws the line and queries the cursor
position. Where Python was built without readline, or stdin is not a
terminal (a pipe, a file), the loop reads plain lines and prints no prompt.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import TextIO

from vm.common.outputs import atomic_path, refused_creation, refused_directory
from vm.common.errors import InputError, shown_path
from vm.common.signals import raise_dropped_stop
from vm.isa import INSTRUCTION_SETS
from vm.repl.session import Repl

try:
    import readline
except ImportError:  # Python built without readline: plain input() still works
    readline = None

PROMPT = "(ltvm) "
HISTORY_LENGTH = 1000
HISTORY_MODE = 0o600
"""The mode of a new history file, as readline creates it: only its owner reads it."""
SOURCE_SUFFIXES = {suffix for isa in INSTRUCTION_SETS for suffix in isa.suffixes}
"""What a program's file name ends in: never a history."""
WORD_DELIMITERS = " \t,"
"""Completion replaces the text after the last space or comma: `xs+1` and paths stay whole."""


def interact(repl: Repl, history: Path | None = None, stdin: TextIO | None = None,
             stdout: TextIO | None = None) -> int:
    """Read lines until `quit` or EOF (Ctrl-D), printing what each command returns.

    Ctrl-C at the prompt discards the line; during a command it ends that command.
    """
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    for stream in (stdin, stdout):
        _pass_undecodable_bytes(stream)
    terminal = stdin is sys.stdin and stdin.isatty()
    editing = terminal and readline is not None
    if editing:
        history = _usable(history)
        _start_readline(repl, history)
    try:
        while not repl.finished:
            try:
                line = input(PROMPT) if terminal else stdin.readline()
            except EOFError:
                stdout.write("\n")
                break
            except KeyboardInterrupt:
                stdout.write("\n")
                continue
            if not terminal and not line:
                break
            try:
                output = repl.execute(line)
                raise_dropped_stop()  # one Python dropped in a __del__: not at the session's end
            except KeyboardInterrupt:
                output = "interrupted"
            if output:
                stdout.write(output + "\n")
                stdout.flush()
    finally:
        if editing and history is not None:
            _save_history(history)
    return 0


def _pass_undecodable_bytes(stream: TextIO) -> None:
    """Read and echo bytes that are not UTF-8 as lone surrogates (as `input TEXT` and the
    error lines take them) instead of failing: in a strict UTF-8 locale a 0xff piped in
    ended the session with a UnicodeDecodeError traceback."""
    reconfigure = getattr(stream, "reconfigure", None)  # a file's (io.StringIO has none)
    if callable(reconfigure):
        reconfigure(errors="surrogateescape")


def _usable(history: Path | None) -> Path | None:
    """`history`, or None (with a line on stderr) when it is not a regular file that is or
    can be there, or its directory takes no new file (where the history is written, then
    renamed): readline opens it, and a named pipe held the REPL before its first prompt,
    waiting for a writer that never came; an unwritable place was only reported as the
    session ended, after all it had typed."""
    if history is None:
        return None
    if os.path.lexists(history) and not history.is_file():
        problem = "is not a regular file"
    elif not_history := _not_a_history(history):
        problem = not_history
    elif refusal := refused_directory(history.parent):
        problem = f"cannot be written: {refusal}"
    elif refusal := refused_creation(history.parent):
        problem = f"cannot be written in {shown_path(history.parent)}: {refusal}"
    else:
        problem = ""
    if not problem:
        return history
    print(f"ltvm: history {shown_path(history)} {problem}; the history is not kept",
          file=sys.stderr)
    return None


HISTORY_PEEK = 1 << 16
"""Bytes of an existing --history read to see whether it holds a history."""


def _not_a_history(history: Path) -> str:
    """Why `history` holds something else than a history, or '': the history is written over
    it as the session ends, and `ltvm repl --history prog.sq` (PROG meant) cut the program
    to its last HISTORY_LENGTH lines and added the commands typed after them."""
    if history.suffix and history.suffix in SOURCE_SUFFIXES:
        return f"names a program ({history.suffix}), not a history"
    try:
        with open(history, "rb") as stream:
            binary = b"\0" in stream.read(HISTORY_PEEK)
    except OSError:  # none yet, or unreadable: readline and the write say what went wrong
        return ""
    return "holds binary data (a NUL byte), not a history" if binary else ""


def _start_readline(repl: Repl, history: Path | None) -> None:
    if history is not None and history.exists():
        try:
            readline.read_history_file(history)
        except OSError as error:
            print(f"ltvm: cannot read history {shown_path(history)}: {error.strerror}",
                  file=sys.stderr)
    readline.set_history_length(HISTORY_LENGTH)
    readline.set_completer_delims(WORD_DELIMITERS)
    readline.set_completer(_completer(repl))
    if "libedit" in (readline.__doc__ or ""):
        readline.parse_and_bind("bind ^I rl_complete")
    else:
        readline.parse_and_bind("tab: complete")


def _completer(repl: Repl):
    """readline's completer protocol: called with state 0, 1, ... until it returns None."""
    matches: list[str] = []

    def complete(text: str, state: int) -> str | None:
        if state == 0:
            line = readline.get_line_buffer()[:readline.get_endidx()]
            matches[:] = [match if match.endswith("/") else match + " "
                          for match in repl.completions(line)]
        return matches[state] if state < len(matches) else None

    return complete


def _save_history(history: Path) -> None:
    """Write the history to a temporary file renamed onto `history`: written in place, a
    crash or a full disk part-way left the user's history cut short. The file keeps its
    mode, or readline's 0600 when it is new (a history may hold what was typed in secret)."""
    mode = stat.S_IMODE(history.stat().st_mode) if history.is_file() else HISTORY_MODE
    try:
        with atomic_path(history) as path:
            readline.write_history_file(path)
            if path != history:  # a temporary file, not a device written in place
                os.chmod(path, mode)
    except InputError as error:
        print(f"ltvm: {error}; the history is not kept", file=sys.stderr)
    except OSError as error:
        print(f"ltvm: cannot write history {shown_path(history)}: {error.strerror}",
              file=sys.stderr)
