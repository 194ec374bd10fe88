"""Stochastic reads (vm/transformer/sampling.py): off by default, seeded, and a real sampler."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from assembler.subleq import assemble_file
from vm.common.errors import InputError
from vm.machines.subleq.punchcard import geometry_for
from vm.machines.subleq.reference import run_reference
from vm.runtime.executor import EngineConfig, TransformerExecutor
from vm.tools.test_time import sample_answers
from vm.transformer.layers import to_internal
from vm.transformer.sampling import ReadNoise

ROOT = Path(__file__).resolve().parents[1]
FACTORIAL = assemble_file(ROOT / "programs" / "subleq" / "factorial.sq")
GEOMETRY = geometry_for(FACTORIAL)
FACT = run_reference(FACTORIAL, 10_000).memory[FACTORIAL.symbols["fact"].address]


def test_sampling_is_off_by_default_and_runs_stay_exact():
    config = EngineConfig()
    assert config.sampling is None
    executor = TransformerExecutor(GEOMETRY, config)
    result = executor.results(executor.run(executor.load([FACTORIAL]), 2_000))[0]
    assert result.halted and result.memory[FACTORIAL.symbols["fact"].address] == FACT


def test_a_vanishing_temperature_leaves_every_pass_bit_identical():
    executor = TransformerExecutor(GEOMETRY, EngineConfig(evaluation="full"))
    exact = to_internal(executor.load([FACTORIAL] * 4).clone())
    noisy = exact.clone()
    noise = ReadNoise(1e-4, seed=5)
    for _ in range(100):
        executor.model.step_(exact)
        executor.model.step_(noisy, noise=noise)
        assert torch.equal(exact, noisy)


def test_seeded_sampling_is_reproducible_and_the_seed_matters():
    first = sample_answers(FACTORIAL, GEOMETRY, 16, 0.25, 7, "fact", 2_000)
    again = sample_answers(FACTORIAL, GEOMETRY, 16, 0.25, 7, "fact", 2_000)
    other = sample_answers(FACTORIAL, GEOMETRY, 16, 0.25, 8, "fact", 2_000)
    assert first == again
    assert first != other


def test_noise_spreads_the_answers_and_more_noise_spreads_them_more():
    def p_correct(temperature: float) -> float:
        answers = sample_answers(FACTORIAL, GEOMETRY, 32, temperature, 0, "fact", 2_000)
        return answers.count(FACT) / len(answers)

    low, high = p_correct(0.1), p_correct(0.3)
    assert low > 0.9
    assert high < low - 0.3


@pytest.mark.parametrize("temperature", [0.0, -1.0, math.inf, math.nan])
def test_bad_temperatures_are_refused(temperature):
    with pytest.raises(ValueError, match="temperature must be positive and finite"):
        ReadNoise(temperature)
    with pytest.raises(InputError):
        EngineConfig(sampling=temperature)


def test_a_noise_temperature_whose_scale_overflows_is_refused():
    """lam * 1e40 is inf in float32: the reads became NaN and every sample answered 0."""
    with pytest.raises(InputError, match="at most"):
        EngineConfig(sampling=1e40)


def test_gumbel_samples_are_finite_with_the_standard_gumbel_mean():
    noise = ReadNoise(1.0, seed=1)
    like = torch.zeros(1, dtype=torch.float32)
    samples = noise.gumbel((200_000,), like)
    assert torch.isfinite(samples).all()
    assert abs(samples.double().mean().item() - 0.5772156649) < 0.02


def test_gumbel_max_picks_each_key_with_its_softmax_probability():
    """The principle of a stochastic read: argmax(s + T G) ~ softmax(s / T)."""
    scores = torch.tensor([0.0, -0.2, -0.5, -1.5], dtype=torch.float64)
    temperature = 0.3
    noise = ReadNoise(temperature, seed=2)
    draws = 100_000
    gumbel = noise.gumbel((draws, scores.numel()), scores)
    picked = torch.argmax(scores + temperature * gumbel, dim=1)
    observed = np.bincount(picked.numpy(), minlength=scores.numel()) / draws
    expected = torch.softmax(scores / temperature, dim=0).numpy()
    assert np.abs(observed - expected).max() < 0.01


def test_a_halted_program_stops_sampling_so_its_answer_stays():
    """Runs that halt early keep their answer while the others go on sampling."""
    short = sample_answers(FACTORIAL, GEOMETRY, 32, 0.25, 3, "fact", 190)
    long = sample_answers(FACTORIAL, GEOMETRY, 32, 0.25, 3, "fact", 3_000)
    halted = [index for index, answer in enumerate(short) if answer is not None]
    assert 16 < len(halted) < 32
    assert [long[index] for index in halted] == [short[index] for index in halted]
