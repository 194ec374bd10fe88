"""The column-index CSV format of earlier looped-transformer code.

A commands file with header `a,b,c`, one instruction a row, 0-based absolute
column indices (memory columns s..s+m-1, instruction columns s+m..n-1, the
last row the EOF instruction), and a memory file with header `mem`, one
initial value a row. `save_csv` also writes `program.json` beside them (the scratch width
and word size the column indices and values assume), which `csv_settings` reads back so
an exported program re-imports identically.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

from assembler.diagnostics import SourceError, check_word_size, read_source
from assembler.program import (Instruction, Program, SourcePos, all_instructions, bits_needed,
                               word_range)
from assembler.subleq import DEFAULT_MIN_BITS, MAX_BITS
from vm.common.errors import InputError, shown_path
from vm.common.geometry import MAX_COLUMNS
from vm.common.limits import is_whole_number
from vm.common.outputs import staged_files

DEFAULT_CSV_SCRATCH = 2
MAX_FIELD = 80
"""Longest field read: a signed 64-bit decimal integer has at most 20 characters."""
SETTINGS_FILE = "program.json"
CSV_FILES = ("commands.csv", "memory.csv", SETTINGS_FILE)
"""What `save_csv` writes."""
SETTINGS_FORMAT = "ltvm-csv/1"


INTEGER = re.compile(r"[+-]?[0-9]+")
"""A field's integer: ASCII digits with an optional sign (int() also took '1_0' and Arabic
or full-width digits)."""


def _read(path: Path, header: list[str]) -> tuple[str, list[tuple[int, list[int]]]]:
    """Rows of integers with the 1-based line each starts on, after checking the header.
    Lines are counted at '\n' as the reader does (splitlines() also split at a form feed),
    and a quoted field over several lines no longer shifts the lines of the rows after it.
    Reading stops at the first row past the machine's columns: the 2 million rows of a
    4 MiB file took 8 s and 860 MB before the column check refused them."""
    text = read_source(path, encoding="utf-8-sig")
    reader = csv.reader(io.StringIO(text))
    rows, line = [], 1
    try:
        for row in reader:
            if not rows or any(cell.strip() for cell in row):  # the header, then data rows
                rows.append((line, row))
            if len(rows) > MAX_COLUMNS + 1:  # the header and a row past the columns
                break
            line = reader.line_num + 1
    except csv.Error as error:
        raise InputError(f"{shown_path(path)}: not a CSV file the importer can read ({error}); "
                         f"fields are integers of at most {MAX_FIELD} characters") from None
    for line_number, row in rows:
        for cell in row:
            if len(cell) > MAX_FIELD:
                raise SourceError(f"a field of {len(cell):,} characters (at most {MAX_FIELD})",
                                  str(path), text, line_number, 1)
    found_header = [cell.strip().lower() for cell in rows[0][1]] if rows else None
    if found_header != header:
        found = f", found '{','.join(rows[0][1])}'" if rows else " (the file is empty)"
        if found_header in (["a", "b", "c"], ["mem"]):  # the other file of the pair
            found += "; the pair is given as --csv CMDS MEM, the commands first"
        raise SourceError(f"expected the header '{','.join(header)}'{found}", str(path), text,
                          1, 1)
    if len(rows) > MAX_COLUMNS + 1:
        raise SourceError(f"more than {MAX_COLUMNS} rows, the machine's columns for scratch, "
                          "memory and instructions together", str(path), text, line, 1)
    parsed = []
    for line_number, row in rows[1:]:
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise SourceError(f"expected {len(header)} value(s), got {len(row)}", str(path),
                              text, line_number, 1)
        for index, cell in enumerate(row):
            if not INTEGER.fullmatch(cell.strip()):
                raise SourceError(f"'{cell.strip()}' is not an integer", str(path), text,
                                  line_number, *_field_span(text, line_number, index))
        parsed.append((line_number, [int(cell) for cell in row]))
    return text, parsed


def _field_span(text: str, line_number: int, index: int) -> tuple[int, int]:
    """The column where the value of field `index` of the row on `line_number` starts, past
    the blanks around it (`4, 6 ,99` put the caret under the space), and its width; column
    1 and the width of the row's field for a row whose fields are quoted or span lines, so
    that an error's caret stands under that value, not under the row's first."""
    line = text.split("\n")[line_number - 1]
    row = next(csv.reader([line]), [])
    if index >= len(row):
        return 1, 1
    field = row[index]
    written = ",".join(row[:index + 1])  # where the field sits when unquoted
    width = max(len(field.strip()), 1)
    if not line.startswith(written):
        return 1, width
    return len(written) - len(field.lstrip()) + 1, width


def _check_columns(path: Path, text: str, rows: list[tuple[int, list[int]]], room: int,
                   what: str, beside: str) -> None:
    """A located error at the first row past the `room` columns the machine has left for
    them (the geometry refused 2,000,000 memory rows as '2000003 columns exceed the limit',
    naming no file); a room below one is the scratch width's, which the geometry names."""
    if 1 <= room < len(rows):
        raise SourceError(f"more {what} than the machine's {MAX_COLUMNS} columns hold beside "
                          f"{beside}: the first {room} fit", str(path), text, rows[room][0], 1)


