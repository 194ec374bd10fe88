"""RoPE attention gradient, exact against the almost-linear polynomial method: the same as
`ltvm bench rope --out examples/out` (vm/attention/rope/bench.py says what it measures;
docs/rope_attention.md reports the numbers), with BLAS held to one thread.

    python examples/rope_gradient.py              # every section (about 10 minutes, 1 thread)
    python examples/rope_gradient.py --sections boundary   # one section (under 5 minutes)
    python examples/rope_gradient.py --quick      # small sizes, a smoke run
"""

import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from vm.cli import main  # noqa: E402

if __name__ == "__main__":
    arguments = sys.argv[1:]
    if any(a in ("-h", "--help") for a in arguments):
        print("python examples/rope_gradient.py [OPTIONS] runs `ltvm bench rope "
              "--out examples/out [OPTIONS]` with BLAS at one thread; the options:\n",
              flush=True)
    if not any(a == "--out" or a.startswith("--out=") for a in arguments):
        arguments = ["--out", "examples/out", *arguments]
    sys.exit(main(["bench", "rope", *arguments]))
