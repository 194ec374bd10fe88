"""The REPL's commands: a debugger that steps the transformer and the reference together.

`Repl.execute(line)` runs one line and returns the text to show. Nothing
typed raises out of it: errors come back as one `error: ...` line (an error in
a source file as `file:line:col: error: ...`, its line and a caret, as `ltvm run`
prints it) and the session goes on. The terminal loop (`vm/repl/terminal.py`) and the tests drive
exactly this method. Ctrl-C during `run`, `continue` or a long `step` ends
that command at a whole step and returns to the prompt.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, TextIO

from assembler.diagnostics import read_source, shown_in_source
from vm.common.errors import InputError, LtvmError, counted, shown_path
from vm.isa import for_path
from vm.machines.stepping import check_max_steps
from vm.repl import DEFAULT_MAX_STEPS, DEFAULT_PICTURE_DIR, check_max_seconds
from vm.repl.assemble import MNEMONICS, is_instruction
from vm.repl.dialects import DIALECTS, FLEQ_INSTRUCTION, ReplDialect
from vm.repl.fleq import FleqLockstep, same_value
from vm.repl.names import (Location, error_line, instruction_place, listing, location_line,
                           parse_int, resolve_instruction, shortened, shown_int)
from vm.repl.state import ENGINES, LockstepMachine
from vm.runtime.compare import check_exact
from vm.runtime.config import EngineConfig
from vm.tools.progress import Progress, TimeLimitExceeded
from vm.transformer.layers import trace_pass

HELP_WIDTH = 78
MAX_ROLES_LISTED = 8
"""`info` names the heads of a layer with at most this many; beyond, it counts them."""
MAX_APART_SHOWN = 8
"""Variables `engine` lists that still differ after a resynchronization; beyond, it counts."""


@dataclass(frozen=True)
class Command:
    usage: str
    summary: str
    details: str = ""


COMMANDS: dict[str, Command] = {
    "load": Command("load FILE", "assemble FILE (.sq or .fleq), stand at its first instruction",
                    "Breakpoints and watches are cleared; the engine choice is kept."),
    "step": Command("step [K]", "execute K instructions (default 1) on both engines",
                    "Stops early at EOF, at a breakpoint (not the one it starts on), when a "
                    "watched value changes, when the engines start to disagree, or after "
                    "--max-steps steps."),
    "run": Command("run", "restart from the initial state and run to a breakpoint or EOF",
                   "Like gdb's run: memory edits are discarded, breakpoints and watches are "
                   "kept. Stops as `step` does; Ctrl-C stops it at a whole step."),
    "continue": Command("continue", "run on from the current state to a breakpoint or EOF",
                        "Stops as `step` does; Ctrl-C stops it at a whole step."),
    "break": Command("break [LABEL|ADDR]", "stop before the instruction at a label or index",
                     "Without an argument, list the breakpoints and watches. ADDR is an "
                     "instruction index as `list` shows it; EOF is a label too."),
    "delete": Command("delete [N]", "remove breakpoint or watch N (all of them without N)"),
    "watch": Command("watch NAME", "stop when the value of NAME changes",
                     "NAME is a cell, an array, NAME+K, NAME[K] or a memory address (FLEQ: a "
                     "variable, an entry NAME[I] or NAME[ROW, COLUMN], or cellK). Without an argument, list the breakpoints and "
                     "watches."),
    "print": Command("print [NAME|ADDR]", "the value of a cell, array (as a list) or address",
                     "Without an argument, every named cell. Values are the active engine's. "
                     "FLEQ vectors and matrices print as matrices."),
    "set": Command("set NAME VALUE", "store VALUE in one memory word of both engines",
                   "VALUE must fit the program's word size; the two reserved cells cannot be "
                   "set. The transformer's X is edited between passes. FLEQ: a real, or a "
                   "literal such as [[1, 2], [3, 4]] of the variable's shape; one entry as "
                   "NAME[I] (a vector) or NAME[ROW, COLUMN], from 0."),
    "pc": Command("pc", "the program counter, its labels and the instruction there"),
    "list": Command("list", "the instructions around the program counter",
                    "`=>` marks the program counter, `b` a breakpoint."),
    "engine": Command("engine [transformer|reference]", "choose the engine that drives",
                      "The active engine's program counter decides where execution stops, "
                      "and its state is what print, pc, list and watch show; the other "
                      "follows step by step. Switching resynchronizes: the engine switched "
                      "to takes over the memory and program counter of the one left, so the "
                      "two agree again (FLEQ in float32: except the reals float32 cannot "
                      "hold, which it lists). Without an argument, name the active engine."),
    "diff": Command("diff", "where the transformer and the reference disagree at this step",
                    "FLEQ: every variable's transformer and reference values and their max "
                    "abs error (the blocks' documented errors), and the program counters."),
    "reset": Command("reset", "both engines back to the initial state, step 0",
                     "Breakpoints and watches are kept."),
    "info": Command("info", "program, geometry, layers, heads, temperature, dtype, device"),
    "show": Command("show X|attn [LAYER]", "write a picture for this step and print its path",
                    "show X: the punchcard X now (with LAYER: X after that layer of the next "
                    "pass). show attn: for the next pass, one picture per layer (or LAYER "
                    "only) with every head's attention matrix and X before and after it. "
                    "Pictures go to the --out directory (default out/repl)."),
    "help": Command("help [CMD]", "list the commands, or explain one"),
    "quit": Command("quit", "leave the REPL (Ctrl-D does the same)"),
}
ALIASES = {"s": "step", "c": "continue", "b": "break", "p": "print", "q": "quit",
           "exit": "quit"}
TYPED = Command("subleq A, B[, C] | goto L | halt | c = f(a, b)",
                "execute one instruction on the current state; the pc stays",
                "Names are the loaded program's. The transformer runs it as one ordinary pass "
                "over X with the instruction column at pc replaced by the typed pointers and "
                "keeps only the memory words of that pass, so the program counter and the "
                "program's instructions are unchanged; the reference does the same. A jump "
                "target is checked but has no effect. FLEQ programs take `c = f(a, b)` with f "
                "one of the machine's blocks and shapes that fit, run the same way.")


@dataclass(frozen=True)
class Breakpoint:
    number: int
    index: int


@dataclass(frozen=True)
class Watch:
    number: int
    location: Location


@dataclass(frozen=True)
class Loaded:
    """A program the REPL runs, with the source its typed instructions are assembled in."""

    path: str
    source: str
    program: object
    machine: LockstepMachine | FleqLockstep

    dialect: ReplDialect


class Repl:
    """Commands over one loaded program; `execute` takes a line and returns the output."""

    def __init__(self, config: EngineConfig = EngineConfig(), bits: int | None = None,
                 scratch: int | None = None, picture_dir: str | Path = DEFAULT_PICTURE_DIR,
                 max_steps: int = DEFAULT_MAX_STEPS, engine: str = "transformer",
                 progress_stream: TextIO | None = None, max_seconds: float | None = None
                 ) -> None:
        if engine not in ENGINES:
            raise InputError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        # None failed in `continue`, -1 "stopped after -1 steps"
        max_steps = check_max_steps(max_steps)
        check_max_seconds(max_seconds)
        if not isinstance(picture_dir, (str, Path)):  # None failed inside pathlib
            raise InputError(f"picture_dir must be a directory name, got {picture_dir!r}")
        # None: `info` said 'error: AttributeError'; the first step of a sampling config
        # said "step() makes exact passes"
        check_exact(config, "the REPL")
        if progress_stream is not None and not callable(getattr(progress_stream, "write", None)):
            raise InputError(f"progress_stream must be a text stream or None, got "
                             f"{type(progress_stream).__name__}")  # 5 failed in every step
        self.config, self.bits, self.scratch = config, bits, scratch
        self.picture_dir, self.max_steps, self.engine = Path(picture_dir), max_steps, engine
        self.max_seconds = max_seconds
        self.progress_stream = progress_stream
        self.loaded: Loaded | None = None
        self.stops: dict[int, Breakpoint | Watch] = {}
        self.next_stop = 1
        self.finished = False

    # -- the command boundary -------------------------------------------------
    def execute(self, line: str) -> str:
        """Run one typed line; errors come back as one line, never as an exception
        (KeyboardInterrupt outside a run is left to the caller's loop)."""
        if not isinstance(line, str):  # None failed on `.strip` before the error boundary
            return f"error: a command line is a string, got {type(line).__name__}"
        words = line.strip().split(maxsplit=1)
        if not words:
            return ""
        name = ALIASES.get(words[0], words[0])
        argument = words[1].strip() if len(words) > 1 else ""
        try:
            if self.loaded is not None and self.loaded.dialect.typed_before_commands(line):
                return self._typed(line.strip())
            if self.loaded is not None and FLEQ_INSTRUCTION.match(line):
                # `c = ...` and `q = ...` ran into the aliases ('continue' takes no argument)
                raise InputError(f"'{shortened(line.strip())}' is a FLEQ instruction; the "
                                 "loaded program is SUBLEQ (subleq A, B[, C] | goto L | halt)")
            if name in COMMANDS:
                return self._handler(name)(argument)
            if is_instruction(line):
                return self._typed(line.strip())
            raise InputError(f"unknown command '{words[0]}' (type help)")
        except LtvmError as error:
            return _error_text(error)
        except OSError as error:  # a path the line named: what went wrong and where
            where = f": {shown_path(error.filename)}" if error.filename else ""
            return f"error: {error.strerror or error}{where}"
        except Exception as error:  # the session must survive anything a line can cause
            return error_line(f"error: {type(error).__name__}: {error}")

    def _handler(self, name: str) -> Callable[[str], str]:
        return getattr(self, f"_{name}")

    @property
    def machine(self) -> LockstepMachine | FleqLockstep:
        return self._loaded().machine

    def _loaded(self) -> Loaded:
        if self.loaded is None:
            raise InputError("no program loaded (load FILE)")
        return self.loaded

    # -- programs -------------------------------------------------------------
    def load(self, path: str) -> str:
        """Assemble and load `path`; raises InputError (with location) when it cannot."""
        try:
            isa = for_path(path)
        except InputError:
            isa = None
        if isa is not None and isa.name not in DIALECTS:
            raise InputError(f"{shown_path(path)}: this REPL runs SUBLEQ (.sq) and FLEQ (.fleq) "
                             f"sources; {Path(path).suffix!r} files have a REPL of their own: "
                             f"ltvm repl {shown_path(path)}")
        if isa is None:
            raise InputError(f"{shown_path(path)}: the REPL runs SUBLEQ (.sq) and FLEQ (.fleq) "
                             f"sources, not {Path(path).suffix!r}")
        dialect = DIALECTS[isa.name]
        source = read_source(path)
        engine = self.loaded.machine.active if self.loaded else self.engine
        progress = Progress("lines assembled")  # as `ltvm run` shows a long assembly
        try:
            loading = dialect.load(path, source, self.config, engine, self.bits, self.scratch,
                                   progress)
        finally:
            progress.done()
        self.loaded = Loaded(path, source, loading.program, loading.machine, dialect)
        self.stops.clear()
        return f"{loading.summary}\n{self._where()}"

    def _load(self, argument: str) -> str:
        if not argument:
            raise InputError("usage: load FILE")
        return self.load(os.path.expanduser(argument.strip("'\"")))  # ~/x.sq, as a shell

    def _where(self) -> str:
        machine = self.machine
        return location_line(machine.program, machine.steps, machine.state().pc)

    # -- execution ------------------------------------------------------------
    def _step(self, argument: str) -> str:
        count = _positive(argument) if argument else 1
        if count <= self.max_steps:
            return self._advance(count, stop_at_start=False, limit_reason=None)
        # step 10**30 ran on past --max-steps for as long as the program did not halt
        return self._advance(self.max_steps, stop_at_start=False,
                             limit_reason=self._stopped_at_the_limit(
                                 f"; step asked for {shown_int(count)}"))

    def _run(self, argument: str) -> str:
        _no_argument("run", argument)
        self.machine.reset()
        return self._advance(self.max_steps, stop_at_start=True,
                             limit_reason=self._stopped_at_the_limit())

    def _continue(self, argument: str) -> str:
        _no_argument("continue", argument)
        return self._advance(self.max_steps, stop_at_start=False,
                             limit_reason=self._stopped_at_the_limit())

    def _stopped_at_the_limit(self, detail: str = "") -> str:
        return f"stopped after {counted(self.max_steps, 'step')} (--max-steps{detail})"

    def _advance(self, limit: int, stop_at_start: bool, limit_reason: str | None) -> str:
        """Step both engines up to `limit` times; stop at a breakpoint, EOF, a watch that
        changes, the first disagreement, or Ctrl-C. Returns why it stopped and where."""
        machine, program = self.machine, self.machine.program
        breakpoints = {stop.index: stop for stop in self.stops.values()
                       if isinstance(stop, Breakpoint)}
        watches = [stop for stop in self.stops.values() if isinstance(stop, Watch)]
        start = machine.state().memory
        watched = {watch.number: watch.location.read(start) for watch in watches}
        agreed = not machine.differences()
        reasons: list[str] = []
        progress = Progress("steps", limit if limit < self.max_steps else None,
                            self.progress_stream, max_seconds=self.max_seconds)
        executed = 0
        try:
            while not reasons:
                pc = machine.state().pc
                if (executed or stop_at_start) and pc in breakpoints:
                    reasons.append(f"breakpoint {breakpoints[pc].number} at "
                                   f"{instruction_place(program, pc)}")
                elif machine.halted:
                    reasons.append("the program has halted (pc at EOF)")
                elif executed >= limit:
                    reasons.extend([limit_reason] if limit_reason else [])
                    break
                else:
                    note = machine.step()
                    executed += 1
                    reasons.extend([note] if note else [])
                    reasons.extend(self._watch_changes(watches, watched))
                    if agreed and machine.differences():
                        reasons.append("the engines disagree from this step on (see diff)")
                    progress(executed)  # last: --max-seconds keeps the step's own reasons
        except KeyboardInterrupt:
            reasons.append(f"interrupted after {counted(executed, 'step')}")
        except TimeLimitExceeded as error:  # raised after a whole step, as Ctrl-C ends one
            reasons.append(str(error))
        finally:
            progress.done()
        changed = self._changes(start, machine.state().memory)
        return "\n".join([*reasons, self._where(), *(f"  {line}" for line in changed)])

    def _watch_changes(self, watches: list[Watch], watched: dict[int, int | list[int]]
                       ) -> list[str]:
        memory = self.machine.state().memory
        found = []
        for watch in watches:
            value = watch.location.read(memory)
            if not same_value(value, watched[watch.number]):
                found.append(f"watch {watch.number}: {watch.location.name} = "
                             f"{self._inline(value)} (was "
                             f"{self._inline(watched[watch.number])})")
                watched[watch.number] = value
        return found

    def _typed(self, line: str) -> str:
        loaded = self._loaded()
        instruction = loaded.dialect.assemble_typed(loaded.program, loaded.source, line)
        before = loaded.machine.state().memory
        loaded.machine.execute(instruction)
        changed = self._changes(before, loaded.machine.state().memory)
        pc = loaded.machine.state().pc
        place = instruction_place(loaded.program, pc)
        return "\n".join([f"executed {shortened(line)} (pc stays at {place})",
                          *(f"  {entry}" for entry in changed or ["no memory changed"])])

    def _reset(self, argument: str) -> str:
        _no_argument("reset", argument)
        self.machine.reset()
        return f"reset to the initial state\n{self._where()}"

    # -- breakpoints and watches ----------------------------------------------
    def _break(self, argument: str) -> str:
        if not argument:
            return self._stop_list()
        program = self.machine.program
        index = resolve_instruction(program, argument)
        for stop in self.stops.values():
            if isinstance(stop, Breakpoint) and stop.index == index:
                raise InputError(f"breakpoint {stop.number} is already at "
                                 f"{instruction_place(program, index)}")
        stop = Breakpoint(self._new_stop_number(), index)
        self.stops[stop.number] = stop
        return f"breakpoint {stop.number} at {instruction_place(program, index)}"

    def _watch(self, argument: str) -> str:
        if not argument:
            return self._stop_list()
        location = self._resolve(argument)
        for stop in self.stops.values():  # a second watch reported every change twice
            if isinstance(stop, Watch) and replace(stop.location, name=location.name) == location:
                raise InputError(f"watch {stop.number} is already on {stop.location.name}")
        stop = Watch(self._new_stop_number(), location)
        self.stops[stop.number] = stop
        value = location.read(self.machine.state().memory)
        return f"watch {stop.number}: {location.name} = {self._inline(value)}"

    def _new_stop_number(self) -> int:
        number, self.next_stop = self.next_stop, self.next_stop + 1
        return number

    def _stop_list(self) -> str:
        if not self.stops:
            return "no breakpoints or watches"
        program = self.machine.program
        return "\n".join(f"{number:>3}  breakpoint at {instruction_place(program, stop.index)}"
                         if isinstance(stop, Breakpoint) else
                         f"{number:>3}  watch {stop.location.name}"
                         for number, stop in sorted(self.stops.items()))

    def _delete(self, argument: str) -> str:
        if not argument:
            count = len(self.stops)
            self.stops.clear()
            return f"deleted {count} breakpoints and watches"
        number = parse_int(argument)  # a number, not a count: 0 is one that does not exist
        stop = self.stops.pop(number, None)
        if stop is None:
            raise InputError(f"no breakpoint or watch {shown_int(number)}")
        return f"deleted {'breakpoint' if isinstance(stop, Breakpoint) else 'watch'} {number}"

    # -- state ----------------------------------------------------------------
    def _print(self, argument: str) -> str:
        program, memory = self.machine.program, self.machine.state().memory
        return self._loaded().dialect.print(program, memory, argument)

    def _set(self, argument: str) -> str:
        return self._loaded().dialect.set(self.machine, argument)

    def _pc(self, argument: str) -> str:
        _no_argument("pc", argument)
        return self._where()

    def _list(self, argument: str) -> str:
        _no_argument("list", argument)
        machine = self.machine
        breakpoints = {stop.index for stop in self.stops.values()
                       if isinstance(stop, Breakpoint)}
        return "\n".join(listing(machine.program, machine.state().pc, breakpoints))

    def _engine(self, argument: str) -> str:
        if not argument:
            active = self.loaded.machine.active if self.loaded else self.engine
            return f"engine: {active}"
        if argument not in ENGINES:
            raise InputError(f"engine must be one of {', '.join(ENGINES)}, got '{argument}'")
        if self.loaded is None:
            self.engine = argument
            return f"engine: {argument} (for the next program loaded)"
        left = self.machine.active
        if argument == left:
            return f"engine: {argument} (already active)"
        differed = self.machine.switch(argument)
        step = self.machine.steps
        if not differed:
            return f"engine: {argument} (both engines agree at step {step})"
        apart = self._loaded().dialect.still_apart(self.machine)
        if not apart:
            return f"engine: {argument} (resynchronized from the {left}'s state at step {step})"
        shown = apart[:MAX_APART_SHOWN] + ([f"... and {len(apart) - MAX_APART_SHOWN} more"]
                                           if len(apart) > MAX_APART_SHOWN else [])
        return "\n".join([f"engine: {argument} (took over the {left}'s state at step {step}, "
                          f"but {self.machine.executor.dtype_name} does not hold all of it "
                          "exactly: the engines still differ)",
                          *(f"  {line}" for line in shown)])

    def _diff(self, argument: str) -> str:
        _no_argument("diff", argument)
        return self._loaded().dialect.diff(self.machine)

    def _info(self, argument: str) -> str:
        _no_argument("info", argument)
        config = self.config
        if self.loaded is None:
            return (f"no program loaded\ndtype: {config.dtype or 'the machine default'}  "
                    f"device: {config.device}  attention: {config.attention}\n"
                    f"engine: {self.engine}")
        machine, program = self.machine, self.machine.program
        engine_line = (f"dtype: {machine.executor.dtype_name}  device: {config.device}  "
                       f"attention: {config.attention}")
        transformer = machine.executor.machine
        cells = self.loaded.dialect.memory_cells(program)
        lines = [(f"program: {shown_path(self.loaded.path)} ({len(program.instructions)} "
                  f"instructions, {cells} memory cells)"),
                 f"geometry: {machine.geometry.describe()}",
                 f"punchcard X: {machine.layout.rows} rows x {machine.layout.columns} columns",
                 (f"transformer: {len(transformer.weights.layers)} layers, heads per layer "
                  f"{transformer.weights.heads}")]
        for index, layer in enumerate(transformer.weights.layers):
            heads = ("; ".join(head.role for head in layer.heads) or "no attention"
                     if len(layer.heads) <= MAX_ROLES_LISTED else f"{len(layer.heads)} heads")
            lines.append(f"  layer {index}: {layer.role} [{heads}]")
        lines += [f"temperature: {transformer.temperature:.4g}", engine_line,
                  f"checked: {'yes' if machine.executor.checked else 'no'}",
                  f"engine: {machine.active}  step: {machine.steps}"]
        return "\n".join(lines)

    # -- names and values of either machine ------------------------------------
    def _resolve(self, text: str):
        return self._loaded().dialect.resolve(self.machine.program, text)

    def _inline(self, value) -> str:
        return self._loaded().dialect.inline(value)

    def _changes(self, before: list, after: list) -> list[str]:
        return self._loaded().dialect.changes(self.machine.program, before, after)

    # -- pictures -------------------------------------------------------------
    def _show(self, argument: str) -> str:
        words = argument.split()
        if not 1 <= len(words) <= 2 or words[0].lower() not in ("x", "attn"):
            raise InputError("usage: show X|attn [LAYER]")
        # matplotlib takes about a second to import: load it only when drawing
        from vm.tools.pictures import (axis_labels, check_pass_memory, save_pass_pictures,
                                       save_x_picture)

        loaded, machine = self._loaded(), self.machine
        layers = len(machine.executor.model.layers)
        layer = _layer(words[1], layers) if len(words) == 2 else None
        if words[0].lower() == "attn" or layer is not None:  # both trace the whole pass
            check_pass_memory(machine.executor.model, machine.X[0], f"show {argument}",
                              "show X without a layer")
        labels = axis_labels(*loaded.dialect.isa.column_names(loaded.program, machine.geometry,
                                                      machine.layout), machine.layout)
        step, name = machine.steps, Path(loaded.path).name

        def draw(directory: Path) -> list[Path]:
            if words[0].lower() == "attn":  # a FLEQ pass's 17 layers take a minute
                progress = Progress("layers drawn", layers if layer is None else 1,
                                    self.progress_stream)
                try:
                    return save_pass_pictures(machine.executor.model, machine.X[0], labels,
                                              directory, step, f"{name} step {step}",
                                              None if layer is None else [layer], progress)
                finally:
                    progress.done()
            if layer is None:
                return [save_x_picture(machine.X[0], labels, directory / f"step{step:04d}_X.png",
                                       f"{name}: X at step {step}")]
            after = trace_pass(machine.executor.model, machine.X[0])[layer].after
            return [save_x_picture(after, labels, directory / f"step{step:04d}_X_layer{layer}.png",
                                   f"{name}: X after layer {layer} of pass {step + 1}")]
        return "\n".join(f"wrote {shown_path(path)}" for path in self._save_pictures(draw))

    def _save_pictures(self, draw: Callable[[Path], list[Path]]) -> list[Path]:
        """`draw`'s pictures, drawn into a hidden folder in --out and moved in only when
        every one is drawn and has a place to go, so a failure or Ctrl-C part-way leaves
        neither a half-written picture nor part of a set."""
        if self.picture_dir.exists() and not self.picture_dir.is_dir():  # 'File exists: DIR'
            raise InputError(f"cannot write pictures into {self.picture_dir}: it is not a "
                             "directory (--out)")
        try:
            self.picture_dir.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=self.picture_dir, prefix=".show-"))
        except OSError as error:  # in /proc/self it named the hidden folder it tried to make
            raise InputError(f"cannot write pictures into {shown_path(self.picture_dir)}: "
                             f"{error.strerror or error} (--out)") from None
        try:
            drawn = draw(staging)
            targets = [self.picture_dir / path.name for path in drawn]
            for target in targets:
                if target.is_dir():
                    raise InputError(f"cannot write {shown_path(target)}: it is a directory")
            for path, target in zip(drawn, targets):
                os.replace(path, target)
            return targets
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    # -- the session ----------------------------------------------------------
    def _help(self, argument: str) -> str:
        if not argument:
            width = max(len(command.usage) for command in COMMANDS.values())
            lines = [f"  {command.usage:<{width}}  {command.summary}"
                     for command in COMMANDS.values()]
            aliases = ", ".join(f"{alias} = {name}" for alias, name in ALIASES.items())
            return "\n".join(["commands:", *lines, f"  {TYPED.usage}",
                              f"  {'':<{width}}  {TYPED.summary}", f"aliases: {aliases}",
                              "help CMD explains one; Ctrl-D quits"])
        name = ALIASES.get(argument, argument)
        if name not in COMMANDS and name.lower() not in MNEMONICS:
            raise InputError(f"no command '{argument}' (type help)")
        command = COMMANDS.get(name, TYPED)
        return "\n".join(part for part in (command.usage, command.summary,
                                           textwrap.fill(command.details, HELP_WIDTH)) if part)

    def _quit(self, argument: str) -> str:
        _no_argument("quit", argument)
        self.finished = True
        return ""

    # -- completion -----------------------------------------------------------
    def completions(self, line: str) -> list[str]:
        """Candidates for the word being typed at the end of `line` (for tab completion)."""
        if self.loaded is not None:
            inside = self.loaded.dialect.instruction_completions(self.loaded.program, line)
            if inside is not None:
                return inside
        word = re.split(r"[\s,]", line)[-1]
        before = line[:len(line) - len(word)].split()
        if not before:
            extra = self.loaded.dialect.first_words(self.loaded.program) if self.loaded else []
            candidates = [*COMMANDS, *MNEMONICS, *extra]
        else:
            name = ALIASES.get(before[0], before[0]).lower()
            if name == "load":
                return _paths(word)
            candidates = self._argument_candidates(name, len(before))
        return sorted(candidate for candidate in set(candidates) if candidate.startswith(word))

    def _argument_candidates(self, command: str, position: int) -> list[str]:
        fixed = {"help": [*COMMANDS, *MNEMONICS], "engine": list(ENGINES), "show": ["X", "attn"]}
        if command in fixed:
            return fixed[command] if position == 1 else []
        if self.loaded is None:
            return []
        program = self.loaded.program
        symbols = self.loaded.dialect.names(program)
        labels = [*program.labels, "EOF"]
        if command in ("print", "watch") or (command == "set" and position == 1):
            return symbols
        if command == "break":
            return labels
        if command == "delete":
            return [str(number) for number in self.stops]
        if command in MNEMONICS:
            return symbols + labels
        return []


