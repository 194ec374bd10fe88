"""Attention computed directly, the way the simulation must not: the yardstick for it.

`head_attention` forms the scores of a block of queries against all N keys at once; with
`row_chunk=None` that block is the whole N x N score matrix ("full attention" in the
bench). It works in place on that one buffer, so its peak memory is about
N * row_chunk * itemsize plus O(N * m). A block of queries scores only the keys its mask
can show (`visible_keys`): a causal block the keys up to its last query, a window block
the band behind it (and the sinks), so checking a window or sink simulation costs
O(N * (row_chunk + window)) instead of O(N^2).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from vm.attention.chunked.model import HeadWeights, LargeTransformer, Mask


def head_attention(x_head: Tensor, head: HeadWeights, mask: Mask, row_chunk: int | None = None,
                   progress: Callable[[int], None] | None = None) -> tuple[Tensor, Tensor]:
    """softmax(mask(Q K^T)) V for one head, and the log of each row's normalizer (log-sum-exp);
    `progress` is told the rows done after each chunk."""
    if row_chunk is not None and not (isinstance(row_chunk, int) and row_chunk >= 1):
        raise ValueError(f"row_chunk must be None or a whole number of rows, at least 1, got "
                         f"{row_chunk!r}")  # 0 failed in range(), -1 in torch.cat
    q, k, v = x_head @ head.query, x_head @ head.key, x_head @ head.value
    n = x_head.shape[0]
    step = n if row_chunk is None else row_chunk
    outputs, log_normalizers = [], []
    for start in range(0, n, step):
        stop = min(start + step, n)
        rows, keys = torch.arange(start, stop), visible_keys(mask, start, stop, n)
        scores = q[rows] @ k[keys].T
        if mask.kind != "none":
            scores.masked_fill_(~mask.visible(rows, keys), float("-inf"))
        peak = scores.amax(dim=1, keepdim=True)
        scores.sub_(peak).exp_()
        total = scores.sum(dim=1, keepdim=True)
        scores.div_(total)
        outputs.append(scores @ v[keys])
        log_normalizers.append((peak + total.log()).squeeze(1))
        if progress is not None:
            progress(stop)
    return torch.cat(outputs), torch.cat(log_normalizers)


def direct_forward(model: LargeTransformer, x: Tensor, row_chunk: int | None = None,
                   progress: Callable[[int], None] | None = None) -> tuple[Tensor, Tensor]:
    """The large transformer's output and log normalizers (layers x heads x N), directly;
    `progress` is told the rows done, over every layer and head, after each chunk."""
    log_normalizers = []
    done = 0
    for layer in model.layers:
        results = []
        for h, head in enumerate(layer):
            rows = None if progress is None else (lambda stop, base=done: progress(base + stop))
            results.append(head_attention(model.head_input(x, h), head, model.mask, row_chunk,
                                          rows))
            done += x.shape[0]
        x = torch.cat([out for out, _ in results], dim=1)
        log_normalizers.append(torch.stack([lse for _, lse in results]))
    return x, torch.stack(log_normalizers)


def relative_error(approx: Tensor, exact: Tensor) -> float:
    """max_i ||approx_i - exact_i|| / ||exact_i||: the paper's per-row simulation error. A
    zero row matched exactly counts 0 (0 / 0 made the whole error NaN), missed counts inf."""
    approx, exact = approx.double(), exact.double()
    diff = torch.linalg.vector_norm(approx - exact, dim=-1)
    scale = torch.linalg.vector_norm(exact, dim=-1)
    return float(torch.where(diff == 0, 0.0, diff / scale).max())


def visible_keys(mask: Mask, start: int, stop: int, n: int) -> Tensor:
    """The keys some query in start..stop-1 may see, in increasing order (a superset that
    the mask then trims): every key when nothing is masked, the keys up to the block's
    last query when causal, the band behind the block and the sinks for a window."""
    if mask.kind == "none":
        return torch.arange(n)
    if mask.kind == "causal":
        return torch.arange(stop)
    first = max(0, start - mask.window + 1)
    sinks = torch.arange(min(mask.sinks, first))
    return torch.cat([sinks, torch.arange(first, stop)])
