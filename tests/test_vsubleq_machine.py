"""The standard SUBLEQ transformer against its reference, after every step."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assembler.dec import load_image
from tests.strategies import vsubleq_images
from vm.common.errors import InputError
from vm.machines.vsubleq.layout import VGeometry
from vm.machines.vsubleq.reference import Image, run_reference
from vm.machines.vsubleq.run import TransformerRun, compare, run_transformer

PROGRAMS = Path(__file__).resolve().parents[1] / "programs" / "vsubleq"

HAND_WRITTEN = {
    "wrap then halt with a write": [6, 7, -1, 4, 4, -1, 1, -128],
    "fall off the end, wrapped fetch": [7, 7, 6, 0, 0, 0, 7, 4],
    # 0 jumps to 5 = m - 3, whose positive result falls through to 8 = m: halt
    "fall off from m - 3": [7, 7, 5, 0, 0, 3, 6, 0],
    # 0 and 3 subtract 6 from word 2, the c of 0: the third pass jumps to the patched -3
    "patch own jump target": [6, 2, 9, 6, 2, 0, 6, 0],
    # 3 moves the b of 0 down one word; 0's second pass so rewrites the halt's target
    "retarget a write by rewriting code": [13, 12, 9, 13, 1, 6, 14, 14, 0, 14, 14, -1, 3, 1,
                                           0, 0],
}


def image_file(name: str, bits: int) -> Image:
    return Image.from_words(load_image((PROGRAMS / name).read_text()), bits)


@pytest.mark.parametrize("bits", [8, 16, 32])
def test_array_sum_matches_after_every_step(bits: int) -> None:
    result = compare(image_file("array_sum.dec", bits), 200)
    assert result.ok and result.halted, result.divergence
    assert run_transformer(image_file("array_sum.dec", bits), 200).memory[23] == 24


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
def test_hand_written_images_match(name: str, bits: int) -> None:
    image = Image.from_words(HAND_WRITTEN[name], bits)
    expected = run_reference(image, 50)
    result = compare(image, 50)
    assert result.ok, result.divergence
    assert result.halted == expected.halted


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([8, 16]).flatmap(lambda bits: vsubleq_images(bits)))
def test_random_images_match(image: Image) -> None:
    result = compare(image, 30)
    assert result.ok, result.divergence


def test_a_halted_machine_stays_put() -> None:
    run = TransformerRun(Image.from_words(HAND_WRITTEN["wrap then halt with a write"], 8))
    for _ in range(2):
        run.step()
    halted = run.state()
    for _ in range(3):
        run.step()
    assert halted[2] and run.state() == halted


def test_io_is_refused_on_the_transformer() -> None:
    with pytest.raises(InputError, match="no I/O"):
        run_transformer(image_file("hello.dec", 8), 100)
    with pytest.raises(InputError, match="no I/O"):
        compare(image_file("echo.dec", 8), 100)


def test_geometry_refuses_bad_sizes() -> None:
    with pytest.raises(InputError, match="power of two"):
        VGeometry(12, 8)
    with pytest.raises(InputError, match="cannot address"):
        VGeometry(256, 8)