def _check_scratch(scratch: object) -> None:
    """InputError unless the scratch width is a whole number from 1 to the machine's columns:
    save_csv wrote columns such as '4.5' for 2.5 and '-1' for -3, which no import reads back,
    and load_csv failed with a TypeError for '2'."""
    if not is_whole_number(scratch) or not 1 <= scratch <= MAX_COLUMNS:
        raise InputError(f"--scratch must be a whole number from 1 to {MAX_COLUMNS}, got "
                         f"{scratch!r:.40}")


def load_csv(commands: str | Path, memory: str | Path, scratch: int = DEFAULT_CSV_SCRATCH,
             bits: int | None = None) -> Program:
    """Import a commands/memory CSV pair as a `Program` (scratch width `scratch`)."""
    commands, memory = Path(commands), Path(memory)
    _check_scratch(scratch)
    memory_text, memory_rows = _read(memory, ["mem"])
    values = [row[0] for _, row in memory_rows]
    if len(values) < 2:
        raise InputError(f"{shown_path(memory)}: memory needs at least 2 cells (a 0 and a "
                         "non-positive cell for the EOF instruction)")
    _check_columns(memory, memory_text, memory_rows, MAX_COLUMNS - scratch - 1, "memory cells",
                   f"{scratch} scratch columns and the EOF instruction")
    needed = max(bits_needed(v) for v in values)
    if bits is None:  # a value past MAX_BITS is named at its line below, not as --bits
        bits = min(max(DEFAULT_MIN_BITS, needed), MAX_BITS)
    bits = check_word_size(bits, MAX_BITS)  # '8' and 8.5 failed with TypeErrors
    low, high = word_range(bits)
    for line_number, row in memory_rows:
        if not low <= row[0] <= high:
            raise SourceError(f"value {row[0]} does not fit in {bits}-bit words "
                              f"(range {low}..{high})", str(memory), memory_text, line_number,
                              *_field_span(memory_text, line_number, 0))
    text, rows = _read(commands, ["a", "b", "c"])
    if not rows:
        raise InputError(f"{shown_path(commands)}: no instructions (the last row must be the EOF "
                         "instruction)")
    _check_columns(commands, text, rows, MAX_COLUMNS - scratch - len(values), "instructions",
                   f"{scratch} scratch columns and {len(values)} memory cells")
    m, k = len(values), len(rows)
    first_code, n = scratch + m, scratch + m + k
    instructions = []
    for index, (line_number, (a, b, c)) in enumerate(rows):
        for field, (name, value) in enumerate((("a", a), ("b", b))):
            if not scratch <= value < first_code:
                raise SourceError(f"{name} = {value} is not a memory column (memory columns are "
                                  f"{scratch}..{first_code - 1})", str(commands), text,
                                  line_number, *_field_span(text, line_number, field))
        if not first_code <= c < n:
            raise SourceError(f"c = {c} is not an instruction column (instruction columns are "
                              f"{first_code}..{n - 1})", str(commands), text, line_number,
                              *_field_span(text, line_number, 2))
        pos = SourcePos(str(commands), line_number, 1)
        instructions.append(Instruction(a - scratch, b - scratch, c - first_code, pos,
                                        f"{a},{b},{c}"))
    eof, eof_line = instructions[-1], rows[-1][0]
    if eof.c != k - 1:
        raise SourceError(f"the last row must be the EOF instruction, jumping to itself "
                          f"(c = {n - 1})", str(commands), text, eof_line, 1)
    if values[eof.a] != 0 or values[eof.b] > 0:
        raise SourceError("the EOF instruction must subtract a 0 cell from a non-positive cell, "
                          f"so it never changes memory (here mem[{eof.a + scratch}] = "
                          f"{values[eof.a]}, mem[{eof.b + scratch}] = {values[eof.b]})",
                          str(commands), text, eof_line, 1)
    for (line_number, _), instruction in zip(rows, instructions[:-1]):
        # else Program refused it as 'c.csv:2:1: writes mem[0]', no caret, a memory index
        # where the file has a column index
        if instruction.b in (eof.a, eof.b) and instruction.a != instruction.b:
            raise SourceError(f"b = {instruction.b + scratch} is a cell the EOF instruction "
                              f"(line {eof_line}) reads, which must not change; only a row "
                              "with a = b (which writes 0) may name it", str(commands), text,
                              line_number, 1)
    return Program(instructions[:-1], values, bits=bits, source=str(commands),
                   eof_operands=(eof.a, eof.b))


