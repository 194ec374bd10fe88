"""Standard SUBLEQ images on the runtime's active and fused evaluations: X bit-identical to
the full Eq. (1) pass after every pass, and the guard falling back where skipping columns
would be wrong."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from assembler.vsq import assemble
from tests.strategies import vsubleq_images
from vm.machines.vsubleq.reference import Image, run_reference
from vm.machines.vsubleq.run import TransformerRun, run_transformer
from vm.runtime.executor import evaluator_for
from vm.transformer.layers import from_internal
from vm.tools.vsubleq_bench import counting_loop

PROGRAMS = Path(__file__).resolve().parents[1] / "programs" / "vsubleq"
INPUTS = {"echo.vsq": b"hi!\n", "calc.vsq": b"12*-34\n"}


def program(name: str, bits: int = 16) -> Image:
    path = PROGRAMS / name
    assembled = assemble(path.read_text(), str(path), bits)
    return Image.from_words(assembled.words, assembled.bits, str(path))


def lockstep(image: Image, passes: int, evaluation: str, input_bytes: bytes = b"",
             temperature: float | None = None) -> TransformerRun:
    """Run the full pass and `evaluation` side by side, asserting X equal after every pass;
    returns the accelerated run."""
    if evaluation == "fused":
        pytest.importorskip("numba")
    full = TransformerRun(image, input_bytes=input_bytes, temperature=temperature,
                          checked=False)
    fast = TransformerRun(image, input_bytes=input_bytes, temperature=temperature,
                          checked=False, accelerate=partial(evaluator_for,
                                                            evaluation=evaluation))
    assert fast.evaluation == evaluation
    for step in range(passes):
        full.step()
        if evaluation == "fused":
            assert fast.advance(1) == 1
        else:
            fast.step()
        assert torch.equal(full.X, fast.X), f"X differs after pass {step}"
        if full.halted:
            break
    return fast


@pytest.mark.parametrize("evaluation", ["active", "fused"])
@pytest.mark.parametrize("name", sorted(path.name for path in PROGRAMS.glob("*.vsq")))
def test_every_program_is_bit_identical_after_every_pass(name: str, evaluation: str) -> None:
    fast = lockstep(program(name), 1500, evaluation, INPUTS.get(name, b""))
    assert fast.halted and fast.active.fallbacks == 0
    assert evaluation == "active" or fast.active.fused_passes > 0, "the fused form ran"


@pytest.mark.parametrize("evaluation", ["active", "fused"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=vsubleq_images(bits=8, io=True))
def test_random_self_modifying_images_are_bit_identical(evaluation: str, data) -> None:
    lockstep(data, 60, evaluation, b"\x01\x80x")


def test_a_large_memory_stays_bit_identical_over_many_passes() -> None:
    lockstep(counting_loop(4096, 16), 300, "fused")


@pytest.mark.parametrize("evaluation", ["active", "fused"])
def test_runs_in_chunks_give_the_reference_steps_memory_and_output(evaluation: str) -> None:
    if evaluation == "fused":
        pytest.importorskip("numba")
    image, data = program("calc.vsq"), INPUTS["calc.vsq"]
    expected = run_reference(image, 10_000, data)
    got = run_transformer(image, 10_000, input_bytes=data,
                          accelerate=partial(evaluator_for, evaluation=evaluation))
    assert (got.steps, got.memory, got.output, got.halted) == (
        expected.steps, expected.memory, expected.output, True)


def test_the_guard_falls_back_where_skipping_would_be_wrong() -> None:
    """At temperature 0.5 a pass changes columns besides the one it writes; the active
    evaluation must notice, run those passes in full and stay identical."""
    image = counting_loop(64, 8)
    probe = TransformerRun(image, temperature=0.5, checked=False)
    changed = []
    for _ in range(10):
        before = probe.X.clone()
        probe.step()
        changed.append(int((before != probe.X)[:, 0, 1:].any(0).sum()))
    assert max(changed) >= 2
    fast = lockstep(image, 30, "active", temperature=0.5)
    assert fast.active.fallbacks > 0


def test_checked_and_full_runs_use_the_full_pass() -> None:
    pytest.importorskip("numba")
    image = program("hello.vsq")
    accelerate = partial(evaluator_for, evaluation="fused")
    assert TransformerRun(image, checked=True, accelerate=accelerate).evaluation == "full"
    assert TransformerRun(image, checked=False, accelerate=partial(
        evaluator_for, evaluation="full")).evaluation == "full"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_runs_are_graphed_by_default_and_give_the_reference_result() -> None:
    image, data = program("calc.vsq"), INPUTS["calc.vsq"]
    expected = run_reference(image, 10_000, data)
    run = TransformerRun(image, device="cuda", input_bytes=data, checked=False,
                         accelerate=partial(evaluator_for, evaluation="auto"))
    assert run.evaluation == "fused"
    got = run_transformer(image, 10_000, input_bytes=data, device="cuda",
                          accelerate=partial(evaluator_for, evaluation="auto"))
    assert (got.steps, got.memory, got.output, got.halted) == (
        expected.steps, expected.memory, expected.output, True)


@pytest.mark.parametrize("evaluation", ["active", "fused"])
def test_a_loaded_card_keeps_the_evaluation_bit_identical(evaluation: str) -> None:
    """The image REPL loads a rebuilt machine's state into the X an evaluation is bound to
    (TransformerRun.load_card, after input is fed): from there on X must still equal the
    full pass's after every pass."""
    if evaluation == "fused":
        pytest.importorskip("numba")
    image = program("echo.vsq")
    full = TransformerRun(image, input_bytes=b"hi", checked=False)
    fast = TransformerRun(image, input_bytes=b"hi", checked=False,
                          accelerate=partial(evaluator_for, evaluation=evaluation))
    card = from_internal(full.X).clone()  # the start, loaded again after 7 passes
    for run in (full, fast):
        run.advance(7)
        run.load_card(card)
    for step in range(200):
        full.step()
        assert fast.advance(1) == 1 or fast.halted
        assert torch.equal(full.X, fast.X), f"X differs after pass {step} from the card"
        if full.halted:
            break
    assert full.halted and fast.active.fallbacks == 0


def test_an_image_run_by_default_goes_on_without_a_fused_pass_numba_has_not_compiled(
        monkeypatch) -> None:
    """Forced here: no machine code. The default evaluation's run warns, goes on with the
    torch active pass and gives the reference's result; `--evaluation fused` would compile."""
    import vm.runtime.fused as fused_module
    from vm.common.errors import NotCompiledWarning
    pytest.importorskip("numba")
    monkeypatch.setattr(fused_module, "_has_machine_code", lambda kernel, arguments: False)
    image = program("hello.vsq")
    run = TransformerRun(image, checked=False, accelerate=partial(evaluator_for,
                                                                  evaluation="auto"))
    assert run.evaluation == "fused"
    with pytest.warns(NotCompiledWarning, match="numba has not compiled the fused pass"):
        run.advance(10_000)
    assert run.evaluation == "active" and run.halted
    assert run.state().output == run_reference(image).output
