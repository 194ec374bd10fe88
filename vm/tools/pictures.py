"""Pictures of execution: the punchcard X and every head's attention, as PNG and GIF.

Only matplotlib's object-oriented API on an Agg canvas is used, never pyplot,
so no picture needs (or opens) a display and the global backend is left
alone. Columns are labelled by region and by the program's own names (cpu,
memory cells, instruction labels), rows by the layout's field names, so a
picture can be read without the layout table beside it.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from PIL import Image
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backend_bases import RendererBase
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.text import Text

from vm.common.errors import InputError, escaped, shown_path
from vm.common.limits import is_whole_number
from vm.transformer.layers import LayerTrace, LoopedTransformer, trace_pass
from vm.transformer.layout import Layout

MAX_LABELLED_COLUMNS = 80
"""Beyond this many columns, per-column names would overlap; only regions are named."""
MAX_HEADS_IN_ROW = 8
"""Up to this many heads, each gets a labelled panel beside X; more (a FLEQ layer of
sigmoid-sum terms has over a hundred) go to a grid of small unlabelled panels below X."""
HEAD_GRID_COLUMNS = 12
HEAD_GRID_TITLE_LINES = 3
"""Lines of a grid panel's title ("head N: block", then the rest of its role, wrapped): every
title has as many, so the layout made with one layer's titles holds another's."""
HEAD_GRID_TITLE_CHARACTERS = 38
"""Characters of a grid title's line, at its 5 points, that fit over a panel 1.6 inches wide."""
DPI = 100
X_COLORS = "RdBu_r"
ATTENTION_COLORS = "viridis"
MAX_FPS = 100
"""GIF frame times are whole hundredths of a second: faster frames cannot be shown."""
MIN_FPS = 0.01
"""A frame shows for at most 100 s: pillow cannot write a frame time above about 327 s (an
OverflowError), and it adds up the times of frames that look the same."""


@dataclass(frozen=True)
class AxisLabels:
    """Names for the axes of X: one per column, plus the regions and row fields."""

    columns: list[str]
    regions: list[tuple[str, int, int]]
    fields: list[tuple[str, int, int]]


def axis_labels(columns: list[str], regions: list[tuple[str, int, int]],
                layout: Layout) -> AxisLabels:
    """Column names and regions (from the program's instruction set, `column_names`) with
    the layout's row fields."""
    fields: list[tuple[str, int, int]] = []
    for row in range(layout.rows):
        name, _ = layout.field_of_row(row)
        if fields and fields[-1][0] == name:
            fields[-1] = (name, fields[-1][1], row + 1)
        else:
            fields.append((name, row, row + 1))
    return AxisLabels(columns, regions, fields)


@dataclass(frozen=True)
class _Names:
    """The tick names of one axis, each over a span (a field's rows, a region's columns), where
    there may be more than fit at their font size: a FLEQ layout's hundred row fields, most of
    them one row high, were drawn over each other into a black block."""

    axis: Axis
    ticks: list[float]
    names: list[str]
    spans: list[int]

    @classmethod
    def of(cls, axis: Axis, spans: list[tuple[str, int, int]], at_start: bool) -> _Names:
        """Each non-empty span's name, at its start or its middle."""
        shown = [(name, start, stop) for name, start, stop in spans if stop > start]
        ticks = [start if at_start else (start + stop - 1) / 2 for _, start, stop in shown]
        return cls(axis, ticks, [name for name, _, _ in shown],
                   [stop - start for _, start, stop in shown])

    def thin(self, renderer: RendererBase) -> None:
        """Keep the names whose labels, where the laid-out figure draws them, overlap no
        other kept one's, the widest spans first (the small fields they leave out lie between
        them, still bordered)."""
        extents = [label.get_window_extent(renderer) for label in self.axis.get_ticklabels()]
        kept: list[int] = []
        for index in sorted(range(len(self.ticks)), key=lambda index: -self.spans[index]):
            if not any(extents[index].padded(1).overlaps(extents[other]) for other in kept):
                kept.append(index)
        kept.sort()
        self.axis.set_ticks([self.ticks[index] for index in kept],
                            [self.names[index] for index in kept])