def save_csv(program: Program, directory: str | Path, scratch: int = DEFAULT_CSV_SCRATCH
             ) -> tuple[Path, Path]:
    """Write `commands.csv` and `memory.csv` for `program` (absolute column indices), with
    `program.json` beside them, all three or none (`staged_files`): a directory of None
    failed with a TypeError, /dev/full with a FileExistsError, and a write that failed
    part-way left a commands file beside another program's memory file."""
    _check_scratch(scratch)
    scratch = int(scratch)  # numpy's int64 is no JSON number
    first_code = scratch + len(program.memory)
    rows = [f"{i.a + scratch},{i.b + scratch},{i.c + first_code}"
            for i in all_instructions(program)]
    settings = {"format": SETTINGS_FORMAT, "scratch": scratch, "bits": program.bits}
    texts = ("a,b,c\n" + "\n".join(rows) + "\n",
             "mem\n" + "\n".join(map(str, program.memory)) + "\n",
             json.dumps(settings, indent=2) + "\n")
    with staged_files(directory, CSV_FILES) as staging:
        for name, text in zip(CSV_FILES, texts):
            (staging / name).write_text(text)
    commands, memory, _ = (Path(directory) / name for name in CSV_FILES)
    return commands, memory


def _unique_keys(pairs: list[tuple[str, object]], path: Path) -> dict[str, object]:
    """A JSON object of the settings file, or InputError for a key written twice: json keeps
    the last in silence, so '"bits": 8, "bits": 16' imported 16-bit words."""
    settings: dict[str, object] = {}
    for key, value in pairs:
        if key in settings:
            raise InputError(f"{shown_path(path)}: {key!r:.40} is given twice")
        settings[key] = value
    return settings


def csv_settings(commands: str | Path) -> dict[str, int] | None:
    """The scratch width and word size saved beside a commands file by `save_csv`, or None
    when there is no program.json there. A program.json that is no file is an error: a
    directory of that name was passed over with the note that there was none, and the
    pair imported with guessed settings."""
    path = Path(commands).parent / SETTINGS_FILE
    if not path.exists():
        return None
    if path.is_dir():
        raise InputError(f"cannot read {shown_path(path)}: it is a directory (expected the "
                         "pair's settings file)")
    text = read_source(path, encoding="utf-8-sig")
    try:
        settings = json.loads(text, object_pairs_hook=lambda pairs: _unique_keys(pairs, path))
    except json.JSONDecodeError as error:  # at its line and column: it was 'cannot read'
        raise SourceError(f"not JSON: {error.msg}", str(path), text, error.lineno,
                          error.colno) from None
    except (ValueError, RecursionError):  # past Python's 4,300 digits; nested thousands deep
        raise InputError(f"cannot read {shown_path(path)}: a number too long or arrays nested too "
                         "deep for a settings file") from None
    if not isinstance(settings, dict) or settings.get("format") != SETTINGS_FORMAT:
        raise InputError(f"{shown_path(path)}: not an ltvm CSV settings file (format "
                         f"{SETTINGS_FORMAT})")
    values = {key: settings.get(key) for key in ("scratch", "bits")}
    if not all(isinstance(value, int) and not isinstance(value, bool) and value >= 1
               for value in values.values()):
        raise InputError(f"{shown_path(path)}: scratch and bits must be positive integers, got "
                         f"{values}")
    if not 2 <= values["bits"] <= MAX_BITS:  # else the message named --bits, never typed
        raise InputError(f"{shown_path(path)}: bits must be between 2 and {MAX_BITS}, got "
                         f"{values['bits']}")
    return values
