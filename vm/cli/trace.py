"""`ltvm trace`: pictures of one pass (per layer) and an animation of X over a run."""

from __future__ import annotations

import argparse
import copy
import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable

from vm.cli.common import (add_engine_arguments, add_program_arguments, add_sampling_refusal,
                           add_time_limit, directory_path, engine_config, file_path, integer,
                           load_program, positive_int, refuse_sampling_options)
from vm.common.errors import InputError, RunFailure, counted, shown_path
from vm.common.outputs import (atomic_path, check_directory, refused_creation,
                               refused_directory, staged_files)
from vm.isa import for_program
from vm.tools.progress import Progress

DEFAULT_GIF_STEPS = 32
MAX_STEP = 2 ** 63 - 1
"""The last step --step may name: runs count their steps in int64, and no run makes 2^63
passes (290,000 years at a microsecond each). A larger K ran the program to its end to draw
a step no run reaches (--step 10**400 then failed on a picture name too long to write)."""
MAX_GIF_STEPS = 1000
"""The most steps a GIF may cover: every frame (X, and its image of up to 860 x 900
pixels) is held in memory until the file is written, and 1000 frames already play for over
four minutes."""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "trace", help="draw X and every head's attention for one pass; animate X over a run",
        description="Run PROG K passes on the transformer. With --png DIR, write one PNG per "
                    "layer of the next pass: each head's attention matrix (queries x keys) "
                    "and X before and after the layer, columns labelled by region and by the "
                    "program's names (FLEQ: block columns by function name, cells by variable, "
                    "instructions by label), rows by field. With --gif FILE, write an animated GIF "
                    "of X from step K over the next S steps (it ends early at EOF). Nothing is "
                    "written, exit 1, when the steps drawn leave the domain the machine's error "
                    "bounds cover (FLEQ; the message names the first such step).")
    add_program_arguments(parser)
    parser.add_argument("--step", type=integer, default=0, metavar="K",
                        help="passes to run before drawing (default 0: the first pass)")
    parser.add_argument("--png", type=directory_path, metavar="DIR",
                        help="directory for the per-layer PNGs")
    parser.add_argument("--gif", type=file_path, metavar="FILE",
                        help="animated GIF of X over --steps steps")
    parser.add_argument("--steps", type=positive_int, metavar="S",
                        help=f"steps the GIF covers, at most {MAX_GIF_STEPS} (default "
                             f"{DEFAULT_GIF_STEPS})")
    parser.add_argument("--input", metavar="TEXT",
                        help="the input stream of a standard SUBLEQ image (.dec, .vsq): its "
                             "bytes in UTF-8, then end of input")
    add_engine_arguments(parser)
    add_time_limit(parser)
    add_sampling_refusal(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    args.started = time.monotonic()
    refuse_sampling_options(args)
    if not (args.png or args.gif):
        raise InputError("nothing to draw: give --png DIR and/or --gif FILE")
    if args.step < 0:
        raise InputError(f"--step must be at least 0, got {_number_text(args.step)}")
    if args.step > MAX_STEP:
        raise InputError(f"--step must be at most 2^63 - 1, got {_number_text(args.step)}")
    if args.gif and Path(args.gif).suffix.lower() != ".gif":
        raise InputError(f"{shown_path(args.gif)}: the animation file must end in .gif")
    if args.steps is not None and not args.gif:  # ignored in silence before
        raise InputError("--steps sets how many steps the animation covers: give --gif FILE")
    args.steps = DEFAULT_GIF_STEPS if args.steps is None else args.steps
    if args.steps > MAX_GIF_STEPS:
        raise InputError(f"--steps must be at most {MAX_GIF_STEPS}, got "
                         f"{_number_text(args.steps)}")
    _check_outputs(args)
    # matplotlib and torch take seconds to import: load them only when drawing
    from vm.runtime.executor import TransformerExecutor
    from vm.tools.pictures import axis_labels, check_pass_memory

    program, geometry = load_program(args)
    if for_program(program).reads_input:
        return _trace_image(args, program)
    if args.input is not None:
        raise InputError(f"--input applies to standard SUBLEQ images (.dec, .vsq), not "
                         f"{for_program(program).name.upper()}")
    config = engine_config(args)
    executor = TransformerExecutor(geometry, config)
    labels = axis_labels(*for_program(program).column_names(program, geometry, executor.layout),
                         executor.layout)
    name = Path(args.program).name if args.program else "csv program"
    runner = executor.runner(executor.load([program]))
    frames_bytes = _check_animation_memory(runner.state(), args.steps) if args.gif else 0
    if args.png:
        check_pass_memory(executor.model, runner.state(), "--png", "draw X alone with --gif",
                          frames_bytes)
        check_directory(args.png, _staged_names(args, len(executor.model.layers)))
    progress = Progress("steps", args.step, max_seconds=args.max_seconds, since=args.started)
    runner.advance(args.step, progress)
    progress.done()
    X = runner.state()
    if executor.decode(X)[0][1] == program.eof:
        steps = counted(int(runner.steps[0]), "step")
        print(f"note: the program reached EOF after {steps}; the pictures at step {args.step} "
              "show the EOF pass, which changes nothing")
    drawn, frames = X[0], []
    if args.gif:
        progress = _animation_progress("steps animated", args)
        for step in range(args.step, args.step + args.steps + 1):
            progress(step - args.step)
            pc = executor.decode(X)[0][1]
            frames.append((f"{name}: X at step {step}, pc {pc}", X[0]))
            if pc == program.eof:
                break
            X = executor.step(X, step)
        progress.done()
    made = args.step + max(1 if args.png else 0, len(frames) - 1)  # to what is drawn
    _check_domain(program, made, config.dtype, name)
    _write_outputs(args, labels, name, executor.model, drawn,
                   lambda X: executor.trace(X, args.step), frames)
    return 0


def _check_domain(program, steps: int, dtype: str | None, name: str) -> None:
    """RunFailure when the first `steps` steps, those the pictures show, leave the domain the
    machine's error bounds cover (FLEQ: a value past its magnitude, a block called outside
    its domain): `run` reports such a run, and the GIF went on showing values that mean
    nothing (a = 1e14 doubled on past 2^50 to 2^60) at exit 0."""
    checks = for_program(program).run_checks(program, steps, dtype)
    if not checks.ok:
        found = "; ".join(f"{key}: {value}" for key, value in checks.lines.items())
        raise RunFailure(f"{name}: {found}; the pictures would show values past it: draw "
                         "the steps before it (--step, --steps)")


def _number_text(value: int) -> str:
    """`value` as a message quotes it: a count of its digits past 30 (the messages echoed
    all 401 digits of 10**400)."""
    digits = str(abs(value))
    if len(digits) <= 30:
        return str(value)
    return f"a {'negative ' if value < 0 else ''}{len(digits)}-digit number"


def _trace_image(args: argparse.Namespace, image) -> int:
    """`trace` for a standard SUBLEQ image: the same pictures, drawn from its own lockstep
    runner (the batched executor does not run this machine); the tapes are sized for the
    passes drawn (the input, and the bytes the reference writes by then)."""
    from vm.machines.vsubleq.punchcard import output_needed
    from vm.machines.vsubleq.run import TransformerRun
    from vm.tools.pictures import axis_labels, check_pass_memory
    from vm.transformer.layers import from_internal

    config = engine_config(args)
    isa = for_program(image)
    input_bytes = os.fsencode(args.input or "")
    last = args.step + (args.steps if args.gif else 0) + 1
    sizing = Progress("reference steps sizing the output tape", last,
                      max_seconds=args.max_seconds, unfinished="the passes were drawn",
                      since=args.started)
    outputs = output_needed(image, input_bytes, last, sizing)
    sizing.done()
    run = TransformerRun(image, config.dtype or isa.default_dtype, config.attention,
                         config.temperature, config.device, input_bytes, outputs,
                         config.checked)
    labels = axis_labels(*isa.column_names(image, run.geometry, run.machine.layout),
                         run.machine.layout)
    frames_bytes = _check_animation_memory(run.X, args.steps) if args.gif else 0
    if args.png:
        check_pass_memory(run.model, run.X, "--png", "draw X alone with --gif", frames_bytes)
        check_directory(args.png, _staged_names(args, len(run.model.layers)))
    name = Path(args.program).name
    progress = Progress("steps", args.step, max_seconds=args.max_seconds, since=args.started)
    for step in range(args.step):
        if run.halted:
            print(f"note: the image halted after {counted(step, 'step')}; the pictures at step "
                  f"{args.step} show a halted machine, which changes nothing")
            break
        progress(step)
        run.step()
    progress.done()

    def current() -> object:
        """X now, (rows, n), a copy the next pass leaves alone."""
        return from_internal(run.X)[0].clone()
    drawn, tracer, frames = current(), _image_tracer(run), []
    if args.gif:
        progress = _animation_progress("steps animated", args)
        for step in range(args.step, args.step + args.steps + 1):
            progress(step - args.step)
            state = run.state()
            frames.append((f"{name}: X at step {step}, pc {state.pc}", current()))
            if state.halted:
                break
            run.step()
        progress.done()
    _write_outputs(args, labels, name, run.model, drawn, tracer, frames)
    return 0


def _image_tracer(run) -> Callable[..., list] | None:
    """How --png runs the pass it draws: in the checked mode (asked for, or below the safe
    temperature) checked as `run` checks its passes now, by a copy of its checker (the run
    goes on for --gif); None when the run is unchecked."""
    from vm.transformer.layers import trace_pass
    if run.checker is None:
        return None
    checker = copy.copy(run.checker)

    def checked_trace(X):
        traces = trace_pass(run.model, X, checker.observe)
        checker.after_pass(traces[-1].after[None])
        return traces
    return checked_trace


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse an output path that cannot be written before any pass runs, not after minutes
    of them (--png a file or a link to nothing was 'cannot create directory: File exists')."""
    if args.png is not None:
        png = check_directory(args.png, ())
        _check_writable(png, png if png.is_dir() else png.parent)
    if args.gif:
        gif = Path(args.gif)
        if args.png is not None and os.path.realpath(args.png) == os.path.realpath(gif):
            # the directory was made and filled, then the animation failed on it
            raise InputError(f"--png {shown_path(args.png)} and --gif {shown_path(args.gif)} name "
                             "the same path; give the animation a path of its own")
        if gif.is_dir():
            raise InputError(f"cannot write {shown_path(gif)}: it is a directory")
        if gif.is_fifo() or gif.is_socket():
            raise InputError(f"cannot write {shown_path(gif)}: it is a pipe or socket, and a GIF "
                             "is written by seeking back to its start")
        if _gif_in_png(args):  # checked with the pictures' names
            return
        refusal = refused_directory(gif.parent)
        if refusal:
            raise InputError(f"cannot write {shown_path(gif)}: {refusal}")
        _check_writable(gif, Path(os.path.realpath(gif)).parent)  # a link's target is replaced


def _check_writable(path: Path, directory: Path) -> None:
    """InputError unless `directory`, where `path` is to be made, takes new files: the
    passes ran first, then the write failed. access() answers first, with the plainer
    message; it says yes to root everywhere (/proc, /sys), so a directory is then made
    and removed there (`refused_creation`)."""
    refusal = refused_directory(directory) or refused_creation(directory)
    if refusal:
        raise InputError(f"cannot write {shown_path(path)}: {refusal}")


def _picture_names(step: int, layers: int) -> list[str]:
    """The files --png writes, one per layer of the pass after `step`."""
    return [f"step{step:04d}_layer{layer}.png" for layer in range(layers)]


def _gif_in_png(args: argparse.Namespace) -> bool:
    """Does --gif name a file in the --png directory? It is then staged with the pictures
    (the directory may not exist until they are moved in)."""
    return bool(args.gif) and args.png is not None and (
        os.path.abspath(args.png) == os.path.abspath(Path(args.gif).parent))


def _staged_names(args: argparse.Namespace, layers: int) -> list[str]:
    """The files staged into --png: the pictures of a pass of `layers` layers, and the GIF
    when it goes there too."""
    return (_picture_names(args.step, layers)
            + ([Path(args.gif).name] if _gif_in_png(args) else []))


FRAME_IMAGE_BYTES = 860 * 900 * 9 // 4
"""A GIF frame's image, held with every other until the file is written: a byte a pixel
(its index in a 256-colour palette), and pillow's copy as it writes the file (measured:
2.1 bytes a pixel at the peak)."""


def _check_animation_memory(X, steps: int) -> int:
    """Refuse --gif before the first pass (X: the loaded state of one program) when its
    frames cannot fit in the memory free now: each keeps a copy of X, 37 MB for a 2^15-word
    image, so 1,000 of them would end in the OOM killer, silently. The bytes they take: they
    are held while --png's pass is traced and drawn."""
    import torch

    from vm.transformer.memory import free_memory
    frame = X.numel() * X.element_size() + FRAME_IMAGE_BYTES
    needed, free = (steps + 1) * frame, free_memory(torch.device("cpu"))
    if free is not None and needed > free:
        raise InputError(f"--gif over {steps:,} steps needs about {needed / 2**30:.1f} GiB "
                         f"({frame / 2**20:.1f} MiB a frame), more than the "
                         f"{free / 2**30:.1f} GiB free: lower --steps")
    return needed


