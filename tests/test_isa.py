"""vm.isa: the one object per instruction set, and how commands find it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vm.common.errors import InputError
from vm.isa import for_path, for_program


@pytest.mark.parametrize("thing", [None, 3, "subleq a, b"])
def test_for_program_refuses_what_is_no_program_or_geometry(thing):
    """It raised a bare TypeError, which commands report as an internal error."""
    with pytest.raises(InputError, match="for_program takes a program or a geometry"):
        for_program(thing)


@pytest.mark.parametrize("path", [None, 3])
def test_for_path_refuses_what_is_no_file_name(path):
    """None failed inside pathlib with "expected str, bytes or os.PathLike object"."""
    with pytest.raises(InputError, match="for_path takes a file name"):
        for_path(path)


@pytest.mark.parametrize("steps,dtype,message", [(None, None, "max_steps"),
                                                 (5, "float16", "dtype must be one of")])
def test_fleq_run_checks_refuses_a_step_count_or_dtype_it_cannot_replay(steps, dtype, message):
    """steps=None failed with a TypeError in `<`, dtype 'float16' with KeyError 'float16'."""
    from vm.isa import FLEQ
    program = FLEQ.assemble_text(".data\na: 3.0\nc: 0.0\n.code\nc = mul(a, a)\nhalt\n")
    with pytest.raises(InputError, match=message):
        FLEQ.run_checks(program, steps, dtype)


def test_another_instruction_sets_program_or_geometry_is_refused_by_name():
    """They failed on a missing attribute: SUBLEQ.machine(fleq_geometry) with "no attribute
    'bits'", SUBLEQ.run_reference(None, 10) with "no attribute 'memory'"."""
    from assembler.subleq import assemble
    from vm.isa import FLEQ, SUBLEQ, VSUBLEQ
    fleq = FLEQ.assemble_text(".data\na: 3.0\nc: 0.0\n.code\nc = mul(a, a)\nhalt\n")
    subleq = assemble(".data\nx: 5\ny: 0\n.code\nsubleq x, y\nhalt\n", "c.sq")
    geometry = FLEQ.geometry_for(fleq)
    for call in (lambda: SUBLEQ.machine(geometry), lambda: SUBLEQ.layout(geometry),
                 lambda: VSUBLEQ.machine(geometry)):
        with pytest.raises(InputError, match="takes a [A-Z]+ geometry"):
            call()
    for call in (lambda: SUBLEQ.run_reference(None, 10), lambda: FLEQ.run_reference(subleq, 10),
                 lambda: VSUBLEQ.geometry_for(subleq),
                 lambda: SUBLEQ.encode(fleq, geometry, FLEQ.layout(geometry))):
        with pytest.raises(InputError, match="takes a [A-Z]+ program"):
            call()


def test_fleq_load_refuses_a_dtype_it_has_no_block_parameters_for():
    """ProgramOptions(dtype='Float32') assembled with float64's block parameters, silently."""
    from pathlib import Path

    from vm.isa import FLEQ, ProgramOptions
    source = Path(__file__).resolve().parents[1] / "programs" / "fleq" / "calculator.fleq"
    with pytest.raises(InputError, match="dtype must be one of"):
        FLEQ.load(source, ProgramOptions(dtype="Float32"))


@pytest.mark.parametrize("source", ["subleq/gcd.sq", "fleq/calculator.fleq",
                                    "vsubleq/hello.dec"])
def test_load_needs_no_options(source):
    """`SUBLEQ.load(path)` failed with a TypeError: the options had no default."""
    path = Path(__file__).resolve().parents[1] / "programs" / source
    program, geometry = for_path(path).load(path)
    assert for_program(program).geometry_for(program) == geometry


@pytest.mark.parametrize("source", ["subleq/gcd.sq", "fleq/calculator.fleq",
                                    "vsubleq/hello.dec", "vsubleq/hello.vsq"])
def test_every_instruction_set_assembles_a_file_and_a_text_as_it_loads_them(source):
    """SUBLEQ had no assemble_file and standard SUBLEQ neither method, where FLEQ had both:
    a library caller had to know which instruction set offered which."""
    path = Path(__file__).resolve().parents[1] / "programs" / source
    isa = for_path(path)
    loaded, _ = isa.load(path)
    listing = isa.listing(loaded)
    assert isa.listing(isa.assemble_file(path)) == listing
    assert isa.listing(isa.assemble_text(path.read_text(), str(path))) == listing


