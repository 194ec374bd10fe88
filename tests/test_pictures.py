"""Pictures: labelled axes, one PNG per layer, an animated GIF, and no display needed."""

from __future__ import annotations

import io
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vm.isa import FLEQ
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.machines.subleq.punchcard import geometry_for
from assembler.subleq import assemble, assemble_file
from vm.cli import main
from vm.isa import for_program
from vm.runtime.executor import TransformerExecutor
from vm.transformer.layers import trace_pass
from vm.tools import pictures
from vm.tools.pictures import axis_labels, layer_figure, x_figure

ROOT = Path(__file__).resolve().parents[1]
COUNTDOWN = """\
.data
x:      2
one:    1
.code
loop:   subleq one, x, done
        goto loop
done:   halt
"""


@pytest.fixture(scope="module")
def countdown():
    program = assemble(COUNTDOWN, "countdown.sq")
    geometry = geometry_for(program)
    executor = TransformerExecutor(geometry)
    return program, executor, labels_for(program, geometry, executor.layout)


def labels_for(program, geometry, layout):
    return axis_labels(*for_program(program).column_names(program, geometry, layout), layout)


def tick_names(axis) -> list[str]:
    return [label.get_text() for label in axis.get_ticklabels()]


def test_axis_labels_name_columns_by_program_and_rows_by_field():
    program = assemble_file(ROOT / "programs" / "subleq" / "factorial.sq")
    geometry = geometry_for(program)
    labels = labels_for(program, geometry, TransformerExecutor(geometry).layout)
    assert labels.columns[:5] == ["cpu", "@zero", "@minus_one", "n", "fact"]
    assert labels.columns[11:15] == ["i0", "i1", "i2", "test"]
    assert labels.columns[-2:] == ["done", "EOF"]
    assert [name for name, _, _ in labels.regions] == ["scratch", "memory", "instructions"]
    assert labels.fields[:4] == [("instr_a", 0, 6), ("instr_b", 6, 12), ("instr_c", 12, 18),
                                 ("mem", 18, 34)]
    assert labels.fields[-1] == ("wbuf", 120, 136)


REFUSED_DRAWINGS = {
    "no frames": (lambda X, model, labels, out: pictures.save_x_animation(
        [], labels, out / "a.gif"), "at least one frame"),  # an IndexError
    "a frame of another shape": (lambda X, model, labels, out: pictures.save_x_animation(
        [("X", X), ("X", X[:3, :3])], labels, out / "a.gif"), "frame 1 must be one punchcard"),
    "zero frames a second": (lambda X, model, labels, out: pictures.save_x_animation(
        [("X", X)], labels, out / "a.gif", fps=0), "fps"),  # a ZeroDivisionError
    "NaN frames a second": (lambda X, model, labels, out: pictures.save_x_animation(
        [("X", X)], labels, out / "a.gif", fps=float("nan")), "fps"),
    "a frame a thousand seconds": (lambda X, model, labels, out: pictures.save_x_animation(
        [("X", X)], labels, out / "a.gif", fps=0.001), "fps must be"),  # an OverflowError
    "True frames a second": (lambda X, model, labels, out: pictures.save_x_animation(
        [("X", X)], labels, out / "a.gif", fps=True), "fps must be"),  # ran at 1
    "a batch of X": (lambda X, model, labels, out: pictures.save_pass_pictures(
        model, X[None], labels, out, 0, "t"), "one punchcard"),  # an IndexError
    "float64 X": (lambda X, model, labels, out: pictures.save_pass_pictures(
        model, X.double(), labels, out, 0, "t"), "the model's torch.float32"),
    "a layer past the last": (lambda X, model, labels, out: pictures.save_pass_pictures(
        model, X, labels, out, 0, "t", layers=[9]), "layer numbers 0 to 3"),
    "a negative step": (lambda X, model, labels, out: pictures.save_pass_pictures(
        model, X, labels, out, -5, "t"), "step must be"),  # it wrote step-005_layer0.png
    "a heatmap of another shape": (lambda X, model, labels, out: pictures.save_x_picture(
        X[:, :5], labels, out / "x.png", "t"), "one punchcard"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_DRAWINGS))
def test_drawing_what_the_labels_do_not_name_is_refused(case, countdown, tmp_path):
    from vm.common.errors import InputError
    program, executor, labels = countdown
    draw, message = REFUSED_DRAWINGS[case]
    out = tmp_path / "out"
    with pytest.raises(InputError, match=message):
        draw(executor.load([program])[0], executor.model, labels, out)
    assert not out.exists()


def test_a_heatmap_is_written_to_the_png_path_it_returns(countdown, tmp_path):
    """Given a directory DIR, save_x_picture wrote DIR.png and returned DIR; given x.jpg,
    a JPEG: matplotlib chose the file and format by the name."""
    from vm.common.errors import InputError
    program, executor, labels = countdown
    X = executor.load([program])[0]
    (tmp_path / "dir").mkdir()
    with pytest.raises(InputError, match=f"cannot write {tmp_path / 'dir'}: it is a directory"):
        pictures.save_x_picture(X, labels, tmp_path / "dir", "X")
    with pytest.raises(InputError, match="x.jpg: the picture file must end in .png"):
        pictures.save_x_picture(X, labels, tmp_path / "x.jpg", "X")
    assert [path.name for path in tmp_path.iterdir()] == ["dir"]
    assert list((tmp_path / "dir").iterdir()) == []
    written = pictures.save_x_picture(X, labels, str(tmp_path / "x.png"), "X")
    assert written == tmp_path / "x.png"
    with Image.open(written) as png:
        assert png.format == "PNG"


