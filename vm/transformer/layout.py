"""The residual-stream map: named row fields and named column regions.

Weight builders and the punchcard address X only through these names; no
other module does raw row arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vm.common.errors import InputError


@dataclass(frozen=True)
class Layout:
    """Row fields and column regions of X, allocated once per geometry."""

    fields: dict[str, slice]
    regions: dict[str, range]
    rows: int
    columns: int
    persistent: tuple[str, ...] = ()
    """Fields that carry state between passes; every other field is zero between passes."""
    groups: tuple[str, ...] = ()
    """Fields that only name a span of consecutive other fields."""

    def working(self) -> list[str]:
        """Fields that must be zero between passes (groups excluded)."""
        return [name for name in self.fields
                if name not in self.persistent and name not in self.groups]

    def __getitem__(self, name: str) -> slice:
        try:
            return self.fields[name]
        except KeyError:
            raise KeyError(f"layout has no field '{name}'") from None

    def size(self, name: str) -> int:
        span = self[name]
        return span.stop - span.start

    def row(self, name: str, index: int = 0) -> int:
        """Absolute row of element `index` of a field."""
        if not 0 <= index < self.size(name):
            raise IndexError(f"field '{name}' has {self.size(name)} rows, not {index + 1}")
        return self[name].start + index

    def field_of_row(self, row: int) -> tuple[str, int]:
        """The smallest field holding `row`, and the row's index inside it."""
        best = min((span.stop - span.start, name) for name, span in self.fields.items()
                   if span.start <= row < span.stop)
        return best[1], row - self.fields[best[1]].start

    def to_json(self) -> dict:
        return {
            "fields": {name: [span.start, span.stop] for name, span in self.fields.items()},
            "regions": {name: [span.start, span.stop] for name, span in self.regions.items()},
            "rows": self.rows,
            "columns": self.columns,
        }


@dataclass
class LayoutBuilder:
    """Allocates fields top to bottom and regions left to right."""

    fields: dict[str, slice] = field(default_factory=dict)
    regions: dict[str, range] = field(default_factory=dict)
    persistent: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    rows: int = 0
    columns: int = 0

    def add(self, name: str, size: int, persistent: bool = False) -> slice:
        if name in self.fields:
            raise ValueError(f"field '{name}' allocated twice")
        span = slice(self.rows, self.rows + size)
        self.fields[name] = span
        self.rows += size
        if persistent:
            self.persistent.append(name)
        return span

    def group(self, name: str, parts: list[str]) -> slice:
        """A field spanning consecutive, already allocated fields."""
        spans = [self.fields[part] for part in parts]
        if any(a.stop != b.start for a, b in zip(spans, spans[1:])):
            raise ValueError(f"parts of group '{name}' are not consecutive")
        self.fields[name] = slice(spans[0].start, spans[-1].stop)
        self.groups.append(name)
        if all(part in self.persistent for part in parts):
            self.persistent.append(name)
        return self.fields[name]

    def region(self, name: str, width: int) -> range:
        if width < 0:
            raise InputError(f"region '{name}' cannot have negative width")
        span = range(self.columns, self.columns + width)
        self.regions[name] = span
        self.columns += width
        return span

    def build(self) -> Layout:
        return Layout(dict(self.fields), dict(self.regions), self.rows, self.columns,
                      tuple(self.persistent), tuple(self.groups))
