"""Exact simulations (exact, causal, window, sink): output, normalizers and oracle calls.

The reference is a numpy transcription of Definitions 2.1-2.5 (one masked softmax per head
over all N keys); the call counts are the formulas of docs/chunked_attention.md, written out
again here, and a few counted by hand.
"""

from __future__ import annotations

from math import ceil

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vm.attention.chunked import parts, reference
from vm.attention.chunked.model import HeadWeights, LargeTransformer, Mask, random_instance
from vm.attention.chunked.oracle import AttentionOracle
from vm.attention.chunked.simulate import expected_calls, mode_mask, simulate
from vm.common.errors import InputError, RunFailure

EXACT_MODES = ["exact", "causal", "window", "sink"]


def allowed(kind: str, n: int, window: int, sinks: int) -> np.ndarray:
    """Which key j query i may see, straight from Definitions 2.3-2.5 (0-based)."""
    i, j = np.indices((n, n))
    if kind == "none":
        return np.ones((n, n), dtype=bool)
    if kind == "causal":
        return j <= i
    if kind == "window":
        return (j <= i) & (j > i - window)
    return (j <= i) & ((j > i - window) | (j < sinks))


def numpy_forward(model: LargeTransformer, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Output and log normalizers (layers x heads x N) of the model, in float64."""
    h = x.double().numpy()
    m = model.head_dim
    visible = allowed(model.mask.kind, len(h), model.mask.window, model.mask.sinks)
    all_lse = []
    for layer in model.layers:
        outputs, lses = [], []
        for index, head in enumerate(layer):
            part = h[:, index * m:(index + 1) * m]
            q, k, v = (part @ w.double().numpy() for w in (head.query, head.key, head.value))
            scores = np.where(visible, q @ k.T, -np.inf)
            peak = scores.max(axis=1, keepdims=True)
            weights = np.exp(scores - peak)
            total = weights.sum(axis=1, keepdims=True)
            outputs.append(weights @ v / total)
            lses.append((peak + np.log(total))[:, 0])
        h = np.concatenate(outputs, axis=1)
        all_lse.append(lses)
    return h, np.array(all_lse)


def row_error(approx: torch.Tensor, exact: np.ndarray) -> float:
    diff = np.linalg.norm(approx.double().numpy() - exact, axis=1)
    return float((diff / np.linalg.norm(exact, axis=1)).max())


def count_formula(mode: str, n: int, m: int, heads: int, layers: int, oracle_heads: int,
                  oracle_layers: int, window: int = 0, sinks: int = 0) -> int:
    blocks = ceil(n / (m - 1))
    per_head = {
        "exact": 2 * blocks ** 2,
        "causal": 2 * blocks ** 2,
        "sampled": 2 * blocks,
        "window": 2 + 4 * ceil((n - window) / (m - window)),
        "sink": 2 + 4 * ceil((n - window - sinks) / (m - window))
        + 2 * ceil((n - window - sinks) / (m - sinks - 1)),
    }[mode]
    return layers * ceil(heads * per_head / (oracle_heads * oracle_layers))


CASES = [
    # (mode, n, m, heads, layers, oracle heads, oracle layers, window, sinks)
    ("exact", 130, 16, 2, 2, 1, 1, 0, 0),
    ("exact", 97, 33, 3, 1, 2, 2, 0, 0),
    ("causal", 130, 16, 2, 2, 1, 1, 0, 0),
    ("causal", 101, 20, 1, 3, 2, 1, 0, 0),
    ("window", 130, 16, 2, 2, 1, 1, 12, 0),
    ("window", 203, 32, 1, 2, 1, 2, 24, 0),
    ("sink", 130, 20, 2, 2, 1, 1, 12, 3),
    ("sink", 211, 32, 2, 1, 2, 2, 24, 4),
]


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize("case", CASES, ids=lambda case: "-".join(map(str, case[:7])))
def test_matches_direct_attention_with_the_formula_count(case: tuple, dtype: torch.dtype,
                                                         tolerance: float) -> None:
    mode, n, m, heads, layers, o_heads, o_layers, window, sinks = case
    x, model = random_instance(n, heads, layers, 4, mode_mask(mode, window, sinks), dtype, seed=n)
    result = simulate(model, x, mode, m, o_heads, o_layers)
    expected, log_normalizers = numpy_forward(model, x)
    assert row_error(result.output, expected) <= tolerance
    assert result.output.dtype == dtype
    np.testing.assert_allclose(result.log_normalizers.double().numpy(), log_normalizers,
                               rtol=0, atol=100 * tolerance)
    assert result.calls == count_formula(mode, n, m, heads, layers, o_heads, o_layers,
                                         window, sinks)
    assert result.calls == result.expected_calls


@pytest.mark.parametrize("mode, sizes, calls", [
    # exact, N=10, M=4: blocks of 3 -> T=4 -> 2*16 = 32 per head; H=2, L=3, H'L'=4: 3*16.
    ("exact", {"n": 10, "max_length": 4, "heads": 2, "layers": 3, "oracle_heads": 2,
               "oracle_layers": 2}, 48),
    # causal: 2*4 diagonal + 4*6 off-diagonal = 32 per head, one head one layer.
    ("causal", {"n": 10, "max_length": 4, "heads": 1, "layers": 1}, 32),
    # window r=2, N=10, M=6: 2 for queries 0..1, chunks of 4 over 2..9 -> 2 chunks * 4.
    ("window", {"n": 10, "max_length": 6, "heads": 1, "layers": 1, "window_size": 2}, 10),
    # sink r=2, s=2, N=20, M=8: 2 + 4*ceil(16/6) + 2*ceil(16/5) = 2 + 12 + 8.
    ("sink", {"n": 20, "max_length": 8, "heads": 1, "layers": 1, "window_size": 2,
              "sinks": 2}, 22),
    # sampled, N=10, M=4: 4 blocks, 2 calls each; H=3 heads with H'L'=2: ceil(24/2).
    ("sampled", {"n": 10, "max_length": 4, "heads": 3, "layers": 1, "oracle_heads": 2}, 12),
])
def test_call_counts_counted_by_hand(mode: str, sizes: dict, calls: int) -> None:
    assert expected_calls(mode, **sizes) == calls
    x, model = random_instance(sizes["n"], sizes["heads"], sizes["layers"], 2,
                               mode_mask(mode, sizes.get("window_size", 0), sizes.get("sinks", 0)),
                               torch.float64, seed=0)
    result = simulate(model, x, mode, sizes["max_length"], sizes.get("oracle_heads", 1),
                      sizes.get("oracle_layers", 1))
    assert result.calls == calls


@st.composite
def shapes(draw: st.DrawFn) -> tuple:
    mode = draw(st.sampled_from(EXACT_MODES))
    sinks = draw(st.integers(1, 3)) if mode == "sink" else 0
    least = {"exact": 2, "causal": 2, "window": 2, "sink": sinks + 2}[mode]
    n = draw(st.integers(least, 40))
    m = draw(st.integers(least, n))
    window = draw(st.integers(1, m - sinks - 1)) if mode in ("window", "sink") else 0
    heads, layers = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    oracle_heads, oracle_layers = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    head_dim, seed = draw(st.integers(1, 3)), draw(st.integers(0, 99))
    return (mode, n, m, heads, layers, oracle_heads, oracle_layers, window, sinks, head_dim, seed)


@settings(max_examples=60, deadline=None)
@given(shapes())
def test_random_shapes_are_exact_in_float64(shape: tuple) -> None:
    """1e-10 in float64; a window subtraction that cancels loses digits in proportion to the
    amplification it reports (docs: 1e-10 up to an amplification of 1e3, then linear)."""
    mode, n, m, heads, layers, o_heads, o_layers, window, sinks, head_dim, seed = shape
    x, model = random_instance(n, heads, layers, head_dim, mode_mask(mode, window, sinks),
                               torch.float64, seed)
    try:
        result = simulate(model, x, mode, m, o_heads, o_layers)
    except RunFailure as failure:
        assert mode in ("window", "sink") and "cancels" in str(failure)
        return
    expected, _ = numpy_forward(model, x)
    assert row_error(result.output, expected) <= 1e-10 * max(1.0, result.amplification / 1e3)
    assert result.calls == count_formula(mode, n, m, heads, layers, o_heads, o_layers, window,
                                         sinks)
    if mode in ("exact", "causal"):
        assert result.amplification == 1.0


def test_attention_comes_only_from_oracle_calls_of_at_most_m_tokens(monkeypatch) -> None:
    lengths = []
    original = AttentionOracle.__call__

    def recording(self, tokens, weights):
        lengths.append(tokens.shape[-2])
        return original(self, tokens, weights)

    def forbidden(*args, **kwargs):
        raise AssertionError("the simulation computed attention directly")

    monkeypatch.setattr(AttentionOracle, "__call__", recording)
    monkeypatch.setattr(reference, "head_attention", forbidden)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", forbidden)
    for mode in ["exact", "causal", "window", "sink", "sampled"]:
        x, model = random_instance(50, 1, 1, 3, mode_mask(mode, 5, 2), torch.float64, 0)
        simulate(model, x, mode, 12)
    assert max(lengths) == 12


def scored_instance(n: int, low: float, high: float, dtype: torch.dtype) -> tuple:
    """A head whose scores <q_i, k_j> = c + b u_i u_j all lie in [low, high]."""
    generator = torch.Generator().manual_seed(7)
    u = torch.rand(n, generator=generator, dtype=torch.float64) * 2 - 1
    x = torch.stack([torch.ones(n, dtype=torch.float64), u], dim=1).to(dtype)
    centre, spread = (low + high) / 2, (high - low) / 2
    head = HeadWeights(query=torch.tensor([[centre, 0.0], [0.0, spread]], dtype=dtype),
                       key=torch.eye(2, dtype=dtype),
                       value=torch.randn(2, 2, generator=generator, dtype=torch.float64).to(dtype))
    return x, LargeTransformer(layers=((head,),), mask=Mask("none"))


@pytest.mark.parametrize("dtype, n, low, high, tolerance", [
    (torch.float32, 300, 83.0, 85.0, 1e-5), (torch.float64, 600, 703.0, 706.0, 1e-10)])
def test_normalizers_do_not_overflow_where_plain_sums_do(dtype: torch.dtype, n: int, low: float,
                                                          high: float, tolerance: float) -> None:
    x, model = scored_instance(n, low, high, dtype)
    head = model.layers[0][0]
    scores = (x @ head.query) @ (x @ head.key).T
    assert float(scores.min()) >= low - 1e-3 and float(scores.max()) <= high + 1e-3
    assert torch.isinf(scores.exp().sum(dim=1)).all()
    result = simulate(model, x, "exact", 8)
    expected, log_normalizers = numpy_forward(model, x)
    assert row_error(result.output, expected) <= tolerance
    np.testing.assert_allclose(result.log_normalizers[0, 0].double().numpy(), log_normalizers[0, 0],
                               rtol=tolerance)


def test_scores_beyond_the_precision_raise_instead_of_returning_garbage() -> None:
    x, model = scored_instance(64, 95.0, 100.0, torch.float32)
    with pytest.raises(RunFailure, match="smallest normal"):
        simulate(model, x, "exact", 16)


def test_nan_weights_raise_instead_of_passing_the_range_check() -> None:
    """NaN < tiny is False: scores that overflowed to inf (inf - inf = NaN in the softmax)
    passed the check and printed `error: nan` with exit 0."""
    keys = torch.tensor([[-1, 0, 1]])
    queries = torch.tensor([[-1, 0, 1]])
    output = torch.full((1, 3, 4), 0.5)
    output[0, 2, 2] = float("nan")
    with pytest.raises(RunFailure, match="smallest normal"):
        parts.read_normalizer(output, keys, queries, causal=False)
    with pytest.raises(RunFailure, match="smallest normal"):
        parts.read_values(output, keys, queries, causal=False)


def test_window_reports_the_cancellation_it_amplifies() -> None:
    """A window holding a small share of its prefix's attention mass amplifies rounding
    errors; the factor is reported and float64 still meets its bound."""
    x, model = random_instance(400, 1, 1, 4, mode_mask("window", 4), torch.float64, 3,
                               score_scale=1.5)
    result = simulate(model, x, "window", 64)
    expected, _ = numpy_forward(model, x)
    assert result.amplification > 100
    assert row_error(result.output, expected) <= 1e-10


def test_window_cancellation_beyond_float32_raises() -> None:
    x, model = random_instance(400, 1, 1, 4, mode_mask("window", 2), torch.float32, 3,
                               score_scale=2.0)
    with pytest.raises(RunFailure, match="subtraction cancels"):
        simulate(model, x, "window", 64)


@pytest.mark.parametrize("mode, n, m, window, sinks, message", [
    ("exact", 10, 11, 0, 0, "exceeds the sequence length"),
    ("exact", 0, 1, 0, 0, "positive"),
    ("exact", 10, 1, 0, 0, "at least 2"),
    ("causal", 10, -3, 0, 0, "positive"),
    ("window", 10, 5, 5, 0, "must exceed window"),
    ("window", 10, 5, 0, 0, "window size must be positive"),
    ("sink", 10, 6, 3, 3, "must exceed window"),
    ("sink", 10, 6, 3, 0, "sinks must be positive"),
    ("diagonal", 10, 5, 0, 0, "unknown attention mode"),
])
def test_bad_sizes_are_input_errors(mode: str, n: int, m: int, window: int, sinks: int,
                                    message: str) -> None:
    with pytest.raises(InputError, match=message):
        expected_calls(mode, n, m, 1, 1, window_size=window, sinks=sinks)


def test_mode_must_match_the_model_mask() -> None:
    x, model = random_instance(20, 1, 1, 2, Mask("causal"), torch.float64, 0)
    with pytest.raises(InputError, match="does not simulate"):
        simulate(model, x, "exact", 8)


@pytest.fixture(autouse=True)
def one_thread():
    """Small tensors: one torch thread avoids waiting on a busy second core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("change, message", [
    (lambda x: x.float(), "must be a matrix of the model's dtype"),   # a matmul's dtype error
    (lambda x: x.to(torch.int64), "must be a matrix of the model's dtype"),
    (lambda x: x[None], "must be a matrix"),
    (lambda x: torch.full_like(x, float("nan")), "not finite"),       # 'scores too far'
])
def test_simulate_refuses_an_input_it_cannot_run(change, message):
    x, model = random_instance(32, 1, 1, 8, Mask(), torch.float64, seed=0)
    with pytest.raises(InputError, match=message):
        simulate(model, change(x), "exact", 8)


@pytest.mark.parametrize("sizes", [{"max_length": 8.5},                 # an IndexError
                                   {"oracle_heads": 1.5}, {"oracle_layers": 2.0}])  # reshape
def test_simulate_refuses_fractional_sizes(sizes):
    x, model = random_instance(32, 1, 1, 8, Mask(), torch.float64, seed=0)
    with pytest.raises(InputError, match="whole number"):
        simulate(model, x, "exact", **{"max_length": 8, **sizes})


@pytest.mark.parametrize("sizes, message", [
    ({"head_dim": 0}, "at least 1"),                  # ZeroDivisionError
    ({"n": -1}, "at least 1"),                        # torch's negative dimension
    ({"score_scale": -1.0}, "score_scale must be"),   # complex weights
])
def test_random_instances_refuse_sizes_they_cannot_draw(sizes, message):
    arguments = {"n": 32, "heads": 1, "layers": 1, "head_dim": 8, "mask": Mask(),
                 "dtype": torch.float64, "seed": 0, **sizes}
    with pytest.raises(ValueError, match=message):
        random_instance(**arguments)


@pytest.mark.parametrize("arguments", [("bogus",), ("window", -3), ("sink", 4, -1)])
def test_a_mask_is_one_of_its_kinds_with_counts_at_least_zero(arguments):
    with pytest.raises(InputError):   # 'bogus' was taken as a sink mask
        Mask(*arguments)


def _head(rows: int, cols: int, dtype: torch.dtype = torch.float64) -> HeadWeights:
    return HeadWeights(*(torch.ones(rows, cols, dtype=dtype),) * 3)


@pytest.mark.parametrize("layers, message", [
    ((), "at least one layer"),                                         # IndexError
    (((_head(4, 4), _head(4, 4)), (_head(4, 4),)), "same number of heads"),  # torch.stack
    (((_head(4, 4),), (_head(3, 3),)), r"got \(3, 3\)"),                # 'scores too far'
    (((_head(4, 2),),), r"got \(4, 2\)"),                               # torch's expand
    (((_head(4, 4), _head(4, 4, torch.float32)),), "torch.float32"),
    (((_head(4, 4, torch.int64),),), "floating dtype"),                 # torch.finfo
    (((HeadWeights(torch.eye(4).double() * float("nan"), *(torch.eye(4).double(),) * 2),),),
     "not finite"),                                                     # 'scores too far'
])
def test_a_large_transformer_refuses_weights_no_layer_could_run(layers, message):
    with pytest.raises(InputError, match=message):
        LargeTransformer(layers=layers, mask=Mask())