def test_pass_pictures_go_to_a_directory_named_by_a_string(countdown, tmp_path):
    """A str directory failed with an AttributeError ('str' has no mkdir) once the pass had
    been traced."""
    program, executor, labels = countdown
    X = executor.load([program])[0]
    written = pictures.save_pass_pictures(executor.model, X, labels, str(tmp_path / "d"), 3,
                                          "countdown", layers=[2])
    assert written == [tmp_path / "d" / "step0003_layer2.png"] and written[0].is_file()


def test_layer_figure_shows_x_before_each_head_and_x_after(countdown):
    program, executor, labels = countdown
    traces = trace_pass(executor.model, executor.load([program])[0])
    figure = layer_figure(traces[1], 1, labels, "countdown")
    titles = [axes.get_title() for axes in figure.axes if axes.get_title()]
    assert titles == ["X before layer 1", "head 0: read mem[a]", "head 1: read mem[b]",
                      "X after layer 1"]
    before, head = figure.axes[0], figure.axes[1]
    assert tick_names(before.xaxis) == labels.columns
    assert tick_names(before.yaxis)[:4] == ["instr_a", "instr_b", "instr_c", "mem"]
    assert tick_names(head.yaxis) == labels.columns
    picture = head.images[0].get_array()
    assert picture.shape == (len(labels.columns),) * 2
    assert picture[0].argmax() == 4, "the cpu column reads mem[a] = one (column 4)"
    assert len([axes for axes in layer_figure(traces[2], 2, labels, "").axes
                if axes.get_title()]) == 2, "the subtract layer has no heads"


def test_x_figure_is_the_punchcard(countdown):
    program, executor, labels = countdown
    X = executor.load([program])[0]
    image = x_figure(X, labels, "X").axes[0].images[0].get_array()
    assert image.shape == tuple(X.shape) and (image == X.double().numpy()).all()


def test_a_control_character_in_a_title_is_drawn_as_its_escape(countdown, recwarn):
    """A program named with ESC [31m drew the raw character in the title, and matplotlib
    warned 'Glyph 27 (\\x1b) missing from font(s)' on stderr while drawing it."""
    program, executor, labels = countdown
    figure = x_figure(executor.load([program])[0], labels, "e\x1b[31m.sq: X at step 0")
    figure.savefig(io.BytesIO(), format="png")
    assert figure.axes[0].get_title() == r"e\x1b[31m.sq: X at step 0"
    assert not [warning for warning in recwarn if "Glyph" in str(warning.message)]


def test_trace_command_writes_layer_pngs_and_a_gif_without_pyplot_or_a_display(
        capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)  # importing it now fails
    monkeypatch.delenv("DISPLAY", raising=False)
    source = tmp_path / "countdown.sq"
    source.write_text(COUNTDOWN)
    assert main(["trace", str(source), "--step", "2", "--png", str(tmp_path / "png"),
                 "--gif", str(tmp_path / "png" / "x.gif"), "--steps", "10"]) == 0
    names = sorted(path.name for path in (tmp_path / "png").iterdir() if path.suffix == ".png")
    assert names == [f"step0002_layer{layer}.png" for layer in range(4)]
    widths = []
    for name in names:
        with Image.open(tmp_path / "png" / name) as png:
            assert png.format == "PNG"
            widths.append(png.width)
    assert widths[1] > widths[0] > widths[2], "one panel per head: 1, 2, 0 heads"
    with Image.open(tmp_path / "png" / "x.gif") as gif:  # in the directory --png made
        assert gif.n_frames == 3, "steps 2, 3 and 4, where the countdown reaches EOF"
    assert f"wrote {tmp_path / 'png' / 'x.gif'} (3 frames" in capsys.readouterr().out


def test_trace_png_obeys_max_seconds_and_leaves_no_picture(capsys, monkeypatch, tmp_path):
    drawn, picture = [], pictures._Blitted.picture

    def slow_picture(blitted):
        time.sleep(1.0)
        drawn.append(blitted)
        return picture(blitted)
    monkeypatch.setattr(pictures._Blitted, "picture", slow_picture)
    source = tmp_path / "countdown.sq"
    source.write_text(COUNTDOWN)
    assert main(["trace", str(source), "--png", str(tmp_path / "png"),
                 "--max-seconds", "1.5"]) == 1
    stopped = re.search(r"after (\d+) (layers?) drawn, before every layer was drawn",
                        capsys.readouterr().err)
    assert stopped and (stopped[2] == "layer") == (stopped[1] == "1")
    assert len(drawn) < 4 and not (tmp_path / "png").exists()


def test_trace_command_draws_a_standard_subleq_image(capsys, tmp_path):
    image = tmp_path / "two_jumps.dec"
    image.write_text("7 7 3   7 7 -1   0 0")  # 0: mem[7] = 0, jump to 3; 3: jump to -1: halt
    assert main(["trace", str(image), "--bits", "8", "--png", str(tmp_path / "png"),
                 "--gif", str(tmp_path / "x.gif"), "--steps", "10"]) == 0
    names = sorted(path.name for path in (tmp_path / "png").iterdir())
    assert names == [f"step0000_layer{layer}.png" for layer in range(5)]
    with Image.open(tmp_path / "png" / names[0]) as png:
        assert png.format == "PNG"
    with Image.open(tmp_path / "x.gif") as gif:
        assert gif.n_frames == 3, "steps 0, 1 and 2, where the image has halted"
    assert f"wrote {tmp_path / 'x.gif'} (3 frames" in capsys.readouterr().out
    echo = str(ROOT / "programs" / "vsubleq" / "echo.dec")
    assert main(["trace", echo, "--input", "hi", "--step", "4", "--steps", "2",
                 "--gif", str(tmp_path / "echo.gif")]) == 0  # a GIF: five PNGs take seconds
    with Image.open(tmp_path / "echo.gif") as gif:
        assert gif.n_frames == 3, "steps 4, 5 and 6 (echo halts after 14 steps)"