def _write_outputs(args: argparse.Namespace, labels, name: str, model, X,
                   tracer: Callable[..., list] | None, frames: list) -> None:
    """--png's pictures of the pass from X (rows, n), run by `tracer` (checked, in the
    checked mode; None: unchecked), and --gif's animation of `frames`, moved into place only
    once all are drawn: a failure, Ctrl-C or --max-seconds (counted from the command's
    start) part-way leaves neither, where the pictures used to be written before the passes
    of the animation ran. Each path written is printed with its size."""
    gif = Path(args.gif) if args.gif else None
    names = _picture_names(args.step, len(model.layers)) if args.png else []
    with ExitStack() as outputs:
        if args.png:
            staging = outputs.enter_context(
                staged_files(args.png, _staged_names(args, len(model.layers))))
            _draw_pass_pictures(model, X, labels, args, name, tracer, staging)
        if gif:
            _draw_animation(frames, labels, args, staging / gif.name if _gif_in_png(args)
                            else outputs.enter_context(atomic_path(gif)))
    for picture in names:
        final = Path(args.png) / picture
        print(f"wrote {shown_path(final)} ({final.stat().st_size:,} bytes)")
    if gif:
        print(f"wrote {shown_path(gif)} ({len(frames)} frames, {gif.stat().st_size:,} bytes)")