@pytest.mark.parametrize("source", ["subleq/factorial.sq", "vsubleq/hello.vsq"])
def test_runs_and_comparisons_need_no_step_limit_or_engine_settings(source):
    """`SUBLEQ.run_transformer(program, geometry)` and `SUBLEQ.compare(program, geometry)`
    raised TypeError (no config), where vm.runtime's functions take the defaults."""
    path = Path(__file__).resolve().parents[1] / "programs" / source
    isa = for_path(path)
    program, geometry = isa.load(path)
    reference = isa.run_reference(program)
    assert reference.halted
    assert isa.run_transformer(program, geometry).memory == reference.memory
    assert isa.compare(program, geometry).ok


def test_a_fleq_transformer_run_names_a_step_outside_its_blocks_domains():
    """The calculator assembled with float64's block parameters and run in float32 came
    back halted, with no word that its inv step's error was unbounded in float32."""
    from vm.isa import FLEQ
    from vm.runtime.config import EngineConfig
    path = Path(__file__).resolve().parents[1] / "programs" / "fleq" / "calculator.fleq"
    program, geometry = FLEQ.load(path)
    assert FLEQ.run_transformer(program, geometry).domain is None
    mixed = FLEQ.run_transformer(program, geometry, config=EngineConfig(dtype="float32"))
    assert mixed.halted and "inv" in mixed.domain.describe()
    assert "float32" in mixed.domain.describe()


def test_export_in_one_call_refuses_an_attention_mode_before_writing(tmp_path):
    from vm.isa import SUBLEQ
    path = Path(__file__).resolve().parents[1] / "programs" / "subleq" / "gcd.sq"
    program, geometry = SUBLEQ.load(path)
    with pytest.raises(InputError, match="attention must be one of dense, masked"):
        SUBLEQ.export(program, geometry, tmp_path / "out", attention="sparse")
    assert not (tmp_path / "out").exists()
    written = SUBLEQ.export(program, geometry, tmp_path / "out", attention="dense")
    assert sorted(path.name for path in written.iterdir()) == ["layout.json", "punchcard.npy",
                                                               "weights.npz"]


def test_every_method_refuses_another_instruction_sets_program_or_geometry():
    """Methods without a check failed on a missing attribute (SUBLEQ.named_memory(fleq):
    "no attribute 'symbols'", FLEQ.run_transformer(subleq) "no attribute 'variables'") or
    answered for the wrong machine: FLEQ.listing(subleq) printed a SUBLEQ listing and
    SUBLEQ.run_transformer(fleq, fleq_geometry) ran the FLEQ program."""
    from assembler.subleq import assemble
    from vm.isa import FLEQ, SUBLEQ
    fleq = FLEQ.assemble_text(".data\na: 3.0\nc: 0.0\n.code\nc = mul(a, a)\nhalt\n")
    subleq = assemble(".data\nx: 5\ny: 0\n.code\nsubleq x, y\nhalt\n", "c.sq")
    fleq_geometry, subleq_geometry = FLEQ.geometry_for(fleq), SUBLEQ.geometry_for(subleq)
    calls = [lambda: FLEQ.listing(subleq), lambda: SUBLEQ.named_memory(fleq, [0.0] * 4),
             lambda: SUBLEQ.run_transformer(fleq, fleq_geometry, 10),
             lambda: FLEQ.run_transformer(subleq, subleq_geometry, 10),
             lambda: FLEQ.run_checks(subleq, 1), lambda: SUBLEQ.trace_line(fleq, None),
             lambda: SUBLEQ.column_names(fleq, subleq_geometry, SUBLEQ.layout(subleq_geometry)),
             lambda: FLEQ.paper(fleq, subleq_geometry),
             lambda: SUBLEQ.export_fields(subleq, fleq_geometry)]
    for call in calls:
        with pytest.raises(InputError, match="takes a [A-Z]+ (program|geometry)"):
            call()


@pytest.mark.parametrize("options", [None, {"bits": 8}])
def test_load_refuses_options_that_are_no_program_options(options):
    """They failed on a missing attribute: "'NoneType' object has no attribute 'block_size'"."""
    from vm.isa import FLEQ, SUBLEQ, VSUBLEQ
    programs = Path(__file__).resolve().parents[1] / "programs"
    sources = (SUBLEQ, "subleq/gcd.sq"), (FLEQ, "fleq/calculator.fleq"), \
        (VSUBLEQ, "vsubleq/hello.dec")
    for isa, source in sources:
        with pytest.raises(InputError, match="options must be a vm.isa.ProgramOptions"):
            isa.load(programs / source, options)


