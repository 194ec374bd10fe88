"""Stochastic reads: Gumbel noise on the scratch column's attention scores.

Exact runs never sample. With `ReadNoise(temperature)`, every head's scores at the scratch
queries get lam * temperature * G added, G standard Gumbel, before the softmax. By the
Gumbel-max trick the (very sharp, lam-scaled) softmax then picks key i with probability
softmax(s / temperature)_i over the raw scores s = (Q x_query) . (K x_key): a pointer read
returns the addressed cell with high probability and a cell whose address code differs in
few bits otherwise, so one program run on the transformer yields a random answer whose
distribution the temperature controls (docs/test_time_scaling.md).
"""

from __future__ import annotations

import math

import torch


class ReadNoise:
    """Seeded Gumbel noise for the reads of one batched run (one generator per run)."""

    def __init__(self, temperature: float, seed: int = 0,
                 device: str | torch.device = "cpu") -> None:
        if not math.isfinite(temperature) or temperature <= 0:
            raise ValueError(f"sampling temperature must be positive and finite, got "
                             f"{temperature}")
        self.temperature = temperature
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.running: torch.Tensor | None = None
        """Which programs of the batch still sample, shape (batch,): a program that has
        halted reads exactly, so its answer stays what it was when it halted."""

    def scales(self, lams: torch.Tensor, batch: int) -> torch.Tensor:
        """Each (program, head) pair's noise scale lam * temperature, program-major
        (heads x batch,), zero for the programs that no longer sample."""
        scales = (lams * self.temperature).repeat(batch)
        if self.running is not None:
            scales = scales * self.running.to(lams.dtype).repeat_interleave(lams.numel())
        return scales

    def gumbel(self, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """Standard Gumbel samples of `shape`, in `like`'s dtype and device."""
        uniform = torch.rand(shape, generator=self.generator, dtype=like.dtype,
                             device=like.device)
        tiny = torch.finfo(like.dtype).tiny
        exponential = (-torch.log(uniform.clamp_(min=tiny))).clamp_(min=tiny)
        return -torch.log(exponential)