def _label_columns(axes: Axes, labels: AxisLabels, axis: str) -> list[_Names]:
    """Name every column (or, when too many, every region: names to thin) and draw region
    borders."""
    count = len(labels.columns)
    size, text = (6 if count <= 48 else 4), ({"rotation": 90} if axis == "x" else {})
    line = axes.axvline if axis == "x" else axes.axhline
    for _, start, _ in labels.regions[1:]:
        line(start - 0.5, color="black", linewidth=0.8)
    along = axes.xaxis if axis == "x" else axes.yaxis
    if count <= MAX_LABELLED_COLUMNS:
        along.set_ticks(list(range(count)), labels.columns, fontsize=size, **text)
        return []
    regions = _Names.of(along, labels.regions, at_start=True)
    along.set_ticks(regions.ticks, regions.names, fontsize=size, **text)
    return [regions]


def _label_regions_on_top(axes: Axes, labels: AxisLabels) -> _Names:
    top = axes.secondary_xaxis("top")
    regions = _Names.of(top.xaxis, labels.regions, at_start=False)
    top.set_xticks(regions.ticks, regions.names, fontsize=7)  # through `top`, which keeps them
    return regions


def _drawable(text: str) -> str:
    """`text` as written, for a title that names a file: the bytes that are not UTF-8
    (surrogate escapes, as Python reads them from the command line) as \\udcHH, control
    characters as their escapes (ESC as \\x1b), as messages show them, and '$' escaped.
    matplotlib's text renderer failed on the first with a TypeError, warned 'Glyph 27
    missing from font' on stderr for the second, and read `$...$` as mathematics
    (m$^$.sq was a ParseSyntaxException), after the passes had run."""
    return escaped(text).replace("$", r"\$")


def _draw_X(axes: Axes, X: np.ndarray, labels: AxisLabels,
            title: str = "") -> tuple[AxesImage, list[_Names]]:
    """A heatmap of X, and its names to thin once laid out: the row fields and regions."""
    image = axes.imshow(X, cmap=X_COLORS, vmin=-1, vmax=1, aspect="auto",
                        interpolation="nearest")
    axes.set_title(_drawable(title), fontsize=9)
    names = [*_label_columns(axes, labels, "x"), _label_regions_on_top(axes, labels)]
    fields = _Names.of(axes.yaxis, labels.fields, at_start=False)
    axes.set_yticks(fields.ticks, fields.names, fontsize=6)
    for _, start, _ in labels.fields[1:]:
        axes.axhline(start - 0.5, color="grey", linewidth=0.4)
    return image, [*names, fields]


def _draw_attention(axes: Axes, weights: np.ndarray,
                    labels: AxisLabels) -> tuple[AxesImage, list[_Names]]:
    """An untitled panel of one head's attention, columns named on both axes, and its names
    to thin once laid out (regions, where there are too many columns to name)."""
    image = axes.imshow(weights, cmap=ATTENTION_COLORS, vmin=0, vmax=1, aspect="equal",
                        interpolation="nearest")
    axes.set_title("", fontsize=9)
    names = [*_label_columns(axes, labels, "x"), *_label_columns(axes, labels, "y")]
    axes.set_xlabel("key column", fontsize=7)
    axes.set_ylabel("query column", fontsize=7)
    return image, names


def _x_width(columns: int) -> float:
    """Inches for a heatmap of X: room for the field names plus a thin strip per column."""
    return 2 + 0.07 * min(columns, MAX_LABELLED_COLUMNS)


def _figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _lay_out(figure: Figure, names: list[_Names]) -> None:
    """Lay the figure out once, then keep the `names` that fit where it puts them (its margins
    stay as wide as the names left out need: a second layout took a tenth of the time a FLEQ
    layer's pictures take). No draw lays it out again: a savefig with the layout engine drew
    the whole figure twice, once only to lay it out."""
    figure.get_layout_engine().execute(figure)
    renderer = figure.canvas.get_renderer()
    for each in names:
        each.thin(renderer)
    figure.set_layout_engine("none")


