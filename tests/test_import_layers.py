"""The packages import one way only: source -> assembler -> Program -> machine -> tools.

Every module of `vm` and `assembler` belongs to one layer; a layer may import only the
layers listed for it. The table is the architecture (docs/architecture.md draws it):
an arrow that runs back, e.g. the runtime importing a parser or the assembler importing
the machine, fails here with the file and the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS = [  # (module prefix, layer); the longest matching prefix wins
    ("vm.common", "common"),
    ("assembler.program", "program model"),
    ("assembler.fleq_program", "program model"),
    ("assembler", "assembler"),
    ("vm.transformer", "transformer"),
    ("vm.attention", "attention"),
    ("vm.blocks", "blocks"),
    ("vm.functions", "functions"),
    ("vm.routines", "routines"),
    ("vm.machines", "machines"),
    ("vm.runtime", "runtime"),
    ("vm.isa", "isa"),
    ("vm.tools", "tools"),
    ("vm.apps", "apps"),
    ("vm.repl", "repl"),
    ("vm.cli", "cli"),
    ("vm", "cli"),
]
RUNTIME = {"common", "program model", "transformer", "blocks", "functions", "machines",
           "runtime"}
ALLOWED = {
    "common": set(),
    "program model": {"common"},
    "assembler": {"common", "program model"},
    "transformer": {"common"},
    "attention": {"common"},
    "blocks": {"common", "transformer"},
    "functions": {"common", "transformer", "blocks"},
    "routines": {"common", "functions"},
    "machines": {"common", "program model", "transformer", "blocks", "functions"},
    "runtime": RUNTIME - {"runtime"},
    "isa": RUNTIME | {"assembler", "routines"},
    "tools": RUNTIME | {"assembler", "routines", "isa", "attention"},
    "apps": RUNTIME | {"assembler", "routines", "isa", "tools"},
    "repl": RUNTIME | {"assembler", "routines", "isa", "tools", "apps"},
    "cli": {layer for _, layer in LAYERS} - {"cli"},
}


def layer_of(module: str) -> str | None:
    """The layer of a module of this project, None for anything else (numpy, torch...)."""
    for prefix, layer in sorted(LAYERS, key=lambda entry: -len(entry[0])):
        if module == prefix or module.startswith(prefix + "."):
            return layer
    return None


def imported_modules(source: str) -> set[str]:
    """Every absolute import in a module, also those inside functions (lazy imports)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def back_arrows(module: str, source: str) -> list[str]:
    """The imports of `module` that its layer may not make."""
    own = layer_of(module)
    return [f"{module} ({own}) imports {name} ({layer_of(name)})"
            for name in sorted(imported_modules(source))
            if layer_of(name) not in (None, own) and layer_of(name) not in ALLOWED[own]]


def project_modules() -> dict[str, Path]:
    files = [*sorted((ROOT / "vm").rglob("*.py")), *sorted((ROOT / "assembler").rglob("*.py"))]
    return {".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"):
            path for path in files}


def test_every_module_belongs_to_a_layer():
    assert all(layer_of(module) for module in project_modules())


def test_no_import_runs_back_against_the_layers():
    arrows = [arrow for module, path in project_modules().items()
              for arrow in back_arrows(module, path.read_text())]
    assert arrows == []


def test_the_runtime_never_imports_a_parser():
    source = "def load():\n    from assembler.fleq import assemble_fleq\n"
    assert back_arrows("vm.runtime.executor", source) == [
        "vm.runtime.executor (runtime) imports assembler.fleq (assembler)"]


def test_the_assembler_imports_only_the_shared_layer():
    assert back_arrows("assembler.fleq", "from vm.functions import REGISTRY\n") == [
        "assembler.fleq (assembler) imports vm.functions (functions)"]
    assert back_arrows("assembler.fleq", "from vm.common.signatures import Catalogue\n") == []
