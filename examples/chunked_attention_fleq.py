"""Run programs/fleq/chunked_attention.fleq on the looped transformer and measure it.

Prints `name: value` lines: the relative error max_i ||y_i - t_i|| / ||t_i|| of the
transformer's output against attention computed directly (vm/attention/chunked/reference.py),
the same for the FLEQ reference interpreter, the oracle calls executed, steps and time.

    .venv/bin/python examples/chunked_attention_fleq.py [--dtype float32] \
        [--param matmul_tn.scale=1e-3]

float32 runs use matmul_tn eps = 5e-2 unless --param says otherwise: this program's products
are small (entries about 1), where a large eps costs little truncation and float32's score
rounding (ulp(C) / eps) dominates; the blocks' generic float32 eps, 1e-3, gives 2e-2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from vm.isa import FLEQ
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.attention.chunked.model import HeadWeights, Mask
from vm.attention.chunked.reference import head_attention, relative_error
from vm.cli.common import block_parameters
from vm.common.errors import InputError
from vm.runtime.executor import EngineConfig, run_traced
from vm.machines.fleq.reference import run_fleq_reference

PROGRAM = Path(__file__).resolve().parents[1] / "programs" / "fleq" / "chunked_attention.fleq"
FLOAT32_MATMUL_SCALE = 5e-2


def token_rows(memory: dict, stem: str, count: int) -> np.ndarray:
    """The N x width matrix stored as chunk cells stem0.. (one column per token)."""
    return np.hstack([np.asarray(memory[f"{stem}{t}"]) for t in range(count)]).T


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                        help="dtype of the transformer run (default float64)")
    parser.add_argument("--param", action="append", default=[], metavar="FUNC.KEY=VALUE",
                        help="block parameter, as for ltvm run (repeatable)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    try:
        defaults = {"matmul_tn": {"scale": FLOAT32_MATMUL_SCALE}} if args.dtype == "float32" \
            else {}
        program = FLEQ.assemble_file(PROGRAM, parameters=block_parameters(args.param),
                                     defaults=defaults)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    chunks = sum(1 for name in program.variables if name[0] == "X" and name[1:].isdigit())
    memory = program.named_memory(program.cells)
    x = torch.as_tensor(token_rows(memory, "X", chunks))
    head = HeadWeights(*(torch.as_tensor(np.asarray(memory[w])) for w in ("Wq", "Wk", "Wv")))
    direct, _ = head_attention(x, head, Mask("none"))
    start = time.perf_counter()
    result = run_traced(program, fleq_geometry_for(program), 10_000,
                        EngineConfig(dtype=args.dtype))
    elapsed = time.perf_counter() - start
    reference = run_fleq_reference(program, 10_000)
    got = token_rows(program.named_memory(result.memory), "Y", chunks)
    exact = token_rows(program.named_memory(reference.cells), "Y", chunks)
    calls = sum(1 for step in result.trace
                if program.instructions[step.pc].function == "attention_oracle")
    print(f"dtype: {args.dtype}")
    print(f"tokens: {x.shape[0]}")
    print(f"oracle_calls: {calls}")
    print(f"steps: {result.steps}")
    print(f"error: {relative_error(torch.as_tensor(got), direct):.3g}")
    print(f"reference_error: {relative_error(torch.as_tensor(exact), direct):.3g}")
    print(f"time: {elapsed:.1f}")
    return 0 if result.halted else 1


if __name__ == "__main__":
    sys.exit(main())