def _rgba(figure: Figure) -> Image.Image:
    """The picture on the figure's canvas, as drawn last (a copy: it is drawn over next)."""
    return Image.frombuffer("RGBA", figure.canvas.get_width_height(),
                            figure.canvas.buffer_rgba(), "raw", "RGBA", 0, 1).copy()


def _numpy(X: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(X, torch.Tensor):
        return X.detach().double().cpu().numpy()
    return np.asarray(X, dtype=np.float64)


def x_figure(X: torch.Tensor | np.ndarray, labels: AxisLabels, title: str) -> Figure:
    """A heatmap of one punchcard X (rows x columns), laid out."""
    _check_state(X, labels, "X")
    figure = _figure(_x_width(len(labels.columns)) + 1, 9)
    image, names = _draw_X(figure.add_subplot(), _numpy(X), labels, title)
    figure.colorbar(image, extend="both", shrink=0.5)
    _lay_out(figure, names)
    return figure


@dataclass(frozen=True)
class _LayerPanels:
    """A figure for the layers of one head count, and what changes from one such layer to
    the next: the images (X before, X after, then each head's attention) under their
    titles, and the figure's title. The rest (the tick labels, the colorbars) is the same."""

    figure: Figure
    images: list[AxesImage]
    title: Text
    names: list[_Names]
    """The names to thin once the figure is laid out (`lay_out`)."""
    head_title: Callable[[int, str], list[str]]
    """The lines of a head's panel title, from its number and role."""

    def show(self, trace: LayerTrace, layer: int, title: str) -> None:
        """Put the layer's X before and after, attention maps and titles in the panels."""
        heads = trace.attention.shape[0]
        attention = _numpy(trace.attention)
        panels = [(_numpy(trace.before), [f"X before layer {layer}"]),
                  (_numpy(trace.after), [f"X after layer {layer}"]),
                  *((attention[head], self.head_title(head, trace.head_roles[head]))
                    for head in range(heads))]
        for image, (data, lines) in zip(self.images, panels, strict=True):
            image.set_data(data)
            image.axes.title.set_text("\n".join(_drawable(line) for line in lines))
        many = f", {heads} heads" if heads > MAX_HEADS_IN_ROW else ""
        self.title.set_text(_drawable(f"{title}: layer {layer} ({trace.role}){many}"))

    def lay_out(self) -> None:
        """Lay the figure out around the titles shown now, which later ones keep."""
        _lay_out(self.figure, self.names)


def layer_figure(trace: LayerTrace, layer: int, labels: AxisLabels, title: str) -> Figure:
    """X before the layer, each head's attention (queries x keys), X after the layer; laid
    out."""
    panels = _layer_panels(trace, labels)
    panels.show(trace, layer, title)
    panels.lay_out()
    return panels.figure


def _head_title(head: int, role: str) -> list[str]:
    return [f"head {head}: {role}"]


def _grid_head_title(head: int, role: str) -> list[str]:
    """`head N: block` over the rest of the role, wrapped to the panel's width, in
    HEAD_GRID_TITLE_LINES lines (blank ones on top): one line, at 5 points, ran over the
    titles of the panels beside it."""
    block, _, rest = role.partition(": ") if ": " in role else ("", "", role)
    lines = [f"head {head}: {block}" if block else f"head {head}",
             *textwrap.wrap(rest, HEAD_GRID_TITLE_CHARACTERS,
                            max_lines=HEAD_GRID_TITLE_LINES - 1, placeholder=" ...")]
    return [""] * (HEAD_GRID_TITLE_LINES - len(lines)) + lines


def _layer_panels(trace: LayerTrace, labels: AxisLabels) -> _LayerPanels:
    """The untitled panels of `trace`'s layer: one per head beside X, or a grid below it."""
    heads, columns = trace.attention.shape[0], len(labels.columns)
    if heads > MAX_HEADS_IN_ROW:
        return _many_heads_panels(trace, labels)
    x_width, attention_width = _x_width(columns), 2.5 + 0.1 * min(columns, MAX_LABELLED_COLUMNS)
    figure = _figure(2 * x_width + heads * attention_width, 9)
    grid = figure.add_gridspec(1, heads + 2,
                               width_ratios=[x_width] + [attention_width] * heads + [x_width])
    before, names = _draw_X(figure.add_subplot(grid[0, 0]), _numpy(trace.before), labels)
    attention, heads_drawn = _numpy(trace.attention), []
    for head in range(heads):
        image, head_names = _draw_attention(figure.add_subplot(grid[0, 1 + head]),
                                            attention[head], labels)
        figure.colorbar(image, shrink=0.4)
        heads_drawn.append(image)
        names += head_names
    after, after_names = _draw_X(figure.add_subplot(grid[0, heads + 1]), _numpy(trace.after),
                                 labels)
    figure.colorbar(after, extend="both", shrink=0.5)
    return _LayerPanels(figure, [before, after, *heads_drawn], figure.suptitle("", fontsize=11),
                        names + after_names, _head_title)


def _many_heads_panels(trace: LayerTrace, labels: AxisLabels) -> _LayerPanels:
    """X before and after on top, then every head's attention as a small panel in a grid
    (titled by head number and role, no column names: they would not fit)."""
    heads = trace.attention.shape[0]
    rows = -(-heads // HEAD_GRID_COLUMNS)
    x_width = _x_width(len(labels.columns))
    figure = _figure(max(2 * x_width + 2, 1.6 * HEAD_GRID_COLUMNS), 9 + 1.6 * rows)
    top, bottom = figure.subfigures(2, 1, height_ratios=[9, 1.6 * rows])
    pair = top.subplots(1, 2)
    before, names = _draw_X(pair[0], _numpy(trace.before), labels)
    after, after_names = _draw_X(pair[1], _numpy(trace.after), labels)
    top.colorbar(after, ax=list(pair), extend="both", shrink=0.5)
    attention, heads_drawn = _numpy(trace.attention), []
    grid = bottom.subplots(rows, HEAD_GRID_COLUMNS, squeeze=False)
    for head, axes in enumerate(grid.flat):
        axes.set_axis_off()
        if head < heads:
            heads_drawn.append(axes.imshow(attention[head], cmap=ATTENTION_COLORS, vmin=0,
                                           vmax=1, aspect="equal", interpolation="nearest"))
            axes.set_title("", fontsize=5)
    return _LayerPanels(figure, [before, after, *heads_drawn], figure.suptitle("", fontsize=11),
                        names + after_names, _grid_head_title)


def save_x_picture(X: torch.Tensor | np.ndarray, labels: AxisLabels, path: str | Path,
                   title: str) -> Path:
    """Write the heatmap of X to `path`, a PNG file, and return `path`. A path that is not
    named .png is refused: matplotlib chose the format by the name, and for a directory DIR
    (no suffix) wrote DIR.png and returned DIR, a path that held no picture. The figure is
    drawn once, as `x_figure` laid it out (a savefig draws a laid-out figure twice)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"cannot write {shown_path(path)}: it is a directory")
    if path.suffix.lower() != ".png":
        raise InputError(f"{shown_path(path)}: the picture file must end in .png")
    figure = x_figure(X, labels, title)
    figure.canvas.draw()
    _rgba(figure).save(path, format="PNG")
    return path


PICTURE_BYTES_PER_CELL = 100
"""Host memory drawing the pass takes per entry of an n x n attention map, beyond the maps
themselves: the mask, each layer's scores and softmax, and matplotlib's float64 copies of
the image it draws (measured: 4.2 GB peak for 4 float32 heads at n = 6,007)."""


def check_pass_memory(model: LoopedTransformer, X: torch.Tensor, what: str,
                      instead: str, beside: int = 0) -> None:
    """InputError before a pass is traced (X: the loaded state, n its last axis) when its
    pictures cannot fit in the memory free now: every head's n x n attention map is kept for
    drawing, tens of GB at n = 20,000, and the command would end in the OOM killer (or
    thrash for minutes), silently. `what` asked for them; `instead` says what else to do;
    `beside`: bytes held while they are drawn (an animation's frames)."""
    from vm.transformer.memory import free_memory
    n, heads = X.shape[-1], sum(len(layer.head_roles) for layer in model.layers)
    needed = n * n * (heads * X.element_size() + PICTURE_BYTES_PER_CELL) + beside
    free = free_memory(torch.device("cpu"))
    if free is not None and needed > free:
        held = f" and {beside / 2**30:.1f} GiB held beside them" if beside else ""
        raise InputError(f"{what} at n = {n:,} columns needs about {needed / 2**30:.1f} GiB "
                         f"(each of the {heads} heads' n x n attention maps{held}), more than "
                         f"the {free / 2**30:.1f} GiB free: draw a smaller program, or "
                         f"{instead}")


def _check_state(X: object, labels: AxisLabels, what: str) -> None:
    """InputError unless X is one punchcard (rows, n) of the shape `labels` names: another
    shape failed deep in matplotlib or torch (an IndexError, a size mismatch), or was drawn
    under the wrong names."""
    shape = tuple(getattr(X, "shape", ()))
    expected = (labels.fields[-1][2] if labels.fields else 0, len(labels.columns))
    if shape != expected:
        raise InputError(f"{what} must be one punchcard of {expected[0]} rows x "
                         f"{expected[1]} columns, as the labels name, got shape {shape}")


def save_pass_pictures(model: LoopedTransformer, X: torch.Tensor, labels: AxisLabels,
                       directory: str | Path, step: int, title: str,
                       layers: list[int] | None = None,
                       progress: Callable[[int], None] | None = None,
                       tracer: Callable[[torch.Tensor], list[LayerTrace]] | None = None
                       ) -> list[Path]:
    """Run one pass on X (rows, n), the pass after `step`, and write one PNG per layer (or
    per chosen layer), `step{K}_layer{L}.png`: that layer's heads and X before and after.
    `progress` is called with the count of pictures written (a FLEQ layer of 200 heads
    takes seconds to draw). `tracer` runs the pass (default: `trace_pass`, unchecked): a
    checked mode's own checks the pass drawn, and nothing is drawn when it refuses it.
    The layers of one head count are drawn in one figure, built and laid out once, with only
    the images and titles redrawn for each (`_Blitted`): a FLEQ layer took seconds to draw
    whole, most of them measuring and drawing the same tick labels again."""
    _check_state(X, labels, "X")
    if not isinstance(X, torch.Tensor) or X.dtype != model.dtype or X.shape != (model.rows,
                                                                               model.columns):
        raise InputError(f"X must be a {model.rows} x {model.columns} tensor of the model's "
                         f"{model.dtype}, got {getattr(X, 'dtype', type(X).__name__)} of "
                         f"shape {tuple(X.shape)}")
    if not is_whole_number(step) or step < 0:  # it names the files: step-005_layer0.png
        raise InputError(f"step must be a whole number, 0 or more, got {step!r}")
    chosen = range(len(model.layers)) if layers is None else layers
    if any(not is_whole_number(layer) or not 0 <= layer < len(model.layers)
           for layer in chosen):
        raise InputError(f"layers must be layer numbers 0 to {len(model.layers) - 1}, got "
                         f"{list(chosen)!r:.80}")
    traces = trace_pass(model, X) if tracer is None else tracer(X)
    directory = Path(directory)  # a str failed on .mkdir once the pass had run
    directory.mkdir(parents=True, exist_ok=True)
    alike: dict[int, list[int]] = {}  # layers by head count, each count drawn in one figure
    for layer in chosen:
        alike.setdefault(traces[layer].attention.shape[0], []).append(layer)
    paths: dict[int, Path] = {}
    for layers_alike in alike.values():
        panels, blitted = _layer_panels(traces[layers_alike[0]], labels), None
        for layer in layers_alike:
            if progress is not None:
                progress(len(paths))
            panels.show(traces[layer], layer, title)
            if blitted is None:  # laid out with the first layer's titles
                panels.lay_out()
                blitted = _Blitted(panels.figure, panels.images)
            paths[layer] = directory / f"step{step:04d}_layer{layer}.png"
            blitted.picture().save(paths[layer], format="PNG")
    return [paths[layer] for layer in chosen]


def save_x_animation(frames: list[tuple[str, np.ndarray]], labels: AxisLabels, path: Path,
                     fps: float = 4, progress: Callable[[int], None] | None = None) -> Path:
    """An animated GIF of X, one frame per (title, X) pair, written by pillow (which comes
    with matplotlib) once every frame is drawn: a failure or Ctrl-C part-way writes nothing.
    `progress` is called with the count of frames drawn."""
    if not frames:
        raise InputError("an animation needs at least one frame")
    if isinstance(fps, bool) or not (isinstance(fps, (int, float))
                                     and MIN_FPS <= fps <= MAX_FPS):  # NaN fails too
        raise InputError(f"fps must be {MIN_FPS} to {MAX_FPS}, got {fps!r}")
    for index, (_, X) in enumerate(frames):
        _check_state(X, labels, f"frame {index}")
    animation, drawn = _Animation(frames[0][1], labels, frames[0][0]), []
    for title, X in frames:
        if progress is not None:
            progress(len(drawn))
        # a GIF frame's 256 colours, chosen now: a quarter of the memory, and the time it
        # takes is shown in the progress, not spent after it in silence
        drawn.append(animation.picture(X, title).convert("RGB").convert(
            "P", palette=Image.Palette.ADAPTIVE))
    drawn[0].save(path, format="GIF", save_all=True, append_images=drawn[1:],
                  duration=int(1000 / fps), loop=0)
    return path


class _Blitted:
    """A laid-out figure (`_lay_out`) drawn whole once, then redrawn by only the artists that
    change: `images`, the titles and borders over them, and the figure's title. The rest
    (hundreds of tick labels, the colorbars) is copied under them: a full draw measured and
    drew every tick label again, a third of a second for X alone and seconds for a FLEQ
    layer's panels."""

    def __init__(self, figure: Figure, images: list[AxesImage]) -> None:
        self.figure = figure
        changing: list[Artist] = list(figure.texts)  # its title, when it has one
        for image in images:
            axes = image.axes
            framed = [axes, *axes.child_axes] if axes.axison and axes.get_frame_on() else []
            changing += [image, axes.title, *axes.lines,  # the region names' axis on top
                         *(spine for each in framed for spine in each.spines.values())]
        self.changing = sorted(changing, key=lambda artist: artist.zorder)
        for artist in self.changing:  # drawn over the image: they are drawn after it
            artist.set_animated(True)
        figure.canvas.draw()
        self.background = figure.canvas.copy_from_bbox(figure.bbox)

    def picture(self) -> Image.Image:
        """The figure as it is now (RGBA), as a full draw of it makes it."""
        canvas = self.figure.canvas
        canvas.restore_region(self.background)
        for artist in self.changing:
            self.figure.draw_artist(artist)
        return _rgba(self.figure)


class _Animation:
    """The frames of a GIF of X: one figure, as `x_figure` draws it, in which only X's
    image and the title change from frame to frame (redrawing the whole figure took a
    third of a second a frame, minutes for a thousand)."""

    def __init__(self, X: torch.Tensor | np.ndarray, labels: AxisLabels, title: str) -> None:
        figure = x_figure(X, labels, title)
        self.axes = figure.axes[0]
        self.image = self.axes.images[0]
        self.blitted = _Blitted(figure, [self.image])

    def picture(self, X: torch.Tensor | np.ndarray, title: str) -> Image.Image:
        """The picture of X under `title` (RGBA), as a full draw of the figure makes it."""
        self.image.set_data(_numpy(X))
        self.axes.title.set_text(_drawable(title))
        return self.blitted.picture()