def test_a_layout_that_is_not_the_geometrys_is_refused():
    """encode failed with a numpy broadcast ValueError (a layout of more scratch columns) or
    "layout has no field 'cpu'" (FLEQ's), column_names named another punchcard's columns."""
    from assembler.subleq import assemble
    from vm.common.geometry import Geometry
    from vm.isa import FLEQ, SUBLEQ
    subleq = assemble(".data\nx: 5\ny: 0\n.code\nsubleq x, y\nhalt\n", "c.sq")
    geometry = SUBLEQ.geometry_for(subleq)
    wider = SUBLEQ.layout(Geometry(4, geometry.memory, geometry.instructions, geometry.bits))
    fleq = FLEQ.assemble_text(".data\na: 3.0\nc: 0.0\n.code\nc = mul(a, a)\nhalt\n")
    for layout in (wider, FLEQ.layout(FLEQ.geometry_for(fleq))):
        for call in (SUBLEQ.encode, SUBLEQ.column_names):
            with pytest.raises(InputError, match="the layout is not this geometry's"):
                call(subleq, geometry, layout)


def test_fleq_assembles_text_for_a_dtype_as_load_does():
    """A float32 assembly from text needed `defaults=dtype_parameters('float32')`, where
    `load` took ProgramOptions(dtype='float32')."""
    from vm.isa import FLEQ, ProgramOptions
    path = Path(__file__).resolve().parents[1] / "programs" / "fleq" / "calculator.fleq"
    loaded, _ = FLEQ.load(path, ProgramOptions(dtype="float32"))
    text = FLEQ.assemble_text(path.read_text(), str(path), dtype="float32")
    assert text.functions == loaded.functions
    assert text.functions != FLEQ.assemble_text(path.read_text(), str(path)).functions
    with pytest.raises(InputError, match="dtype must be one of"):
        FLEQ.assemble_file(path, dtype="Float32")


@pytest.mark.parametrize("source", ["subleq/gcd.sq", "fleq/calculator.fleq",
                                    "vsubleq/hello.dec"])
def test_a_program_beside_a_geometry_it_does_not_fit_is_refused(source):
    """column_names named the columns of a geometry too small for the program (encode and
    export refused it, each its own way)."""
    others = {"subleq/gcd.sq": "subleq/factorial.sq",
              "fleq/calculator.fleq": "fleq/newton_reciprocal.fleq",
              "vsubleq/hello.dec": "vsubleq/sort.vsq"}
    root = Path(__file__).resolve().parents[1] / "programs"
    isa = for_path(root / source)
    program, _ = isa.load(root / source)
    _, other = isa.load(root / others[source])
    with pytest.raises(InputError, match="geometry"):
        isa.column_names(program, other, isa.layout(other))
    with pytest.raises(InputError, match="geometry"):
        isa.export_fields(program, other)


def test_a_missing_argument_is_named_as_python_names_it_and_keywords_are_checked():
    """A call without its geometry failed with KeyError 'geometry' inside the argument
    checks (SUBLEQ.compare(program)); checks by keyword must hold as by position."""
    from assembler.subleq import assemble
    from vm.isa import FLEQ, SUBLEQ
    subleq = assemble(".data\nx: 5\ny: 0\n.code\nsubleq x, y\nhalt\n", "c.sq")
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'geometry'"):
        SUBLEQ.compare(subleq)
    with pytest.raises(TypeError, match="'geometry' and 'layout'"):
        SUBLEQ.encode(subleq)
    fleq = FLEQ.assemble_text(".data\na: 3.0\nc: 0.0\n.code\nc = mul(a, a)\nhalt\n")
    with pytest.raises(InputError, match="takes a SUBLEQ geometry"):
        SUBLEQ.compare(program=subleq, geometry=FLEQ.geometry_for(fleq))
    with pytest.raises(InputError, match="takes a SUBLEQ program"):
        SUBLEQ.trace_line(record=None, program=fleq)


@pytest.mark.parametrize("name", ["SUBLEQ", "FLEQ", "VSUBLEQ"])
@pytest.mark.parametrize("file", [None, 5])
def test_assemble_text_refuses_a_file_name_that_is_no_path(name, file):
    """VSUBLEQ.assemble_text(text, None) failed with a TypeError in Path(); SUBLEQ and FLEQ
    named the source 'None' in their messages."""
    import vm.isa
    isa = getattr(vm.isa, name)
    with pytest.raises(InputError, match="file must be the source's name"):
        isa.assemble_text(".code\nhalt\n", file)
    assert isa.assemble_text(".code\nhalt\n" if name != "VSUBLEQ" else "0 0 -1\n",
                             Path("p" + isa.suffixes[0])) is not None