def _draw_pass_pictures(model, X, labels, args: argparse.Namespace, name: str,
                        tracer: Callable[..., list] | None, directory: Path) -> None:
    """One PNG per layer of the pass at --step, into `directory`."""
    from vm.tools.pictures import save_pass_pictures
    progress = Progress("layers drawn", len(model.layers), max_seconds=args.max_seconds,
                        unfinished="every layer was drawn", since=args.started)
    save_pass_pictures(model, X, labels, directory, args.step, f"{name} step {args.step}",
                       progress=progress, tracer=tracer)
    progress.done()


def _animation_progress(label: str, args: argparse.Namespace) -> Progress:
    """Progress of the GIF's passes or frames: a pass of a wide program takes a second, so
    --steps 1000 ran for many minutes with no word and past --max-seconds."""
    return Progress(label, args.steps + 1, max_seconds=args.max_seconds,
                    unfinished="the animation was written", since=args.started)


def _draw_animation(frames: list, labels, args: argparse.Namespace, path: Path) -> None:
    """The frames as a GIF at `path`, for --gif."""
    from vm.tools.pictures import save_x_animation
    progress = _animation_progress("frames drawn", args)
    try:
        save_x_animation(frames, labels, path, progress=progress)
    except OSError as error:  # e.g. a full disk
        shown = shown_path(args.gif)
        raise InputError(f"cannot write {shown}: {error.strerror or error}") from None
    progress.done()
