"""The torch layers compute exactly Eq. (1): checked on random weights against numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vm.transformer import layers
from vm.transformer.layers import (MASK_AS_BIAS_MAX, LoopedTransformer, head_segments,
                                   mask_matrix, trace_pass)
from vm.transformer.weights import FeedForwardWeights, HeadWeights, LayerWeights, MachineWeights


def random_machine(rng, rows: int, columns: int, heads: list[int], width: int = 7
                   ) -> MachineWeights:
    layers = []
    for count in heads:
        layer_heads = []
        for h in range(count):
            V = np.zeros((rows, rows))
            written = rng.choice(rows, size=3, replace=False)
            V[written] = rng.normal(size=(3, rows))
            layer_heads.append(HeadWeights(rng.normal(size=(2, rows)), rng.normal(size=(2, rows)),
                                           V, float(rng.uniform(0.5, 2.0)), f"h{h}"))
        ffn = FeedForwardWeights(rng.normal(size=(width, rows)), rng.normal(size=width),
                                 rng.normal(size=(rows, width)), rng.normal(size=rows))
        layers.append(LayerWeights(tuple(layer_heads), ffn, "random"))
    return MachineWeights(tuple(layers), rows, columns, 2)


def numpy_pass(machine: MachineWeights, X: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    for layer in machine.layers:
        A = X.copy()
        for head in layer.heads:
            scores = head.lam * (head.K @ X).T @ (head.Q @ X)
            if mask is not None:
                scores = np.where(mask, scores, -np.inf)
            weights = np.exp(scores - scores.max(axis=0))
            A += head.V @ X @ (weights / weights.sum(axis=0))
        f = layer.ffn
        X = A + f.W2 @ np.maximum(f.W1 @ A + f.b1[:, None], 0) + f.b2[:, None]
    return X


@pytest.mark.parametrize("columns", [9, MASK_AS_BIAS_MAX + 40])
@pytest.mark.parametrize("attention", ["dense", "masked"])
def test_a_pass_equals_eq1_computed_directly(columns, attention):
    rng = np.random.default_rng(columns)
    machine = random_machine(rng, rows=11, columns=columns, heads=[2, 0, 1])
    X = rng.normal(size=(3, 11, columns))
    model = LoopedTransformer(machine, torch.float64, attention=attention, scratch=2)
    got = model(torch.as_tensor(X)).numpy()
    mask = machine.mask if attention == "masked" else None
    for b in range(3):
        assert np.allclose(got[b], numpy_pass(machine, X[b], mask), rtol=1e-10, atol=1e-10)


def test_the_mask_lets_scratch_see_all_and_others_see_self_and_scratch():
    allowed = mask_matrix(5, 2)
    assert allowed[:, :2].all() and allowed[:2, :].all()
    assert allowed[2:, 2:].sum() == 3 and np.diag(allowed).all()


def test_a_pass_does_not_modify_its_input():
    rng = np.random.default_rng(0)
    machine = random_machine(rng, rows=6, columns=5, heads=[1])
    X = torch.as_tensor(rng.normal(size=(1, 6, 5)))
    before = X.clone()
    LoopedTransformer(machine, torch.float64)(X)
    assert torch.equal(X, before)


def test_trace_pass_records_each_layer_and_matches_a_pass():
    rng = np.random.default_rng(3)
    machine = random_machine(rng, rows=8, columns=6, heads=[2, 0])
    X = torch.as_tensor(rng.normal(size=(8, 6)))
    for attention in ("dense", "masked"):
        model = LoopedTransformer(machine, torch.float64, attention=attention, scratch=2)
        records = trace_pass(model, X)
        assert len(records) == 2 and records[0].attention.shape == (2, 6, 6)
        ones = torch.ones(2, 6, dtype=torch.float64)
        assert torch.allclose(records[0].attention.sum(dim=2), ones)
        assert torch.allclose(records[-1].after, model(X[None])[0])
        assert records[1].attention.shape[0] == 0
    masked = records[0].attention
    assert float(masked[:, 3, 4].abs().max()) == 0.0  # column 3 may not see column 4


def attention_only_machine(heads: list[HeadWeights], rows: int, columns: int) -> MachineWeights:
    """One layer with these heads and an empty ReLU layer, so a pass is X + attention."""
    ffn = FeedForwardWeights(np.zeros((0, rows)), np.zeros(0), np.zeros((rows, 0)),
                             np.zeros(rows))
    return MachineWeights((LayerWeights(tuple(heads), ffn, "attention"),), rows, columns, 2)


def heads_with_varied_writes(rng, rows: int) -> list[HeadWeights]:
    """Heads of several query widths writing disjoint, shared, identical and empty row sets,
    contiguous or not, each reading a few random rows."""
    written = [[0], [0], [3, 5], [3, 5], [1, 2, 3], [7], [], [4, 6, 8, 9], [0, 9]]
    heads = []
    for index, rows_written in enumerate(written):
        r = 1 + index % 3
        Q, K, V = rng.normal(size=(r, rows)), rng.normal(size=(r, rows)), np.zeros((rows, rows))
        Q[:, rng.choice(rows, size=rows // 2, replace=False)] = 0.0
        V[rows_written] = rng.normal(size=(len(rows_written), rows))
        heads.append(HeadWeights(Q, K, V, float(rng.uniform(0.5, 2.0)), f"h{index}"))
    return heads


def per_head_eq1(heads: list[HeadWeights], X: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """X + sum_h V_h X softmax(lam_h (K_h X)^T (Q_h X)), one head at a time."""
    out = X.copy()
    for head in heads:
        scores = head.lam * (head.K @ X).T @ (head.Q @ X)
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=0))
        out += head.V @ X @ (weights / weights.sum(axis=0))
    return out


@pytest.mark.parametrize("chunk_bytes", [None, 1])
@pytest.mark.parametrize("columns", [9, MASK_AS_BIAS_MAX + 40])
@pytest.mark.parametrize("attention", ["dense", "masked"])
def test_attention_equals_eq1_head_by_head(attention, columns, chunk_bytes, monkeypatch):
    """Grouped heads, own-row values and (with chunk_bytes=1) one head at a time all add up to
    the per-head sum of Eq. (1a) in float64."""
    if chunk_bytes is not None:
        monkeypatch.setattr(layers, "CACHED_SCORES_BYTES", chunk_bytes)
    rng = np.random.default_rng(columns + len(attention))
    rows = 10
    heads = heads_with_varied_writes(rng, rows)
    machine = attention_only_machine(heads, rows, columns)
    X = rng.normal(size=(2, rows, columns))
    model = LoopedTransformer(machine, torch.float64, attention=attention, scratch=2)
    got = model(torch.as_tensor(X)).numpy()
    mask = machine.mask if attention == "masked" else None
    for b in range(2):
        expected = per_head_eq1(heads, X[b], mask)
        assert np.abs(got[b] - expected).max() <= 1e-12 * max(1.0, np.abs(expected).max())


def test_each_head_projects_only_the_rows_it_writes():
    rng = np.random.default_rng(5)
    heads = heads_with_varied_writes(rng, 10)
    attention = layers.Attention(tuple(heads), torch.float64)
    expected = sum(2 * h.Q.shape[0] + len(h.written_rows) for h in heads)
    assert attention.QKV.shape[0] == expected
    assert sorted(h for group in attention.groups for h in group.heads) == list(range(len(heads)))


def test_a_heads_written_rows_are_found_once():
    """The layers and the FLEQ active evaluation asked 718 times for 137 heads' rows, each
    time summing |V| of 2118 x 2118 anew: 7.5 s of a 20 s build of `ltvm train`."""
    head = heads_with_varied_writes(np.random.default_rng(6), 10)[7]
    rows = head.written_rows
    assert head.written_rows is rows
    assert list(rows) == [4, 6, 8, 9]


@pytest.mark.parametrize("attention", ["dense", "masked"])
def test_one_hot_moves_into_shared_rows_stay_bit_exact(attention):
    """Hardmax heads (a margin of e^-120, so weights round to exactly 0/1) copying integers:
    the sum over heads sharing rows is the exact integer result, not merely close."""
    columns, rows, bits = 8, 12, 3
    codes = np.array([[1.0 if (j >> b) & 1 else -1.0 for j in range(columns)]
                      for b in range(bits)])
    X = np.zeros((rows, columns))
    X[:bits] = codes
    X[bits:bits + 3] = np.arange(3 * columns).reshape(3, columns) * 3.0 - 17.0
    heads = []
    for index, (source, target) in enumerate([(3, 8), (4, 8), (5, 9), (3, 9), (4, 10)]):
        Q = np.zeros((bits, rows))
        Q[:bits, :bits] = np.eye(bits)
        V = np.zeros((rows, rows))
        V[target, source] = 1.0
        heads.append(HeadWeights(Q, Q.copy(), V, 60.0, f"move {index}"))
    machine = attention_only_machine(heads, rows, columns)
    model = LoopedTransformer(machine, torch.float64, attention=attention, scratch=2)
    got = model(torch.as_tensor(X[None])).numpy()[0]
    expected = X + sum(head.V for head in heads) @ X  # every column reads itself
    assert np.array_equal(got, expected)


def test_weights_lists_every_head_in_layer_order():
    rng = np.random.default_rng(11)
    rows, columns = 10, 7
    heads = heads_with_varied_writes(rng, rows)
    model = LoopedTransformer(attention_only_machine(heads, rows, columns), torch.float64,
                              attention="dense")
    X = rng.normal(size=(rows, columns))
    maps = trace_pass(model, torch.as_tensor(X))[0].attention.numpy()
    for index, head in enumerate(heads):
        scores = head.lam * (head.Q @ X).T @ (head.K @ X)
        expected = np.exp(scores - scores.max(axis=1, keepdims=True))
        expected /= expected.sum(axis=1, keepdims=True)
        assert np.allclose(maps[index], expected, rtol=1e-12, atol=1e-14)


def test_row_indices_follow_the_model_to_another_device():
    """index_select / index_add_ need their index on X's device (checked here with torch's
    'meta' device, which every build has)."""
    Q, V = np.zeros((1, 8)), np.zeros((8, 8))
    Q[0, [0, 2]] = 1.0
    V[[4, 7], 5] = 1.0  # reads rows 0, 2, 5 and writes rows 4, 7: neither is a slice
    W1 = np.zeros((2, 8))
    W1[:, [1, 6]] = 1.0
    ffn = FeedForwardWeights(W1, np.zeros(2), np.eye(8, 2) + np.eye(8, 2, k=-3), np.zeros(8))
    machine = MachineWeights((LayerWeights((HeadWeights(Q, Q, V, 1.0, "h"),), ffn, "l"),), 8, 6)
    layer = LoopedTransformer(machine, torch.float64).to("meta").layers[0]
    indices = [layer.attention.read, layer.attention.rows, layer.ffn.read, layer.ffn.rows]
    assert all(isinstance(index, torch.Tensor) for index in indices)
    assert {index.device.type for index in indices} == {"meta"}


def test_a_big_almost_empty_relu_layer_runs_sparse_and_equals_eq1b():
    rng = np.random.default_rng(4)
    rows, width, columns = 120, 400, 9  # 0.8 % of W1 and of W2 non-zero
    W1, W2 = np.zeros((width, rows)), np.zeros((rows, width))
    for unit in range(width):  # one input and one output per hidden unit, as gates are built
        W1[unit, rng.integers(rows)] = rng.normal()
        W2[rng.integers(rows), unit] = rng.normal()
    ffn = FeedForwardWeights(W1, rng.normal(size=width), W2, np.zeros(rows))
    machine = MachineWeights((LayerWeights((), ffn, "sparse"),), rows, columns)
    model = LoopedTransformer(machine, torch.float64)
    assert layers.SPARSE_SIZE_MIN <= W1.size
    assert model.layers[0].ffn.W1.layout == torch.sparse_csr
    assert model.layers[0].ffn.W2.layout == torch.sparse_csr
    X = rng.normal(size=(2, rows, columns))
    got = model(torch.as_tensor(X)).numpy()
    for b in range(2):
        expected = numpy_pass(machine, X[b], None)
        assert np.abs(got[b] - expected).max() <= 1e-12 * np.abs(expected).max()


def test_heads_are_split_by_the_component_their_roles_name():
    roles = ["inv: term 0", "sqrt: term 0", "inv: term 1", "add: C gathers A"]
    assert head_segments(roles) == [(0, 2), (1,), (3,)]
    assert head_segments(["inv: term 0", "inv: term 1"]) == [(0, 1)]
    assert head_segments(["fetch instruction at pc", "inv: term 0"]) == [(0, 1)]


@pytest.mark.parametrize("attention", ["dense", "masked"])
def test_component_parts_all_read_the_layers_input_as_eq1_heads_do(attention):
    """Heads named by two components, each reading rows the other writes: computing the
    parts one after another on an updated X would differ; the layer must equal Eq. (1)."""
    rng = np.random.default_rng(7)
    heads = heads_with_varied_writes(rng, 10)
    heads = [HeadWeights(h.Q, h.K, h.V, h.lam, f"{'ab'[i % 2]}: head {i}")
             for i, h in enumerate(heads)]
    machine = attention_only_machine(heads, 10, 9)
    model = LoopedTransformer(machine, torch.float64, attention=attention, scratch=2)
    assert len(model.layers[0].parts) == 2
    X = rng.normal(size=(10, 9))
    got = model(torch.as_tensor(X[None])).numpy()[0]
    mask = machine.mask if attention == "masked" else None
    np.testing.assert_allclose(got, per_head_eq1(heads, X, mask), rtol=1e-12, atol=1e-12)


def test_relu_units_run_as_one_part_per_gate_row_read_from_the_layers_input():
    """Units reading gate row 0 or 1 write rows the other part and the ungated units read:
    parts computed one after another on an updated X would differ from Eq. (1b)."""
    rng = np.random.default_rng(11)
    rows, width, columns, gates = 10, 9, 6, (0, 1)
    W1 = rng.normal(size=(width, rows))
    W1[:, list(gates)] = 0.0
    W1[0:3, 0] = 1.0  # units 0-2 carry gate 0, units 3-5 gate 1, units 6-8 none
    W1[3:6, 1] = 1.0
    ffn = FeedForwardWeights(W1, rng.normal(size=width), rng.normal(size=(rows, width)),
                             rng.normal(size=rows))
    machine = MachineWeights((LayerWeights((), ffn, "gated"),), rows, columns)
    model = LoopedTransformer(machine, torch.float64, gate_rows=gates)
    ffn_module = model.layers[0].ffn
    assert ffn_module.part_gates == [0, 1, None]
    X = rng.normal(size=(2, rows, columns))
    got = model(torch.as_tensor(X)).numpy()
    for b in range(2):
        np.testing.assert_allclose(got[b], numpy_pass(machine, X[b], None), rtol=1e-12,
                                   atol=1e-12)
    internal = layers.to_internal(torch.as_tensor(X))
    ffn_module(internal, [0, 2])  # the units of gate 1 skipped
    without = FeedForwardWeights(W1[[0, 1, 2, 6, 7, 8]], ffn.b1[[0, 1, 2, 6, 7, 8]],
                                 ffn.W2[:, [0, 1, 2, 6, 7, 8]], ffn.b2)
    expected = numpy_pass(MachineWeights((LayerWeights((), without, "gated"),), rows, columns),
                          X[0], None)
    np.testing.assert_allclose(layers.from_internal(internal)[0].numpy(), expected, rtol=1e-12,
                               atol=1e-12)


def test_csr_is_chosen_by_density_and_by_the_work_of_the_product():
    W = np.zeros((40, 40))
    W[:, :4] = 1.0  # 10 % non-zero, 1,600 entries
    assert not layers._sparse_pays(W, 1)  # too little work for CSR's per-call cost
    assert layers._sparse_pays(W, -(-layers.SPARSE_WORK_MIN // W.size))
    W[:, :10] = 1.0  # 25 % non-zero: dense wins at any size
    assert not layers._sparse_pays(W, 1 << 20)


@pytest.mark.parametrize(("device", "per_head", "expected"), [
    ("cpu", 100, layers.CACHED_SCORES_BYTES // 800),
    ("meta", 100, layers.DEVICE_SCORES_BYTES // 800),
    ("meta", 10 * layers.DEVICE_SCORES_BYTES, 1),
])
def test_heads_run_in_chunks_bounded_by_the_device_budget(device, per_head, expected):
    """A GPU (any device but the CPU; "meta" here) runs at most DEVICE_SCORES_BYTES of float64
    scores at once, and always at least one head."""
    X = torch.empty((3, 2, 5), dtype=torch.float64, device=device)
    assert layers._chunk_size(per_head, X) == expected


@pytest.mark.parametrize("setting,message", [
    (dict(dtype=torch.float16), "dtype"), (dict(dtype="float32"), "dtype"),
    (dict(scratch=0), "scratch"), (dict(scratch=6), "scratch"),
    (dict(device="meta"), "device"), (dict(device="mps"), "device")])
def test_a_model_it_cannot_run_is_refused_when_built(setting, message):
    """float16 failed in the first matmul, scratch 0 masked the scratch column's reads
    silently, and 'meta' built a model whose pass failed."""
    machine = random_machine(np.random.default_rng(0), rows=6, columns=5, heads=[1])
    with pytest.raises(ValueError, match=message):
        LoopedTransformer(machine, **{"dtype": torch.float64, **setting})


@pytest.mark.parametrize("bad", [lambda X: X.float(), lambda X: X[0], lambda X: X[:, :, :-1],
                                 lambda X: X[:, :-1], lambda X: X.numpy()])
def test_a_pass_refuses_x_of_another_shape_or_dtype(bad):
    """They failed deep in torch (a dtype mismatch in matmul, an expand of the mask)."""
    machine = random_machine(np.random.default_rng(0), rows=6, columns=5, heads=[1])
    X = torch.as_tensor(np.random.default_rng(1).normal(size=(1, 6, 5)))
    with pytest.raises(ValueError, match="X "):
        LoopedTransformer(machine, torch.float64)(bad(X))


def test_the_mask_is_built_once_when_first_asked():
    """The export reads `mask` up to three times (size check, meta, arrays); each read built
    a columns x columns array again."""
    machine = random_machine(np.random.default_rng(0), 8, 6, [1])
    mask = machine.mask
    assert machine.mask is mask and np.array_equal(mask, mask_matrix(6, 2))
    assert MachineWeights(machine.layers, 8, 6).mask is None


def test_the_checkpoint_is_called_before_each_layer_and_stops_the_build_by_raising():
    """A wide FLEQ program's layers take seconds to build: `ltvm train --max-seconds` stops
    between them through the checkpoint, which sees each layer before it is built."""
    machine = random_machine(np.random.default_rng(0), 10, 6, [2, 1, 3])
    parts: list[str] = []
    LoopedTransformer(machine, torch.float64, checkpoint=parts.append)
    assert parts == ["layer 1 of 3", "layer 2 of 3", "layer 3 of 3"]

    class Stop(Exception):
        pass

    def stop_at_the_second(part: str) -> None:
        parts.append(part)
        if len(parts) == 2:
            raise Stop

    parts.clear()
    with pytest.raises(Stop):
        LoopedTransformer(machine, torch.float64, checkpoint=stop_at_the_second)
    assert parts == ["layer 1 of 3", "layer 2 of 3"]
