"""Lemma 3.3: one oracle with L' layers and H' heads runs H'L' independent single-head problems.

Problem s gets its own columns of the oracle's embedding: its w token columns, followed by o
zero columns for its output. Layer s // H', head s % H' reads only the problem's token
columns and writes only its output columns; the residual of Eq. (1a) carries every other
column through the other layers unchanged, so each problem gets exactly the attention a
single-head, single-layer oracle would give it. The problems of one call have the same
length n; shorter ones are padded beforehand with known-score rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from vm.attention.chunked.oracle import AttentionOracle, OracleHead
from vm.attention.chunked.parts import Projections


def run_packed(oracle: AttentionOracle, tokens: Tensor, slots: Sequence[Projections]) -> Tensor:
    """C oracle calls; call c answers the g problems tokens[c, s] (C x g x n x w), problem s
    with the weights slots[s]. Returns their outputs, C x g x n x o."""
    calls, group, n, width = tokens.shape
    if group != len(slots) or group > oracle.heads * oracle.layers:
        raise ValueError(f"{group} problems per call do not fit in {oracle.layers} layers "
                         f"of {oracle.heads} heads")
    out_width = slots[0].value.shape[1]
    stride = width + out_width
    packed = torch.zeros(calls, n, group, stride, dtype=tokens.dtype)
    packed[..., :width] = tokens.transpose(1, 2)
    packed = packed.reshape(calls, n, group * stride)
    heads = [OracleHead(query=_embed(proj.query, s * stride, group * stride),
                        key=_embed(proj.key, s * stride, group * stride),
                        value=_embed(proj.value, s * stride, group * stride),
                        target=s * stride + width)
             for s, proj in enumerate(slots)]
    layers = [heads[start:start + oracle.heads] for start in range(0, group, oracle.heads)]
    result = oracle(packed, layers).reshape(calls, n, group, stride)
    return result[..., width:].transpose(1, 2)


def _embed(matrix: Tensor, offset: int, total: int) -> Tensor:
    """`matrix` as the rows [offset, offset + rows) of a zero matrix with `total` rows."""
    if matrix.shape[0] == total:
        return matrix
    full = torch.zeros(total, matrix.shape[1], dtype=matrix.dtype)
    full[offset:offset + matrix.shape[0]] = matrix
    return full