def test_trace_of_a_standard_subleq_image_checks_its_passes_when_asked(capsys, tmp_path):
    echo = str(ROOT / "programs" / "vsubleq" / "echo.dec")
    assert main(["trace", echo, "--input", "hi", "--step", "2", "--checked", "--steps", "1",
                 "--gif", str(tmp_path / "ok.gif")]) == 0  # a checked --png: in the test below
    assert (tmp_path / "ok.gif").is_file()
    assert main(["trace", echo, "--input", "hi", "--step", "2", "--checked",
                 "--temperature", "1", "--png", str(tmp_path / "cold")]) == 1
    assert "precision error at step 0" in capsys.readouterr().err
    assert not (tmp_path / "cold").exists()


@pytest.mark.parametrize("program", ["subleq/gcd.sq", "vsubleq/echo.dec"])
def test_trace_png_refuses_the_pass_the_checked_mode_refuses(program, capsys, tmp_path):
    """At --step 0 no pass ran before the drawing, whose own pass is traced unchecked: the
    pictures of a pass off its levels (temperature 1) were written at exit 0."""
    source = str(ROOT / "programs" / program)
    assert main(["trace", source, "--temperature", "1", "--png", str(tmp_path / "cold")]) == 1
    assert "precision error at step 0, layer 0" in capsys.readouterr().err
    assert not (tmp_path / "cold").exists()


@pytest.fixture
def blank_layer_pictures(monkeypatch):
    """Each layer's picture as a blank figure, for tests about the passes drawn rather than
    the drawing: a labelled layer picture takes a second of matplotlib."""
    def blank(*args):
        figure = pictures._figure(1, 1)
        figure.add_subplot()  # something to lay out
        return pictures._LayerPanels(figure, [], figure.suptitle(""), [], pictures._head_title)
    monkeypatch.setattr(pictures, "_layer_panels", blank)
    monkeypatch.setattr(pictures._LayerPanels, "show", lambda *args: None)


def test_checking_the_drawn_pass_of_an_image_leaves_the_animation_alone(
        blank_layer_pictures, capsys, tmp_path):
    image = tmp_path / "two_jumps.dec"
    image.write_text("7 7 3   7 7 -1   0 0")
    for name, pictures_too in (("alone.gif", []), ("beside.gif", ["--png", str(tmp_path)])):
        assert main(["trace", str(image), "--bits", "8", "--checked", "--gif",
                     str(tmp_path / name), *pictures_too]) == 0
    with Image.open(tmp_path / "alone.gif") as alone:
        assert alone.n_frames == 3, "steps 0, 1 and 2, where the image has halted"
    assert (tmp_path / "alone.gif").read_bytes() == (tmp_path / "beside.gif").read_bytes()


@pytest.mark.parametrize("option, kind", [("--png", "directory"), ("--gif", "file")])
def test_trace_refuses_an_empty_output_path(option, kind, capsys, tmp_path):
    """--gif '' read as no --gif: beside --png it drew the pictures and no animation, exit 0."""
    other = ["--gif", str(tmp_path / "x.gif")] if option == "--png" else ["--png", str(tmp_path)]
    with pytest.raises(SystemExit) as stopped:
        main(["trace", str(ROOT / "programs" / "subleq" / "gcd.sq"), option, "", *other])
    assert stopped.value.code == 2
    assert f"argument {option}: an empty path names no {kind}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_trace_refuses_an_animation_path_that_names_a_directory(capsys, tmp_path):
    """`--gif out.gif/` wrote a file out.gif, where the '/' names a directory (asm -o
    refuses it too)."""
    with pytest.raises(SystemExit) as stopped:
        main(["trace", str(ROOT / "programs" / "subleq" / "gcd.sq"), "--gif",
              f"{tmp_path / 'out.gif'}/", "--steps", "1"])
    assert stopped.value.code == 2
    assert "ends in '/', which names a directory; give a file" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_trace_refuses_pictures_and_animation_at_one_path(capsys, tmp_path):
    """--png P --gif P made the directory P, wrote the pictures into it, and only then
    failed to write the animation over it (exit 2, half the output written)."""
    shared = tmp_path / "x.gif"
    assert main(["trace", str(ROOT / "programs" / "subleq" / "gcd.sq"), "--png", str(shared),
                 "--gif", str(tmp_path / "." / "x.gif")]) == 2
    assert "name the same path" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", [b"count\xffdown.sq", b"m$^$.sq", b"m$\\frac$.sq"])
def test_a_program_name_matplotlib_would_misread_is_drawn(name, capsys, tmp_path):
    """Python reads the byte 0xff of a file name as the surrogate \\udcff, on which
    matplotlib's text renderer failed with a TypeError, and it read $...$ as mathematics
    (a ParseSyntaxException), once the passes had run."""
    source = tmp_path / os.fsdecode(name)
    source.write_text(COUNTDOWN)
    assert main(["trace", str(source), "--gif", str(tmp_path / "x.gif"), "--steps", "1"]) == 0
    assert "(2 frames" in capsys.readouterr().out


