"""The interactive debugger (`ltvm repl`): session commands, lockstep state, names,
typed instructions, the terminal front end.

Sits on top: may import anything below it (assembler, runtime, tools, `vm.isa`).
The defaults below live here, torch-free, because `ltvm repl`'s options name them.
"""

from __future__ import annotations

from pathlib import Path

ENGINES = ("transformer", "reference")
DEFAULT_PICTURE_DIR = Path("out/repl")
DEFAULT_MAX_STEPS = 1_000_000
"""Steps one `step`, `run` or `continue` may take before it stops by itself (Ctrl-C stops it
sooner)."""
