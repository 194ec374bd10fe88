"""One pass of the looped transformer as an ONNX graph (`ltvm export --format onnx`).

pass.onnx maps X (rows x columns) to X_next = TF(X), every layer of Eq. (1) in
order, with the weights as initializers; the caller loops it until the pc code
equals halt_pc, as with weights.npz. Each op mirrors the numpy reading of the
npz arrays (scores keys x queries, softmax over keys = axis 0) so that a pass
agrees with it to rounding. The `onnx` package is an optional extra, imported
only here.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from vm.common.errors import InputError
from vm.transformer.weights import MachineWeights

if TYPE_CHECKING:
    import onnx

OPSET = 17
"""Softmax over one axis needs opset 13; 17 with IR version 8 loads in onnxruntime >= 1.13."""
IR_VERSION = 8
INPUT, OUTPUT = "X", "X_next"
PROTOBUF_LIMIT = 2 ** 31 - 1
"""A single ONNX file holds at most 2 GiB (protobuf); larger weights need external data."""
GRAPH_ALLOWANCE = 2 ** 20
"""Room left beside the raw weights for the nodes, names and shapes (a few kB in practice),
so that weights just under 2 GiB do not fail in protobuf's serializer."""


def require_onnx() -> ModuleType:
    """The onnx module, or an InputError saying which extra installs it."""
    try:
        import onnx
    except ImportError:
        raise InputError("--format onnx needs the onnx package: pip install 'ltvm[onnx]'") \
            from None
    return onnx


def check_size(weights: MachineWeights, masked: bool, dtype: str) -> None:
    """Refuse, from the arrays' sizes alone, weights that one ONNX file cannot hold: the
    n x n mask alone passes 2 GiB near n = 16,400 in float64, and building the model first
    took minutes and over 10 GB of memory at n = 20,000 to end in protobuf's traceback
    ('Failed to serialize proto'), or in the out-of-memory killer for larger n."""
    count = sum(layer.parameter_count() for layer in weights.layers)  # a lam a head too
    masks = weights.columns ** 2 if masked and weights.has_mask else 0
    size = (count + masks) * np.dtype(dtype).itemsize
    if size + GRAPH_ALLOWANCE > PROTOBUF_LIMIT:
        hint = (" (the n x n attention mask at n = "
                f"{weights.columns:,} takes {masks * np.dtype(dtype).itemsize / 2 ** 30:.2f} "
                "GiB of it: --attention dense exports none)") if masks else ""
        raise InputError(f"the weights take {size / 2 ** 30:.2f} GiB, more than one ONNX file "
                         f"holds (2 GiB){hint}; use --format npz or safetensors")


def pass_model(weights: MachineWeights, masked: bool, dtype: str,
               meta: dict) -> onnx.ModelProto:
    """The ONNX ModelProto of one pass; `meta` goes into its metadata_props."""
    onnx = require_onnx()
    check_size(weights, masked, dtype)
    from onnx import TensorProto, helper, numpy_helper

    element = {"float64": TensorProto.DOUBLE, "float32": TensorProto.FLOAT}[dtype]
    initializers: list = []
    nodes: list = []

    def constant(name: str, value: ArrayLike) -> str:
        initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attributes) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output

    mask = None
    if masked and weights.has_mask:
        mask = constant("mask", np.where(weights.mask, 0.0, -np.inf))
    X = INPUT
    for l, layer in enumerate(weights.layers):
        A = X
        for h, head in enumerate(layer.heads):
            p = f"l{l}.h{h}"
            QX = node("MatMul", [constant(f"{p}.Q", head.Q), X], f"{p}.QX")
            KX = node("MatMul", [constant(f"{p}.K", head.K), X], f"{p}.KX")
            KXt = node("Transpose", [KX], f"{p}.KXt", perm=[1, 0])
            scaled = node("Mul", [constant(f"{p}.lam", head.lam), KXt], f"{p}.lamKXt")
            S = node("MatMul", [scaled, QX], f"{p}.S")
            if mask is not None:
                S = node("Add", [S, mask], f"{p}.Smasked")
            P = node("Softmax", [S], f"{p}.P", axis=0)
            VX = node("MatMul", [constant(f"{p}.V", head.V), X], f"{p}.VX")
            A = node("Add", [A, node("MatMul", [VX, P], f"{p}.VXP")], f"{p}.A")
        ffn, p = layer.ffn, f"l{l}"
        hidden = node("Add", [node("MatMul", [constant(f"{p}.W1", ffn.W1), A], f"{p}.W1A"),
                              constant(f"{p}.b1", ffn.b1[:, None])], f"{p}.W1A_b1")
        out = node("MatMul", [constant(f"{p}.W2", ffn.W2), node("Relu", [hidden], f"{p}.relu")],
                   f"{p}.W2relu")
        last = l == len(weights.layers) - 1
        X = node("Add", [A, node("Add", [out, constant(f"{p}.b2", ffn.b2[:, None])],
                                 f"{p}.ffn")], OUTPUT if last else f"{p}.X")
    if X == INPUT:
        X = node("Identity", [INPUT], OUTPUT)
    shape = [weights.rows, weights.columns]
    size = sum(t.ByteSize() for t in initializers)
    if size > PROTOBUF_LIMIT:
        raise InputError(f"the weights take {size / 2 ** 30:.1f} GiB, more than one ONNX file "
                         "holds (2 GiB); use --format npz or safetensors")
    graph = helper.make_graph(nodes, "looped_transformer_pass",
                              [helper.make_tensor_value_info(INPUT, element, shape)],
                              [helper.make_tensor_value_info(OUTPUT, element, shape)],
                              initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="ltvm", ir_version=IR_VERSION,
                              doc_string="One pass X -> TF(X) of Eq. (1); loop it until the pc "
                                         "code equals halt_pc (layout.json).")
    helper.set_model_props(model, {"meta": json.dumps(meta)})
    onnx.checker.check_model(model)
    return model