@pytest.mark.parametrize("name", ["SUBLEQ", "VSUBLEQ"])
@pytest.mark.parametrize("steps,dtype,message", [(None, None, "max_steps"),
                                                 (-1, None, "max_steps"),
                                                 (5, "float16", "dtype must be one of")])
def test_run_checks_refuses_a_step_count_or_dtype_where_the_isa_has_no_checks(name, steps,
                                                                             dtype, message):
    """SUBLEQ.run_checks(program, -1, 'float16') answered RunChecks(ok=True), where FLEQ's
    refused both."""
    import vm.isa
    isa = getattr(vm.isa, name)
    source = ".code\nhalt\n" if name == "SUBLEQ" else "0 0 -1\n"
    program = isa.assemble_text(source, "p" + isa.suffixes[0])
    with pytest.raises(InputError, match=message):
        isa.run_checks(program, steps, dtype)
    assert isa.run_checks(program, 5, "float32").ok


@pytest.mark.parametrize("name", ["SUBLEQ", "FLEQ", "VSUBLEQ"])
@pytest.mark.parametrize("record", [None, 5])
def test_trace_line_refuses_what_is_no_traced_step(name, record):
    """SUBLEQ.trace_line(program, None) failed with "'NoneType' object has no attribute
    'pc'", FLEQ's on 'written', VSUBLEQ's on 'a'."""
    import vm.isa
    isa = getattr(vm.isa, name)
    source = {"SUBLEQ": ".code\nhalt\n", "FLEQ": ".data\nx: 1.0\n.code\nx = add(x, x)\nhalt\n",
              "VSUBLEQ": "0 0 -1\n"}[name]
    program = isa.assemble_text(source, "p" + isa.suffixes[0])
    with pytest.raises(InputError, match="trace_line takes a step of a traced run"):
        isa.trace_line(program, record)
    step = isa.run_reference(program, 1, trace=True).trace[0]
    assert isa.trace_line(program, step)


@pytest.mark.parametrize("name", ["SUBLEQ", "FLEQ", "VSUBLEQ"])
def test_result_lines_refuses_an_output_format_it_does_not_know(name):
    """SUBLEQ and FLEQ took output_format='xml' (and answered {}), which VSUBLEQ refused."""
    import vm.isa
    isa = getattr(vm.isa, name)
    source = {"SUBLEQ": ".code\nhalt\n", "FLEQ": ".data\nx: 1.0\n.code\nhalt\n",
              "VSUBLEQ": "0 0 -1\n"}[name]
    program = isa.assemble_text(source, "p" + isa.suffixes[0])
    result = isa.run_reference(program, 5)
    with pytest.raises(InputError, match="output_format must be one of text, decimal, hex"):
        isa.result_lines(result, "xml")
    assert isa.result_lines(result, "hex") == {}


@pytest.mark.parametrize("source", ["subleq/gcd.sq", "fleq/calculator.fleq", "vsubleq/hello.dec"])
@pytest.mark.parametrize("trace", ["no", 5, None])
def test_run_reference_refuses_a_trace_flag_that_is_no_bool(source, trace):
    """Any truthy value ("no", 5) recorded every step of the run."""
    isa = for_path(Path(__file__).resolve().parents[1] / "programs" / source)
    program, _ = isa.load(Path(__file__).resolve().parents[1] / "programs" / source)
    with pytest.raises(InputError, match="trace must be True or False"):
        isa.run_reference(program, 5, trace)
    assert isa.run_reference(program, 5, trace=np.bool_(False)).trace in (None, [])


@pytest.mark.parametrize("name", ["SUBLEQ", "FLEQ", "VSUBLEQ"])
def test_compare_report_refuses_what_is_no_comparison_of_its_own(name):
    """compare_report(None, False) failed with "'NoneType' object has no attribute 'ok'"
    (FLEQ's: 'errors'), and as_json="no" printed JSON."""
    import vm.isa
    isa = getattr(vm.isa, name)
    source = {"SUBLEQ": ".code\nhalt\n", "FLEQ": ".data\nx: 1.0\n.code\nx = add(x, x)\nhalt\n",
              "VSUBLEQ": "0 0 -1\n"}[name]
    program = isa.assemble_text(source, "p" + isa.suffixes[0])
    others = [getattr(vm.isa, other) for other in ("SUBLEQ", "FLEQ") if other != name]
    other = others[0].assemble_text(".code\nhalt\n" if others[0].name == "subleq" else
                                    ".data\nx: 1.0\n.code\nhalt\n", "q" + others[0].suffixes[0])
    foreign = others[0].compare(other, others[0].geometry_for(other), 5)
    for result in (None, isa.run_reference(program, 5), foreign):
        with pytest.raises(InputError, match=f"{name}.compare_report takes the result of"):
            isa.compare_report(result, False)
    comparison = isa.compare(program, isa.geometry_for(program), 5)
    with pytest.raises(InputError, match="as_json must be True or False"):
        isa.compare_report(comparison, "no")
    assert "OK" in isa.compare_report(comparison, np.bool_(False)).splitlines()[-1]