def test_trace_refuses_steps_without_an_animation(capsys, tmp_path):
    """--steps without --gif was ignored in silence: the pictures of one pass, exit 0."""
    assert main(["trace", str(ROOT / "programs" / "subleq" / "gcd.sq"), "--png",
                 str(tmp_path / "png"), "--steps", "5"]) == 2
    assert "--steps sets how many steps the animation covers" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_trace_command_rejects_bad_requests(capsys, tmp_path):
    source = str(ROOT / "programs" / "subleq" / "factorial.sq")
    assert main(["trace", source]) == 2
    assert main(["trace", source, "--gif", str(tmp_path / "x.png")]) == 2
    assert main(["trace", source, "--step", "-1", "--png", str(tmp_path)]) == 2
    (tmp_path / "file").write_text("")
    assert main(["trace", source, "--png", str(tmp_path / "file")]) == 2
    assert main(["trace", source, "--input", "x", "--png", str(tmp_path)]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert errors == ["ltvm: error: nothing to draw: give --png DIR and/or --gif FILE",
                      f"ltvm: error: {tmp_path / 'x.png'}: the animation file must end in .gif",
                      "ltvm: error: --step must be at least 0, got -1",
                      f"ltvm: error: cannot write {tmp_path / 'file'}: it exists and is not a "
                      "directory",
                      "ltvm: error: --input applies to standard SUBLEQ images (.dec, .vsq), "
                      "not SUBLEQ"]


DOUBLE_INVERT = """\
.d 2
.data
v:      .vector [1.0, 2.0]
w:      .zeros 2x1
x:      4.0
y:      0.0
.code
top:    w = add(v, v)
        y = inv(x)
        halt
"""


@pytest.fixture(scope="module")
def double_invert():
    program = FLEQ.assemble_text(DOUBLE_INVERT, "double_invert.fleq",
                                 parameters={"inv": {"terms": 12}})
    geometry = fleq_geometry_for(program)
    executor = TransformerExecutor(geometry)
    return program, geometry, executor, labels_for(program, geometry, executor.layout)


def test_fleq_columns_are_named_by_block_variable_and_label(double_invert):
    program, geometry, executor, labels = double_invert
    assert len(labels.columns) == geometry.columns
    assert labels.columns[:7] == ["control", "add.A0", "add.A1", "add.B0", "add.B1", "add.C0",
                                  "add.C1"]
    inv = geometry.block_columns([b.name for b in geometry.blocks].index("inv"))
    assert labels.columns[inv.start] == "inv.A0"
    assert ("inv", inv.start, inv.stop) in labels.regions
    memory = labels.columns[geometry.memory_start:geometry.instruction_start]
    for name, variable in program.variables.items():
        assert memory[2 * variable.cell:2 * variable.cell + 2] == [f"{name}.0", f"{name}.1"]
    assert labels.columns[geometry.instruction_start:] == ["top", "i1", "i2", "EOF"]
    assert [name for name, _, _ in labels.regions] == ["control", "add", "inv", "memory",
                                                       "instructions"]


def test_a_layer_with_many_heads_draws_them_in_a_grid(double_invert):
    program, _, executor, labels = double_invert
    traces = trace_pass(executor.model, executor.load([program])[0])
    layer = max(range(len(traces)), key=lambda index: traces[index].attention.shape[0])
    heads = traces[layer].attention.shape[0]
    assert heads > 8, "inv with 12 terms: one head per sigmoid"
    figure = layer_figure(traces[layer], layer, labels, "double_invert")
    panels = [axes for axes in figure.axes
              if axes.images and axes.get_title().lstrip().startswith("head")]
    assert len(panels) == heads
    assert (panels[0].images[0].get_array() == traces[layer].attention[0].numpy()).all()
    assert tick_names(figure.axes[0].xaxis) == labels.columns


def overlapping(texts) -> list[tuple[str, str]]:
    """The pairs of drawn texts (tick labels, titles) whose extents overlap, as drawn last."""
    renderer = texts[0].get_figure(root=True).canvas.get_renderer()
    extents = [(text.get_text(), text.get_window_extent(renderer)) for text in texts]
    return [(first, second) for index, (first, extent) in enumerate(extents)
            for second, other in extents[index + 1:] if extent.overlaps(other)]


def test_fleq_row_fields_are_named_where_they_fit(double_invert):
    """A FLEQ layout has about a hundred row fields, most one row high: all named, at 6
    points, they were drawn over each other into one black block."""
    program, _, executor, labels = double_invert
    figure = x_figure(executor.load([program])[0], labels, "double_invert")
    figure.canvas.draw()
    rows = figure.axes[0].yaxis.get_ticklabels()
    assert len(labels.fields) > 60 and 20 < len(rows) < len(labels.fields)
    assert overlapping(rows) == []
    widest = max(labels.fields, key=lambda field: field[2] - field[1])[0]
    assert widest in tick_names(figure.axes[0].yaxis)


def test_a_grid_of_heads_is_titled_without_overlap(double_invert):
    """Each small panel's title, 'head N: ' and the whole role in one line at 5 points, ran
    over its neighbours' into one unreadable line (roles as long as newton_reciprocal's)."""
    import dataclasses

    program, _, executor, labels = double_invert
    traces = trace_pass(executor.model, executor.load([program])[0])
    layer = max(range(len(traces)), key=lambda index: traces[index].attention.shape[0])
    heads = traces[layer].attention.shape[0]
    roles = [f"mul: level {head // 4}: linearized softmax, +{head % 4} eps"
             for head in range(heads)]
    trace = dataclasses.replace(traces[layer], head_roles=roles)
    figure = layer_figure(trace, layer, labels, "double_invert")
    figure.canvas.draw()
    titles = [axes.title for axes in figure.axes if axes.get_title().lstrip().startswith("head")]
    assert len(titles) == heads > pictures.MAX_HEADS_IN_ROW
    assert overlapping(titles) == []
    assert titles[1].get_text().split("\n")[-2:] == ["head 1: mul",
                                                     "level 0: linearized softmax, +1 eps"]


def test_a_heatmap_is_drawn_once(countdown, monkeypatch, tmp_path):
    """savefig lays a figure out by a draw of its own before drawing it: the heatmap of
    `show X` was drawn twice, a third of a second each time for a FLEQ program."""
    from matplotlib.figure import Figure

    program, executor, labels = countdown
    draws, draw = [], Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda figure, renderer: draws.append(figure) or
                        draw(figure, renderer))
    written = pictures.save_x_picture(executor.load([program])[0], labels, tmp_path / "x.png",
                                      "X")
    assert len(draws) == 1
    full = io.BytesIO()
    draws[0].savefig(full, format="png")
    with Image.open(written) as drawn, Image.open(full) as whole:
        assert (np.asarray(drawn) == np.asarray(whole)).all()