def _paths(prefix: str) -> list[str]:
    """Files and directories starting with `prefix` (directories end with '/'), a leading
    `~` kept as typed."""
    expanded = os.path.expanduser(prefix)
    return sorted(prefix + path[len(expanded):] + ("/" if os.path.isdir(path) else "")
                  for path in glob.glob(glob.escape(expanded) + "*"))


def _positive(text: str) -> int:
    value = parse_int(text)
    if value < 1:
        raise InputError(f"expected a positive count, got {shown_int(value)}")
    return value


def _layer(text: str, layers: int) -> int:
    value = parse_int(text)
    if not 0 <= value < layers:
        raise InputError(f"layer {shown_int(value)} does not exist (layers 0..{layers - 1})")
    return value


def _no_argument(command: str, argument: str) -> None:
    if argument:
        raise InputError(f"'{command}' takes no argument")


def _error_text(error: LtvmError) -> str:
    """What the session shows for `error`: one `error: ...` line, or for an error at a place
    in a source file its `file:line:col:` line, the source line and a caret, as the command
    line shows it (the REPL showed the first line alone: no caret under the column)."""
    error = shown_in_source(error)
    if not error.located:
        return f"error: {error_line(str(error)) or type(error).__name__}"
    return "\n".join(shortened(line) for line in str(error).split("\n"))