@pytest.mark.parametrize("name", ["SUBLEQ", "FLEQ", "VSUBLEQ"])
def test_what_is_no_run_of_the_isa_is_refused_by_reference_checks_and_result_lines(name):
    """FLEQ.reference_checks(program, None) failed with "no attribute 'domain'",
    VSUBLEQ.result_lines(None) with "no attribute 'output'", the others answered ok or {};
    result_lines(run, 'text', as_json='x') was taken, and run_transformer(trace='no') made
    a traced run."""
    import vm.isa
    isa = getattr(vm.isa, name)
    source = {"SUBLEQ": ".code\nhalt\n", "FLEQ": ".data\nx: 1.0\n.code\nx = add(x, x)\nhalt\n",
              "VSUBLEQ": "0 0 -1\n"}[name]
    program = isa.assemble_text(source, "p" + isa.suffixes[0])
    run = isa.run_reference(program, 5)
    for result in (None, 5, isa.listing(program)):
        with pytest.raises(InputError, match=f"result must be a {name} run's result"):
            isa.reference_checks(program, result)
        with pytest.raises(InputError, match=f"result must be a {name} run's result"):
            isa.result_lines(result)
    with pytest.raises(InputError, match="as_json must be True or False"):
        isa.result_lines(run, "text", "x")
    with pytest.raises(InputError, match="trace must be True or False"):
        isa.run_transformer(program, isa.geometry_for(program), 5, trace="no")
    assert isa.reference_checks(program, run).ok and isa.result_lines(run, as_json=True) == {}


@pytest.mark.parametrize("options, message", [
    ({"dtype": "float16"}, "dtype must be one of"),
    ({"progress": 5}, "progress must be a function of the lines parsed")])
def test_program_options_refuse_a_dtype_or_progress_no_instruction_set_could_use(options,
                                                                                 message):
    """SUBLEQ.load and VSUBLEQ.load, which read neither, took dtype='float16' and
    progress=5 (FLEQ refused both)."""
    from vm.isa import ProgramOptions
    with pytest.raises(InputError, match=message):
        ProgramOptions(**options)


@pytest.mark.parametrize("source, options", [
    ("subleq/gcd.sq", {"block_size": 0}), ("vsubleq/hello.dec", {"block_size": 0}),
    ("vsubleq/hello.dec", {"scratch": 0}), ("fleq/calculator.fleq", {"bits": 0}),
    ("fleq/calculator.fleq", {"scratch": 0})])
def test_an_option_of_another_instruction_set_is_refused_even_when_zero(source, options):
    """block_size=0 loaded a SUBLEQ program, scratch=0 a FLEQ one: 0 read as not given."""
    from vm.isa import ProgramOptions
    path = Path(__file__).resolve().parents[1] / "programs" / source
    with pytest.raises(InputError, match="apply to"):
        for_path(path).load(path, ProgramOptions(**options))


@pytest.mark.parametrize("name", ["SUBLEQ", "FLEQ", "VSUBLEQ"])
def test_paper_refuses_a_program_of_another_instruction_set(name):
    """FLEQ.paper(subleq_program, geometry), or a program of 5, gave the paper's numbers as
    if it had been a FLEQ program; None still stands for no program."""
    import vm.isa
    isa = getattr(vm.isa, name)
    source = {"SUBLEQ": ".code\nhalt\n", "FLEQ": ".data\nx: 1.0\n.code\nx = add(x, x)\nhalt\n",
              "VSUBLEQ": "0 0 -1\n"}[name]
    program = isa.assemble_text(source, "p" + isa.suffixes[0])
    geometry = isa.geometry_for(program)
    other = vm.isa.FLEQ if name != "FLEQ" else vm.isa.SUBLEQ
    foreign = other.assemble_text(".code\nhalt\n" if other.name == "subleq" else
                                  ".data\nx: 1.0\n.code\nhalt\n", "q" + other.suffixes[0])
    for wrong in (foreign, 5):
        with pytest.raises(InputError, match=f"{name} takes a {name} program"):
            isa.paper(wrong, geometry)
    assert isa.paper(None, geometry) == isa.paper(program, geometry)