def test_trace_command_draws_a_fleq_program(capsys, tmp_path):
    """A program of one block (few layers and columns): every picture is a second of
    matplotlib, and double_invert's 13 layers made this the slowest test of the file."""
    doubled = DOUBLE_INVERT.replace("        y = inv(x)\n", "")
    source = tmp_path / "double.fleq"
    source.write_text(doubled)
    assert main(["trace", str(source), "--step", "1",
                 "--png", str(tmp_path / "png"), "--gif", str(tmp_path / "x.gif")]) == 0
    layers = len(TransformerExecutor(fleq_geometry_for(FLEQ.assemble_text(doubled))
                                     ).model.layers)
    names = sorted(path.name for path in (tmp_path / "png").iterdir())
    assert set(names) == {f"step0001_layer{layer}.png" for layer in range(layers)}
    assert len(names) == layers
    for name in names:
        with Image.open(tmp_path / "png" / name) as png:
            assert png.format == "PNG"
    with Image.open(tmp_path / "x.gif") as gif:
        assert gif.n_frames == 2, "steps 1 (halt) and 2, where the program reaches EOF"


def test_trace_pictures_are_all_written_or_none(capsys, monkeypatch, tmp_path):
    """A failure while drawing the third layer used to leave the first two behind."""
    import vm.tools.pictures as pictures

    shown = pictures._LayerPanels.show

    def failing(panels, trace, layer, *rest):
        if layer == 2:
            raise OSError(28, "No space left on device")
        return shown(panels, trace, layer, *rest)
    monkeypatch.setattr(pictures._LayerPanels, "show", failing)
    source = str(ROOT / "programs" / "subleq" / "factorial.sq")
    assert main(["trace", source, "--png", str(tmp_path / "png")]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert not (tmp_path / "png").exists()


def test_trace_pictures_are_not_moved_in_when_one_name_is_a_directory(capsys, tmp_path):
    """A directory named like layer 2's picture used to stop the move after layers 0 and 1,
    with an error naming the hidden staging folder."""
    (tmp_path / "png" / "step0000_layer2.png").mkdir(parents=True)
    source = str(ROOT / "programs" / "subleq" / "factorial.sq")
    assert main(["trace", source, "--png", str(tmp_path / "png")]) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # after any progress lines of a slow run
    assert last == (f"ltvm: error: cannot write {tmp_path / 'png' / 'step0000_layer2.png'}: "
                    f"it is a directory")
    assert [path.name for path in (tmp_path / "png").iterdir()] == ["step0000_layer2.png"]


def test_trace_does_not_create_missing_parent_directories(capsys, tmp_path):
    source = str(ROOT / "programs" / "subleq" / "factorial.sq")
    assert main(["trace", source, "--png", str(tmp_path / "missing" / "png")]) == 2
    assert f"directory {tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()


def test_trace_obeys_max_seconds_on_a_program_that_never_halts(capsys, tmp_path):
    """`--step` far past a loop used to run until killed."""
    source = tmp_path / "loop.sq"
    source.write_text(".data\nz: 0\n.code\nloop: subleq z, z, loop\n")
    assert main(["trace", str(source), "--step", str(10 ** 11), "--png", str(tmp_path / "p"),
                 "--max-seconds", "0.5"]) == 1
    assert "stopped by --max-seconds 0.5" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_trace_of_an_image_obeys_max_seconds_while_sizing_its_output_tape(capsys, tmp_path):
    """The reference run that sizes the tape for --step K used to run K steps in silence,
    past --max-seconds (10^8 steps: minutes)."""
    image = tmp_path / "loop.vsq"
    image.write_text("loop: goto loop\n")
    started = time.monotonic()
    assert main(["trace", str(image), "--step", str(10 ** 9), "--gif", str(tmp_path / "x.gif"),
                 "--max-seconds", "0.5"]) == 1
    assert time.monotonic() - started < 30
    assert "reference steps sizing the output tape" in capsys.readouterr().err
    assert not (tmp_path / "x.gif").exists()


def test_trace_gif_shows_progress_and_obeys_max_seconds(capsys, tmp_path):
    """The GIF's passes and frames had neither: --steps 1000 drew for minutes with no word
    (a wide image's passes take a second each) and ran past --max-seconds."""
    source = tmp_path / "loop.sq"
    source.write_text(".data\nz: 0\n.code\nloop: subleq z, z, loop\n")
    started = time.monotonic()
    assert main(["trace", str(source), "--gif", str(tmp_path / "x.gif"), "--steps", "1000",
                 "--max-seconds", "2"]) == 1
    assert time.monotonic() - started < 30
    assert "before the animation was written" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [source]


def test_trace_gif_refuses_frames_beyond_free_memory_before_any_pass(capsys, monkeypatch,
                                                                      tmp_path):
    """Every frame keeps its X: 1,000 of a 2^15-word image's (50 MiB each) ended in the OOM
    killer instead of a message."""
    import vm.transformer.memory

    monkeypatch.setattr(vm.transformer.memory, "free_memory", lambda device: 100 * 2 ** 20)
    source = str(ROOT / "programs" / "subleq" / "factorial.sq")
    assert main(["trace", source, "--gif", str(tmp_path / "x.gif"), "--steps", "1000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltvm: error: --gif over 1,000 steps needs about ") and \
        err.endswith("more than the 0.1 GiB free: lower --steps\n")
    assert main(["trace", source, "--gif", str(tmp_path / "x.gif"), "--steps", "5"]) == 0
    # 1,001 frames of 860 x 900 one-byte pixels (the frames are kept in a 256-colour
    # palette), twice over while pillow writes them, fit in 2.5 GiB: they were counted as
    # RGBA, four bytes a pixel, and refused
    monkeypatch.setattr(vm.transformer.memory, "free_memory", lambda device: 5 * 2 ** 29)
    countdown = tmp_path / "countdown.sq"  # at EOF after 4 steps: 5 frames drawn
    countdown.write_text(COUNTDOWN)
    assert main(["trace", str(countdown), "--gif", str(tmp_path / "x.gif"),
                 "--steps", "1000"]) == 0


def test_a_gif_past_max_seconds_before_its_first_frame_is_a_clean_stop(countdown, tmp_path):
    """The limit checked before frame 0 was raised inside matplotlib's GIF writer, whose
    cleanup then failed with an IndexError (no frames) that replaced the message."""
    import argparse

    from vm.cli.trace import _write_outputs
    from vm.tools.progress import TimeLimitExceeded
    program, executor, labels = countdown
    X = executor.load([program])[0]
    args = argparse.Namespace(png=None, gif=str(tmp_path / "x.gif"), step=0, steps=2,
                              max_seconds=1.0, started=time.monotonic() - 10)
    with pytest.raises(TimeLimitExceeded, match="before the animation was written"):
        _write_outputs(args, labels, "countdown", executor.model, X, None, [("step 0", X)])
    assert list(tmp_path.iterdir()) == []


def test_trace_refuses_unwritable_outputs_before_running_a_pass(capsys, monkeypatch, tmp_path):
    """A link to nothing as --png was 'cannot create directory: File exists'; a --gif in a
    missing directory was refused only after every pass of the animation had run."""
    import vm.runtime.executor as executor

    monkeypatch.setattr(executor, "TransformerExecutor", None)  # building it now fails
    source = str(ROOT / "programs" / "subleq" / "factorial.sq")
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    assert main(["trace", source, "--png", str(tmp_path / "link")]) == 2
    assert main(["trace", source, "--gif", str(tmp_path / "missing" / "x.gif")]) == 2
    (tmp_path / "file").write_text("")
    assert main(["trace", source, "--gif", str(tmp_path / "file" / "x.gif")]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert errors[0].startswith(f"ltvm: error: cannot write {tmp_path / 'link'}: it is a "
                                "symbolic link to")
    assert errors[1] == (f"ltvm: error: cannot write {tmp_path / 'missing' / 'x.gif'}: "
                         f"directory {tmp_path / 'missing'} does not exist")
    assert errors[2] == (f"ltvm: error: cannot write {tmp_path / 'file' / 'x.gif'}: "
                         f"{tmp_path / 'file'} is not a directory")  # said 'does not exist'


def test_trace_refuses_a_step_past_int64_before_running_a_pass(capsys, monkeypatch, tmp_path):
    """--step past the int64 step counters ran the program to its end to draw a step no
    run reaches (10**400 then failed on a picture name too long for a file)."""
    import vm.runtime.executor as executor

    monkeypatch.setattr(executor, "TransformerExecutor", None)  # building it now fails
    source = str(ROOT / "programs" / "subleq" / "factorial.sq")
    for step in (2 ** 63, 10 ** 400, -10 ** 400):
        assert main(["trace", source, "--step", str(step), "--png", str(tmp_path / "p")]) == 2
    assert main(["trace", source, "--steps", str(10 ** 400), "--gif", str(tmp_path / "x.gif")
                 ]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "ltvm: error: --step must be at most 2^63 - 1, got 9223372036854775808",
        "ltvm: error: --step must be at most 2^63 - 1, got a 401-digit number",
        "ltvm: error: --step must be at least 0, got a negative 401-digit number",
        "ltvm: error: --steps must be at most 1000, got a 401-digit number"]  # all echoed
    assert list(tmp_path.iterdir()) == []


def test_trace_refuses_a_pipe_or_unwritable_directory_before_running_a_pass(
        capsys, monkeypatch, tmp_path):
    """A FIFO as --gif ('File or stream is not seekable') and a directory that takes no new
    files were refused only after every pass had run."""
    import vm.runtime.executor as executor

    monkeypatch.setattr(executor, "TransformerExecutor", None)  # building it now fails
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != locked and
                        real_access(path, mode))  # root may write anywhere: chmod would not do
    os.mkfifo(tmp_path / "fifo.gif")
    source = str(ROOT / "programs" / "subleq" / "factorial.sq")
    assert main(["trace", source, "--gif", str(tmp_path / "fifo.gif")]) == 2
    assert main(["trace", source, "--gif", str(locked / "x.gif")]) == 2
    assert main(["trace", source, "--png", str(locked / "png")]) == 2
    assert main(["trace", source, "--png", str(locked)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"ltvm: error: cannot write {tmp_path / 'fifo.gif'}: it is a pipe or socket, and a "
        "GIF is written by seeking back to its start",
        f"ltvm: error: cannot write {locked / 'x.gif'}: directory {locked} is not writable",
        f"ltvm: error: cannot write {locked / 'png'}: directory {locked} is not writable",
        f"ltvm: error: cannot write {locked}: directory {locked} is not writable"]
    assert list(locked.iterdir()) == []


@pytest.mark.parametrize("option, path", [("--png", "/proc/ltvm-trace"),
                                          ("--gif", "/proc/ltvm-trace.gif")])
def test_trace_tries_its_output_directory_before_running_a_pass(capsys, monkeypatch, option,
                                                                path):
    """access() lets root write anywhere: as root, --png /proc/x or --gif /proc/x.gif passed
    the check and failed only after every pass had run."""
    import vm.runtime.executor as executor

    monkeypatch.setattr(executor, "TransformerExecutor", None)  # building it now fails
    monkeypatch.setattr(os, "access", lambda path, mode: True)  # root's answer
    source = str(ROOT / "programs" / "subleq" / "factorial.sq")
    assert main(["trace", source, option, path]) == 2
    assert capsys.readouterr().err.startswith(f"ltvm: error: cannot write {path}: ")


def test_trace_refuses_a_picture_name_taken_by_a_directory_before_running_a_pass(
        capsys, monkeypatch, tmp_path):
    """The names were checked only when the pictures were moved in, after the passes."""
    from vm.runtime.executor import Runner

    def no_pass(*args):
        raise AssertionError("a pass ran")
    monkeypatch.setattr(Runner, "advance", no_pass)
    (tmp_path / "png" / "step0005_layer2.png").mkdir(parents=True)
    source = str(ROOT / "programs" / "subleq" / "factorial.sq")
    assert main(["trace", source, "--step", "5", "--png", str(tmp_path / "png")]) == 2
    assert capsys.readouterr().err == (f"ltvm: error: cannot write "
                                       f"{tmp_path / 'png' / 'step0005_layer2.png'}: it is a "
                                       "directory\n")
    (tmp_path / "shown").mkdir()  # a GIF in the --png directory is staged with the pictures
    (tmp_path / "shown" / "x.gif").symlink_to(tmp_path / "elsewhere.gif")
    assert main(["trace", source, "--step", "5", "--png", str(tmp_path / "shown"),
                 "--gif", str(tmp_path / "shown" / "x.gif")]) == 2
    assert capsys.readouterr().err == (f"ltvm: error: cannot write "
                                       f"{tmp_path / 'shown' / 'x.gif'}: it is a symbolic "
                                       "link\n")


@pytest.mark.parametrize("frame", [0, 2])
def test_ctrl_c_while_drawing_a_gif_is_a_clean_stop(frame, capsys, monkeypatch, tmp_path):
    """Ctrl-C before the first frame was drawn came out as an IndexError traceback from
    matplotlib's GIF writer, which wrote the file on the way out whatever stopped it (later
    frames: a whole GIF encoded, then thrown away)."""
    drawn, saved = pictures._Animation.picture, []

    def interrupted(animation, X, title):
        if f"step {frame}," in title:
            raise KeyboardInterrupt
        return drawn(animation, X, title)
    monkeypatch.setattr(pictures._Animation, "picture", interrupted)
    monkeypatch.setattr(Image.Image, "save", lambda picture, *args, **options: saved.append(1))
    source = tmp_path / "countdown.sq"
    source.write_text(COUNTDOWN)
    assert main(["trace", str(source), "--gif", str(tmp_path / "x.gif")]) == 130
    assert capsys.readouterr().err == "ltvm: interrupted\n"
    assert saved == [] and list(tmp_path.iterdir()) == [source]


def test_a_gif_frame_is_the_whole_picture_of_x_without_redrawing_the_figure(
        countdown, monkeypatch):
    """Every frame was a full draw of the figure (hundreds of tick labels), a third of a
    second each: --steps 1000 took minutes. Only X's image and the title are drawn now, over
    a copy of the rest, and each frame must still be the picture a full draw makes."""
    from matplotlib.figure import Figure

    program, executor, labels = countdown
    X = executor.load([program])
    states = [X[0]]
    for step in range(2):
        X = executor.step(X, step)
        states.append(X[0])
    titles = ["countdown: X at step 0", "countdown: a longer title, at step 1", "2"]
    full = x_figure(states[0], labels, titles[0])
    full.canvas.draw()
    full.set_layout_engine("none")  # the layout of the first frame, as in the animation
    draws, draw = [], Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda figure, renderer: draws.append(figure) or
                        draw(figure, renderer))
    animation = pictures._Animation(states[0], labels, titles[0])
    frames = [np.asarray(animation.picture(state, title)) for state, title in zip(states, titles)]
    assert len(draws) == 1, "all but what changes, once (the layout needs no draw)"
    for frame, state, title in zip(frames, states, titles):
        full.axes[0].images[0].set_data(state.double().numpy())
        full.axes[0].set_title(title, fontsize=9)
        full.canvas.draw()
        assert (frame == np.asarray(full.canvas.buffer_rgba())).all(), title


@pytest.mark.parametrize("name, text, options", [
    ("countdown.sq", COUNTDOWN, []), ("two_jumps.dec", "7 7 3   7 7 -1   0 0", ["--bits", "8"])])
def test_trace_png_checks_the_pass_it_draws_without_running_it_again(
        name, text, options, blank_layer_pictures, capsys, monkeypatch, tmp_path):
    """In the checked mode the drawn pass ran twice: once checked, once traced to draw."""
    from vm.transformer.layers import LoopedTransformer

    passes, step_ = [], LoopedTransformer.step_

    def counted(model, X, *args, **keywords):
        passes.append(X.shape)
        return step_(model, X, *args, **keywords)
    monkeypatch.setattr(LoopedTransformer, "step_", counted)
    source = tmp_path / name
    source.write_text(text)
    assert main(["trace", str(source), *options, "--checked",
                 "--png", str(tmp_path / "png")]) == 0
    assert passes == [], "the drawn pass is the traced one"
    assert len(list((tmp_path / "png").iterdir())) >= 4


@pytest.mark.parametrize("gif", ["x.gif", "png/x.gif"])
def test_trace_writes_no_pictures_when_the_animation_stops(gif, blank_layer_pictures, capsys,
                                                           tmp_path):
    """The pictures were moved in before the animation's passes ran: --max-seconds during
    them left the pictures of the run at exit 1, as if it had finished."""
    source = tmp_path / "loop.sq"
    source.write_text(".data\nz: 0\n.code\nloop: subleq z, z, loop\n")
    assert main(["trace", str(source), "--png", str(tmp_path / "png"), "--gif",
                 str(tmp_path / gif), "--steps", "1000", "--max-seconds", "2"]) == 1
    assert "before the animation was written" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [source]


def test_trace_refuses_to_draw_steps_past_the_machines_domain(capsys, tmp_path):
    """a = 1e14 doubled leaves the FLEQ machine's domain (|x| <= 2^50) at step 6, where
    `run` stops and exits 1: the GIF went on to step 32 at exit 0, showing values that mean
    nothing."""
    source = tmp_path / "grow.fleq"
    source.write_text(".d 1\n.data\na: 100000000000000.0\n.code\ntop: a = add(a, a)\n"
                      "      goto top\n")
    assert main(["trace", str(source), "--gif", str(tmp_path / "x.gif"), "--steps", "7"]) == 1
    assert "ltvm: error: grow.fleq: domain: step 6: a = add(a, a) leaves the machine's " \
        "domain" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [source]
    assert main(["trace", str(source), "--gif", str(tmp_path / "x.gif"), "--steps", "6"]) == 0
    with Image.open(tmp_path / "x.gif") as gif:
        assert gif.n_frames == 7, "steps 0 to 6: the value step 6 writes is not shown"


def test_trace_counts_the_animation_beside_the_pictures_in_memory(
        countdown, blank_layer_pictures, capsys, monkeypatch, tmp_path):
    """--png's pass is traced and drawn while --gif's frames are held: each fitting the free
    memory alone, the two together were not refused, and ended in the OOM killer."""
    import vm.cli.trace
    import vm.transformer.memory

    program, executor, labels = countdown
    X = executor.load([program])[0]
    free = 2 ** 30
    # six frames (--steps 5) that fill all but 1 KiB; the 4 heads' 9 x 9 float32 maps of
    # the pass alone take 1.3 KB
    monkeypatch.setattr(vm.cli.trace, "FRAME_IMAGE_BYTES",
                        (free - 1024) // 6 - X.numel() * X.element_size())
    monkeypatch.setattr(vm.transformer.memory, "free_memory", lambda device: free)
    source = tmp_path / "countdown.sq"
    source.write_text(COUNTDOWN)
    gif, png = ["--gif", str(tmp_path / "x.gif"), "--steps", "5"], ["--png", str(tmp_path / "p")]
    assert main(["trace", str(source), *gif, *png]) == 2
    assert "attention maps and 1.0 GiB held beside them), more than the 1.0 GiB free" in \
        capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["countdown.sq"]
    assert main(["trace", str(source), *gif]) == 0
    assert main(["trace", str(source), *png]) == 0


def test_layers_of_one_head_count_are_drawn_in_one_figure_as_a_full_draw_does(
        countdown, monkeypatch, tmp_path):
    """Each layer was a new figure, laid out and drawn whole: seconds a FLEQ layer, most of
    them measuring and drawing the same tick labels. One figure a head count now, in which
    only the images and titles are redrawn, and each picture must still be the full draw."""
    program, executor, labels = countdown
    X = executor.load([program])[0]
    traces = trace_pass(executor.model, X)
    heads = [trace.attention.shape[0] for trace in traces]
    assert len(set(heads)) < len(heads), "a head count that two layers share"
    built, build = [], pictures._layer_panels
    monkeypatch.setattr(pictures, "_layer_panels",
                        lambda trace, *rest: built.append(trace) or build(trace, *rest))
    paths = pictures.save_pass_pictures(executor.model, X, labels, tmp_path, 0, "countdown")
    assert [path.name for path in paths] == [f"step0000_layer{layer}.png"
                                             for layer in range(len(traces))]
    assert len(built) == len(set(heads))
    for layer, path in enumerate(paths):
        full = io.BytesIO()
        layer_figure(traces[layer], layer, labels, "countdown").savefig(full, format="png")
        with Image.open(path) as drawn, Image.open(full) as whole:
            assert drawn.size == whole.size, layer
            assert (np.asarray(drawn) == np.asarray(whole)).all(), layer
