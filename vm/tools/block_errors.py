"""Measured error of FLEQ function blocks, on the transformer, against their bounds.

A block is measured inside the FLEQ machine, not in numpy: every sample is a
one-instruction program `C = f(A, B)` of a geometry that holds only that
block, and a batch of punchcards that differ only in their data runs one pass
of the looped transformer. The decoded C is compared with the block's
`reference` on the same operands, entry by entry, and with its documented
bound `bound_at(dtype, exact)`.

Operands are sampled on the block's `domain()`: its edges (and the edges of
an excluded gap), a linear grid, log-spaced magnitudes of both signs and
uniform draws; matrix operands take their entries from that pool. Where the
domain bounds the result (mul: |result| <= 20) operands are drawn from the
same range and a sample whose result falls outside is scaled down onto the
domain's edge (exact for products) or dropped. Unbounded domains are sampled
up to UNBOUNDED_SPAN. Operands are rounded to the run's dtype first, so the
punchcard holds exactly the values the reference sees.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from assembler.fleq_program import ONE_CELL, ZERO_CELL, FleqInstruction, FleqProgram, padded
from assembler.fleq import MAX_BLOCK
from vm.common.errors import InputError
from vm.common.limits import is_whole_number
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.runtime.config import check_dtype_name
from vm.runtime.executor import EngineConfig, TransformerExecutor
from vm.functions import make_block
from vm.functions.base import Domain, FunctionBlock, Shape

UNBOUNDED_SPAN = 1e4
"""Largest magnitude sampled where a domain has no bound."""
RELATIVE_FLOOR = 1e-3
"""Relative errors are taken over exact entries with |f| >= this (smaller ones say little)."""
BATCH = 512
MAX_COUNT = 100_000
"""Most samples one `measure` draws: count = 10**9 built operand pairs for minutes before a
pass ran (each is a transformer column's worth of work; the sweeps use a few thousand)."""
A_CELL, B_CELL, C_CELL = 2, 3, 4
EDGE_MARGIN = 1.0 - 1e-9
"""A result-domain sample is scaled to just inside the edge (rounding may not cross it)."""


@dataclass(frozen=True)
class Sample:
    """One measured point: operands on their true shapes, exact and transformer results."""

    a: np.ndarray
    b: np.ndarray | None
    exact: np.ndarray
    computed: np.ndarray

    @property
    def error(self) -> np.ndarray:
        return np.abs(self.computed - self.exact)


@dataclass(frozen=True)
class BlockErrors:
    """What one measurement found for one block configuration, dtype and block size d."""

    block: FunctionBlock
    dtype: str
    d: int
    samples: tuple[Sample, ...]
    bounded: bool
    """False when the block documents no bound for this dtype."""

    @property
    def points(self) -> int:
        return len(self.samples)

    @property
    def max_error(self) -> float:
        return max((float(s.error.max()) for s in self.samples), default=0.0)

    @property
    def max_relative_error(self) -> float:
        worst = 0.0
        for sample in self.samples:
            large = np.abs(sample.exact) >= RELATIVE_FLOOR
            if large.any():
                worst = max(worst, float((sample.error[large] / np.abs(sample.exact[large]))
                                         .max()))
        return worst

    @cached_property
    def bounds(self) -> tuple[np.ndarray, ...]:
        """Per sample: bound_at(dtype, exact) entry by entry (one vectorized call: some
        blocks compute their bound at some cost)."""
        if not self.bounded or not self.samples:
            return tuple(np.full(s.exact.shape, np.nan) for s in self.samples)
        flat = np.concatenate([s.exact.ravel() for s in self.samples])
        values = np.broadcast_to(np.asarray(self.block.bound_at(self.dtype, flat), float),
                                 flat.shape)
        ends = np.cumsum([s.exact.size for s in self.samples])[:-1]
        return tuple(part.reshape(s.exact.shape)
                     for part, s in zip(np.split(values, ends), self.samples))

    @property
    def max_bound(self) -> float:
        """The largest documented bound over the measured points (nan without a bound)."""
        return max((float(b.max()) for b in self.bounds), default=float("nan"))

    @cached_property
    def ratios(self) -> np.ndarray:
        """Per sample: max over entries of error / bound_at(exact) (inf where the bound is 0
        and the error is not; nan when the block documents no bound)."""
        if not self.bounded:
            return np.full(self.points, np.nan)
        ratios = []
        for sample, bound in zip(self.samples, self.bounds):
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(sample.error == 0, 0.0, sample.error / bound)
            ratios.append(float(ratio.max()))
        return np.array(ratios)

    @property
    def worst_ratio(self) -> float:
        """Largest error / bound over every entry measured (<= 1: within the bound)."""
        ratios = self.ratios
        return float(ratios.max()) if ratios.size else 0.0

    def violations(self) -> list[Sample]:
        """Samples whose error exceeds the documented bound somewhere."""
        return [s for s, r in zip(self.samples, self.ratios) if r > 1.0]

    @property
    def within_bound(self) -> bool:
        return self.bounded and not self.violations()


def documents_bound(block: FunctionBlock, dtype: str) -> bool:
    """Whether the block states a finite bound for `dtype` (a block may leave float32 out)."""
    try:
        parts = (block.error_bound(dtype), block.relative_error_bound(dtype))
    except (NotImplementedError, KeyError, ValueError):
        return False
    return all(np.isfinite(part) for part in parts)


# -- shapes and samples ---------------------------------------------------------------------
def shape_pairs(block: FunctionBlock, d: int) -> list[tuple[Shape, Shape | None]]:
    """Operand shapes the block accepts at block size d, among scalars, d-vectors, d-row
    vectors, d x d matrices (and 2 x 2 when d > 2)."""
    candidates = sorted({(1, 1), (d, 1), (1, d), (d, d), (min(d, 2), min(d, 2))})
    pairs: list[tuple[Shape, Shape | None]] = []
    for a in candidates:
        for b in (candidates if block.arity == 2 else [None]):
            try:
                out = block.output_shape(a, b)
            except ValueError:
                continue
            if 1 <= out[0] <= d and 1 <= out[1] <= d:
                pairs.append((a, b))
    return pairs


def _finite(value: float, default: float) -> float:
    return value if np.isfinite(value) else default


def edge_values(domain: Domain) -> np.ndarray:
    """The domain's ends and the ends of its excluded gap (0 when inside)."""
    low, high = _finite(domain.low, -UNBOUNDED_SPAN), _finite(domain.high, UNBOUNDED_SPAN)
    values = [low, high, 0.0]
    if domain.exclude_low is not None:
        values += [domain.exclude_low, domain.exclude_high]
    values = np.array(values)
    return values[[_inside(domain, v) for v in values]]


def _inside(domain: Domain, value: float) -> bool:
    return domain.applies_to == "result" or domain.contains(np.array([value]))


def value_pool(domain: Domain, rng: np.random.Generator, size: int = 64) -> np.ndarray:
    """Scalars spread over the domain's range: edges, a grid, log-spaced magnitudes of both
    signs (down to 1e-6 of the largest), uniform draws; only values inside are kept."""
    low, high = _finite(domain.low, -UNBOUNDED_SPAN), _finite(domain.high, UNBOUNDED_SPAN)
    top = max(abs(low), abs(high))
    smallest = domain.exclude_high if domain.exclude_high is not None else top * 1e-6
    magnitudes = np.geomspace(max(smallest, top * 1e-6), top, size)
    pool = np.concatenate([edge_values(domain), np.linspace(low, high, size), magnitudes,
                           -magnitudes, rng.uniform(low, high, size)])
    pool = pool[(pool >= low) & (pool <= high)]
    return np.unique(pool[[_inside(domain, v) for v in pool]])


def _onto_domain(block: FunctionBlock, a: np.ndarray, b: np.ndarray | None,
                 domain: Domain) -> tuple[np.ndarray, np.ndarray | None] | None:
    """Operands whose result lies in a result domain: as drawn, else A scaled so the
    largest result entry sits on the edge (exact for products), else None."""
    if domain.applies_to != "result":
        return a, b
    exact = np.asarray(block.reference(a, b), dtype=float)
    if domain.contains(exact):
        return a, b
    edge = min(abs(_finite(domain.low, -UNBOUNDED_SPAN)), abs(_finite(domain.high,
                                                                      UNBOUNDED_SPAN)))
    scaled = a * (edge / np.abs(exact).max() * EDGE_MARGIN)
    if domain.contains(np.asarray(block.reference(scaled, b), dtype=float)):
        return scaled, b
    return None


def sample_operands(block: FunctionBlock, d: int, count: int,
                    rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """About `count` operand pairs in the block's domain, over every accepted shape: every
    combination of edge values for scalars first, then random draws from the pool."""
    domain = block.domain()
    pool, edges = value_pool(domain, rng), edge_values(domain)
    pairs = shape_pairs(block, d)
    if not pairs:
        raise ValueError(f"{block.name} accepts none of the shapes tried at d={d}")
    operands: list[tuple[np.ndarray, np.ndarray | None]] = []
    if ((1, 1), (1, 1) if block.arity == 2 else None) in pairs:
        combos = itertools.product(edges, edges) if block.arity == 2 else ((e, None)
                                                                          for e in edges)
        for a, b in combos:
            operands.append((np.full((1, 1), a), None if b is None else np.full((1, 1), b)))
    per_shape = max(1, (count - len(operands)) // len(pairs))
    for a_shape, b_shape in pairs:
        for _ in range(per_shape):
            operands.append((rng.choice(pool, size=a_shape),
                             None if b_shape is None else rng.choice(pool, size=b_shape)))
    kept = [_onto_domain(block, a, b, domain) for a, b in operands]
    return [pair for pair in kept if pair is not None][:max(count, len(edges) ** 2)]


# -- running on the transformer ---------------------------------------------------------
def one_instruction_program(block: FunctionBlock, d: int, a: np.ndarray,
                            b: np.ndarray | None) -> FleqProgram:
    """`C = f(A, B)` then EOF, in a geometry holding only this block: cells @zero, @one,
    A, B, C (B stays zero for unary blocks)."""
    out = block.output_shape(a.shape, None if b is None else b.shape)
    b_shape = (1, 1) if b is None else b.shape
    instruction = FleqInstruction(block.name, A_CELL, ZERO_CELL if b is None else B_CELL,
                                  C_CELL, ONE_CELL, 1, out, a.shape, b_shape,
                                  text=f"C = {block.name}(A{'' if b is None else ', B'})")
    functions = ((block.name, tuple(sorted(block.values.items()))),)
    return FleqProgram([instruction], sample_cells(d, a, b), d=d, functions=functions,
                       source=f"<{block.name} sample>")


def sample_cells(d: int, a: np.ndarray, b: np.ndarray | None) -> list[np.ndarray]:
    """The data of `one_instruction_program`: @zero, @one, A, B (zero if unary), C = 0."""
    return [padded(0.0, d), padded(1.0, d), padded(a, d), padded(0.0 if b is None else b, d),
            padded(0.0, d)]


def _in_dtype(value: np.ndarray | None, dtype: str) -> np.ndarray | None:
    return None if value is None else np.asarray(value, dtype=dtype).astype(float)


def run_samples(block: FunctionBlock, d: int, operands: list[tuple[np.ndarray, np.ndarray | None]],
                dtype: str) -> list[Sample]:
    """One transformer pass per operand pair (batched per operand shape); the decoded C."""
    operands = [(_in_dtype(a, dtype), _in_dtype(b, dtype)) for a, b in operands]
    by_shape: dict[tuple, list[int]] = {}
    for index, (a, b) in enumerate(operands):
        by_shape.setdefault((a.shape, None if b is None else b.shape), []).append(index)
    results: dict[int, Sample] = {}
    for indices in by_shape.values():
        template = one_instruction_program(block, d, *operands[indices[0]])
        executor = TransformerExecutor(fleq_geometry_for(template), EngineConfig(dtype=dtype))
        out = template.instructions[0].shape
        for start in range(0, len(indices), BATCH):
            chunk = indices[start:start + BATCH]
            programs = [replace(template, cells=sample_cells(d, *operands[i])) for i in chunk]
            X = executor.step(executor.load(programs))
            for i, (cells, pc) in zip(chunk, executor.decode(X)):
                if pc != 1:
                    raise RuntimeError(f"{block.name}: the pass did not reach EOF (pc {pc})")
                a, b = operands[i]
                exact = np.asarray(block.reference(a, b), dtype=float).reshape(out)
                results[i] = Sample(a, b, exact, cells[C_CELL][:out[0], :out[1]])
    return [results[i] for i in range(len(operands))]


def measure(block: FunctionBlock | str, dtype: str = "float64", d: int = 1, count: int = 200,
            seed: int = 0, operands: list[tuple[np.ndarray, np.ndarray | None]] | None = None,
            **parameters: float) -> BlockErrors:
    """Measure a block (an instance, or a registered name with parameters) on the
    transformer: `count` samples of its domain, or the given operands."""
    if isinstance(block, str):
        block = make_block(block, **parameters)
    check_dtype_name(dtype)
    if not is_whole_number(d) or not 1 <= d <= MAX_BLOCK:  # 2.5: a TypeError in numpy
        raise InputError(f"d must be a whole number from 1 to {MAX_BLOCK}, got {d!r:.40}")
    if operands is None:
        if not is_whole_number(count) or not 1 <= count <= MAX_COUNT:  # 0, -1 and 2.5 drew
            # the edge values alone, as if asked for them
            raise InputError(f"count must be a whole number from 1 to {MAX_COUNT:,}, got "
                             f"{count!r:.40}")
        if not is_whole_number(seed) or seed < 0:  # numpy's "expected non-negative integer"
            raise InputError(f"seed must be a whole number, at least 0, got {seed!r:.40}")
        operands = sample_operands(block, d, count, np.random.default_rng(seed))
    samples = run_samples(block, d, operands, dtype)
    return BlockErrors(block, dtype, d, tuple(samples), documents_bound(block, dtype))


def summary_line(errors: BlockErrors) -> str:
    """`name: value` style one-line summary of a measurement."""
    ratio = f"{errors.worst_ratio:.3g}" if errors.bounded else "no bound"
    return (f"{errors.block!r} {errors.dtype} d={errors.d}: points {errors.points}, "
            f"max error {errors.max_error:.3g}, max relative error "
            f"{errors.max_relative_error:.3g}, error/bound {ratio}")
