"""`ltvm linalg inverse|eig`: a matrix from a .npy file through the linear algebra routines on
the looped transformer, beside numpy.linalg and the same algorithm run exactly.

The program is built from the matrix's shape and values (`X = inverse(A, iters=T)`, or
`v = power_iteration(A, iters=T)` and `lam = rayleigh(A, v)`), run on the transformer and on
the reference interpreter (the same FLEQ program with exact numpy blocks: the exact
algorithm), so the transformer's own error is told apart from the algorithm's.
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import os
import sys
import zipfile
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from assembler.fleq import MAX_BLOCK, check_parameters
from vm.isa import FLEQ
from vm.isa.fleq import CATALOGUE
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.cli.common import (add_engine_arguments, add_time_limit, block_parameters,
                           engine_config, integer)
from vm.common.errors import InputError, StepLimitExceeded, shown_path
from vm.common.files import NPY_FORMAT_ERRORS, require_regular_file
from vm.common.signatures import MAGNITUDE, MAGNITUDE_BITS
from vm.common.json_values import finite_or_null
from vm.machines.fleq.domains import first_domain_violation
from vm.runtime.config import EngineConfig
from vm.machines.fleq.reference import run_fleq_reference
from vm.routines.base import matrix_literal
from vm.functions import dtype_parameters, make_block
from vm.routines.linalg import (eigenvector_error_bound, inverse_error_bound,
                                rayleigh_error_bound)
from vm.tools.progress import Progress

MAX_STEPS = 1_000_000
KINDS = ("inverse", "eig")
MAX_ITERS = 1000
"""Most iterations a command line may ask for: the routine is expanded into the program."""
VACUOUS = 1.0
"""A relative bound this large vouches for nothing: the run fails, as outside its bound."""
CONVERGED = 1e-8
"""The convergence criterion of both routines: the exact algorithm (the same program with
exact numpy blocks) within this relative error of numpy.linalg (for eig, the larger of the
eigenvector's and the eigenvalue's)."""


def load_matrix(path: str) -> np.ndarray:
    """A square real matrix of size <= 16 from a .npy file (no pickles), or InputError.
    Only a regular file is opened: a FIFO with no writer would block open() forever, and a
    pipe cannot be memory-mapped anyway."""
    require_regular_file(path, "a .npy array")
    try:
        with np.errstate(over="ignore"):  # numpy sizes a 10^11 x 10^11 header's map first
            matrix = np.load(path, mmap_mode="r", allow_pickle=False)  # shape before data
    except EOFError:
        raise InputError(f"{shown_path(path)} is empty (expected a .npy array)") from None
    except OSError as error:
        raise InputError(f"cannot read {shown_path(path)}: {error.strerror or error}") from None
    except (*NPY_FORMAT_ERRORS, zipfile.BadZipFile):
        # numpy's own text advises allow_pickle, which this never does; a file that starts
        # as a zip archive does (a damaged .npz) is opened as one, and raises BadZipFile
        raise InputError(f"{shown_path(path)} is not a numeric .npy "
                         f"array{_shortfall(path)}") from None
    if not isinstance(matrix, np.ndarray):
        matrix.close()
        raise InputError(f"{shown_path(path)} is an .npz archive; give one matrix as a .npy file "
                         f"(np.save)")
    return as_matrix(matrix, path)


def _shortfall(path: str) -> str:
    """' (truncated: ...)' where the header reads but the data is shorter than it declares
    (a file cut off in a copy), else '': such a file was only 'not a numeric .npy array'."""
    try:
        with open(path, "rb") as file:
            version = np.lib.format.read_magic(file)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read(file)
            held = os.fstat(file.fileno()).st_size - file.tell()
    except (OSError, *NPY_FORMAT_ERRORS):
        return ""
    declared = dtype.itemsize * math.prod(shape)
    return (f" (truncated: its header declares {declared} bytes of data, it holds {held})"
            if held < declared else "")


def as_matrix(matrix: object, where: str = "A") -> np.ndarray:
    """A square real matrix of size <= 16 as float64, or InputError: `solve` took a 2x3
    matrix as 'singular', dropped a complex one's imaginary part, and compared a float32
    one with numpy's float32 inverse (not converged at 2.5e-8)."""
    matrix = np.asarray(matrix)  # a memory map stays one: its shape is checked before data
    if matrix.dtype.kind not in "iuf":
        raise InputError(f"{where}: expected a real numeric array, got dtype {matrix.dtype}")
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise InputError(f"{where}: expected a square matrix, got shape {matrix.shape}")
    if matrix.shape[0] == 0:
        raise InputError(f"{where}: the matrix is empty (0x0)")
    if matrix.shape[0] > MAX_BLOCK:
        raise InputError(f"{where}: {matrix.shape[0]}x{matrix.shape[0]} is larger than the "
                         f"largest block size d = {MAX_BLOCK}")
    with np.errstate(over="ignore"):  # a float128 1e400 becomes inf: checked below
        values = np.array(matrix, dtype=float)
    if not np.isfinite(values).all():  # after the cast: eig's numpy call raised on that inf
        raise InputError(f"{where}: the matrix has entries that are not finite in float64")
    return values


def check_representable(matrix: np.ndarray, dtype: str) -> None:
    """Refuse a nonzero entry below the dtype's smallest normal number, or one beyond the
    machine's magnitudes, naming it: the machine flushes the first to 0, and the assembler's
    refusal of the generated program (float64; |x| > 2^50 with --param rsqrt.high=1e40)
    pointed into a program the user never wrote; in float32 the run went ahead and ended
    outside the machine's domain."""
    tiny = float(np.finfo(dtype).tiny)
    small = np.argwhere((matrix != 0) & (np.abs(matrix) < tiny))
    if len(small):
        i, j = small[0]
        raise InputError(f"A[{i}, {j}] = {matrix[i, j]:.4g} is below {tiny:.3g}, the smallest "
                         f"normal {dtype}: the machine would flush it to 0 (set it to 0)")
    large = np.argwhere(np.abs(matrix) > MAGNITUDE)  # the same refusal, once domains widen
    if len(large):
        i, j = large[0]
        raise InputError(f"A[{i}, {j}] = {matrix[i, j]:.4g} is beyond 2^{MAGNITUDE_BITS}, the "
                         "magnitudes the machine keeps exact")


def linalg_source(kind: str, matrix: np.ndarray, iters: int) -> str:
    """The FLEQ program: A from the matrix, one routine call (two for eig)."""
    n = len(matrix)
    if kind == "inverse":
        return (f"; X = A^-1 by Newton-Schulz\n.d {n}\n.data\n"
                f"A: {matrix_literal(matrix)}\nX: .zeros {n}x{n}\n.code\n"
                f"X = inverse(A, iters={iters})\nhalt\n")
    return (f"; dominant eigenpair by power iteration\n.d {n}\n.data\n"
            f"A: {matrix_literal(matrix)}\nv: .zeros {n}x1\nlam: 0.0\n.code\n"
            f"v = power_iteration(A, iters={iters})\n"
            f"lam = rayleigh(A, v)\nhalt\n")


def power_norms(matrix: np.ndarray, iters: int) -> np.ndarray:
    """||A v_k||^2 for the exact iterates v_0 = (1, ..., 1) / sqrt(n), v_{k+1} = A v_k /
    ||A v_k||: the values power iteration hands rsqrt (k = 0 .. iters - 1)."""
    v = np.full(len(matrix), 1.0 / np.sqrt(len(matrix)))
    norms = []
    for _ in range(iters):
        w = matrix @ v
        norms.append(float(w @ w))
        if norms[-1] == 0.0:
            break
        v = w / np.sqrt(norms[-1])
    return np.array(norms)


def _overflow(what: str) -> InputError:
    """A norm past float64's range: no widening of rsqrt's domain holds it (the domain's
    message advised one), only a smaller A."""
    return InputError(f"{what} overflows float64 (inf); scale A by a power of 2 first")


def check_domain(kind: str, matrix: np.ndarray, iters: int,
                 parameters: dict[str, dict[str, float]] | None = None) -> None:
    """Refuse matrices whose norms leave rsqrt's domain or whose result leaves the products'
    span: the machine would return numbers nobody can vouch for. `parameters` are the blocks'
    values the program runs with (its dtype's defaults and --param): rsqrt.high=1000 that widened
    the domain was refused against the default domain, with advice to scale A."""
    parameters = parameters or {}
    rsqrt = make_block("rsqrt", **parameters.get("rsqrt", {})).domain()
    product = make_block("matmul_tn", **parameters.get("matmul_tn", {})).domain()
    if kind == "inverse":
        with np.errstate(over="ignore"):  # 1e308 squared: inf, refused below without a warning
            frobenius2 = float(np.sum(matrix ** 2))
        if not np.isfinite(frobenius2):
            raise _overflow("||A||_F^2")
        if not rsqrt.contains(np.array([frobenius2])):
            raise InputError(f"||A||_F^2 = {frobenius2:.4g} is outside rsqrt's domain "
                             f"{rsqrt.explained()}; scale A by a power of 2 first")
        if np.linalg.cond(matrix) > 1e8:
            raise InputError("A is singular or nearly so (condition number > 1e8)")
        if not product.contains(np.linalg.inv(matrix)):
            raise InputError(f"A^-1 has entries outside the products' domain "
                             f"{product.explained()}")
        return
    values = np.linalg.eigvals(matrix)
    order = np.argsort(-np.abs(values))
    top = values[order[0]]
    if top == 0:  # nilpotent: the norms below were refused with advice to rescale A
        raise InputError("every eigenvalue of A is 0: there is no dominant eigenpair")
    if abs(top.imag) > 0 or (len(values) > 1 and
                             abs(values[order[1]]) > (1 - 1e-6) * abs(top)):
        raise InputError("power iteration needs one real eigenvalue of largest modulus; "
                         f"this matrix has {', '.join(f'{v:.4g}' for v in values[order[:2]])}")
    with np.errstate(over="ignore", invalid="ignore"):  # inf norms are refused just below
        norms = power_norms(matrix, iters)
    if not rsqrt.contains(norms):
        step = int(np.flatnonzero(~((norms >= rsqrt.low) & (norms <= rsqrt.high)))[0])
        if not np.isfinite(norms[step]):
            raise _overflow(f"||A v||^2 at iteration {step + 1}")
        if norms[step] == 0:  # no rescaling helps: A maps the iterate to 0
            raise InputError(f"A v = 0 at iteration {step + 1} from the start (1, ..., 1) / "
                             "sqrt(n): power iteration has no vector to normalize")
        raise InputError(f"||A v||^2 ranges over [{norms.min():.4g}, {norms.max():.4g}] over "
                         f"the iterations (iteration {step + 1}: {norms[step]:.4g}), not inside "
                         f"rsqrt's domain {rsqrt.explained()}; scale A by a power of 2 first")


@dataclass
class LinalgResult:
    """What a run gives: the transformer's, the exact algorithm's and numpy's answers."""

    kind: str
    transformer: dict[str, np.ndarray]
    exact: dict[str, np.ndarray]
    numpy: dict[str, np.ndarray]
    errors: dict[str, float]
    bound: float
    steps: int
    dtype: str
    source: str
    domain: str
    """"ok", or the first block call outside the domain its error bound covers."""

    @property
    def converged(self) -> bool:
        """Whether the exact algorithm is within CONVERGED of numpy.linalg. The inverse's
        bound needs it: before, the transformer's trajectory differs from the exact one
        through rsqrt's start value eps (3.6 %), not through precision. Power iteration's
        bound holds at every T, but a non-converged eigenpair is not the one asked for."""
        return self.errors["exact_algorithm_error"] <= CONVERGED

    @property
    def vouches(self) -> bool:
        """Whether the bound (relative) vouches for a digit of the result: from VACUOUS on, a
        zero matrix would be within it. An inverse at condition 1e7 with --param
        matmul_tn.span=1e8 was 133 % off under a bound of 5e18, and exited 0."""
        return self.bound < VACUOUS

    @property
    def within_bound(self) -> bool:
        return self.domain == "ok" and self.vouches and (
            not self.converged or self.errors["transformer_error"] <= self.bound)


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want|: the error measure every linalg line reports."""
    return float(np.abs(got - want).max() / np.abs(want).max())


def _aligned(vector: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """The unit eigenvector with the sign that matches `reference`."""
    return vector * (1.0 if vector @ reference >= 0 else -1.0)


ITERATION_ADVICE = {
    "inverse": "Newton-Schulz converges quadratically, so 20-60 suffice",
    "eig": "power iteration gains a factor |lambda2/lambda1| each, 30 by default"}
"""How many iterations `kind` needs, for the message refusing a count: eig's named
Newton-Schulz, which it does not run."""


def check_iters(iters: int, kind: str) -> None:
    """An iteration count the program can be expanded for: solve(..., 10**5) in Python ran
    for minutes (the command line refused it, the function did not)."""
    if isinstance(iters, bool) or not isinstance(iters, numbers.Integral) or not (
            1 <= iters <= MAX_ITERS):
        raise InputError(f"--iters must be between 1 and {MAX_ITERS}, got {iters!r} (each "
                         f"iteration is several instructions of the program; "
                         f"{ITERATION_ADVICE[kind]})")


def solve(kind: str, matrix: np.ndarray, iters: int, config: EngineConfig,
          given: dict[str, dict[str, float]] | None = None,
          progress: Callable[[int], None] | None = None) -> LinalgResult:
    """Run `kind` ("inverse" or "eig") on the transformer and exactly; compare with numpy.
    `progress` is told the transformer's passes (a 16 x 16 eig at --iters 1000 takes about
    ten minutes)."""
    from vm.runtime.executor import run_transformer  # torch: not for every `ltvm` call

    if kind not in KINDS:  # anything else ran eig
        raise InputError(f"unknown kind {kind!r} (choose from {', '.join(KINDS)})")
    check_iters(iters, kind)
    matrix = as_matrix(matrix)
    dtype = config.dtype or "float64"
    defaults, given = dtype_parameters(dtype), given or {}
    check_parameters(CATALOGUE, given)  # each named, before the domain check builds blocks
    check_domain(kind, matrix, iters, {name: {**defaults.get(name, {}), **given.get(name, {})}
                                       for name in ("rsqrt", "matmul_tn")})
    check_representable(matrix, dtype)  # after: the domain's advice to scale A comes first
    source = linalg_source(kind, matrix, iters)
    program = FLEQ.assemble_text(source, f"<linalg {kind}>", parameters=given,
                            defaults=defaults)
    result = run_transformer(program, fleq_geometry_for(program), MAX_STEPS, config, progress)
    if not result.halted:
        raise StepLimitExceeded(f"the program did not halt within {MAX_STEPS} steps")
    reference = run_fleq_reference(program, MAX_STEPS)
    violation = first_domain_violation(program, MAX_STEPS, dtype)
    domain = "ok" if violation is None else violation.describe()
    got = program.named_memory(result.memory)
    exact = program.named_memory(reference.cells)
    product = make_block("matmul_tn", **dict(dict(program.functions)["matmul_tn"]))
    n, a_max = len(matrix), float(np.abs(matrix).max())
    if kind == "inverse":
        inverse = np.linalg.inv(matrix)
        x, x_exact = (np.asarray(m["X"], dtype=float).reshape(n, n) for m in (got, exact))
        errors = {"error": relative_error(x, inverse),
                  "exact_algorithm_error": relative_error(x_exact, inverse),
                  "transformer_error": relative_error(x, x_exact)}
        scale = float(np.abs(x_exact).max())
        bound = inverse_error_bound(n, a_max, scale, dtype, product) / scale
        return LinalgResult(kind, {"inverse": x}, {"inverse": x_exact}, {"inverse": inverse},
                            errors, bound, result.steps, dtype, source, domain)
    values, vectors = np.linalg.eig(matrix)
    order = np.argsort(-np.abs(values))
    # lam2 is the second modulus: the real part of a complex pair (2, +-1.9i gave 0) made the
    # bound's convergence ratio |lam2 / lam1| 0 instead of 0.95
    lam1, lam2 = float(values[order[0]].real), float(abs(values[order[1]])) if n > 1 else 0.0
    top = vectors[:, order[0]].real
    top /= np.linalg.norm(top)
    v = _aligned(np.asarray(got["v"], dtype=float).reshape(-1), top)
    v_exact = _aligned(np.asarray(exact["v"], dtype=float).reshape(-1), top)
    lam, lam_exact = float(got["lam"]), float(exact["lam"])
    errors = {"error": max(relative_error(v, top), abs(lam - lam1) / abs(lam1)),
              "exact_algorithm_error": max(relative_error(v_exact, top),
                                           abs(lam_exact - lam1) / abs(lam1)),
              "transformer_error": max(relative_error(v, v_exact),
                                       abs(lam - lam_exact) / abs(lam1))}
    # The routines' bounds are for symmetric A. For a diagonalizable one, errors reach the
    # eigenvector through the eigenvector basis (its condition number, 1 when symmetric), and
    # the Rayleigh quotient is no longer stationary there: its slope ||(A^T - lam1) v|| carries
    # the vector's error into lam. A non-normal A (3x3, 0.5 .. 0.4 on the diagonal, 7 below
    # it) exceeded the symmetric bound in float64 and stayed under it 19 % off in float32.
    basis = 1.0 if np.array_equal(matrix, matrix.T) else float(np.linalg.cond(vectors))
    vector_bound = basis * eigenvector_error_bound(n, a_max, lam1, lam2, dtype, product)
    slope = float(np.linalg.norm((matrix.T - lam1 * np.eye(n)) @ top))
    value_bound = (rayleigh_error_bound(n, a_max, lam1, dtype, product)
                   + slope * math.sqrt(n) * vector_bound)
    bound = max(vector_bound / float(np.abs(v_exact).max()), value_bound / abs(lam1))
    return LinalgResult(kind, {"eigenvalue": np.array(lam), "eigenvector": v},
                        {"eigenvalue": np.array(lam_exact), "eigenvector": v_exact},
                        {"eigenvalue": np.array(lam1), "eigenvector": top},
                        errors, bound, result.steps, dtype, source, domain)


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "linalg", help="matrix inverse or dominant eigenpair on the transformer",
        description="Load a square matrix A from FILE.npy, build the FLEQ program (inverse: "
                    "X = inverse(A, iters=T), Newton-Schulz; eig: v = power_iteration(A, "
                    "iters=T) and lam = rayleigh(A, v)), run it on the looped transformer and "
                    "on the exact reference, and print the result beside numpy.linalg. "
                    "error: relative error against numpy; exact_algorithm_error: the same "
                    "algorithm run exactly; transformer_error: transformer against the exact "
                    "algorithm, with its documented bound (for the inverse it holds once the "
                    f"iteration has converged); converged: yes when exact_algorithm_error <= "
                    f"{CONVERGED:g}. Exit code 0 when converged and transformer_error is within "
                    "the bound, 1 when it has not converged (raise --iters), when the error "
                    f"exceeds the bound or the bound is {VACUOUS:g} or more (it vouches for no "
                    "digit), or when a block ran outside the domain its bound "
                    "covers (the domain: line names the step), 2 for bad input.",
        epilog="example: python -c \"import numpy; numpy.save('a.npy', [[2.0, 0.5], "
               "[0.3, 1.5]])\" && ltvm linalg inverse --matrix a.npy --iters 8")
    parser.add_argument("kind", choices=list(KINDS),
                        help="inverse: A^-1; eig: the eigenvalue of largest modulus and its "
                             "unit eigenvector")
    parser.add_argument("--matrix", required=True, metavar="FILE.npy",
                        help="a square real matrix saved with numpy.save, at most 16 x 16")
    parser.add_argument("--iters", type=integer, metavar="T",
                        help="loop iterations (default 20 for inverse, 30 for eig)")
    parser.add_argument("--param", action="append", default=[], metavar="FUNC.KEY=VALUE",
                        help="a block parameter, e.g. matmul_tn.scale=1e-4 (repeatable; float32 "
                             "runs give the products their float32 eps, 1e-3, unless set)")
    parser.add_argument("--show", action="store_true", help="print the FLEQ program first")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_time_limit(parser)
    add_engine_arguments(parser)
    parser.set_defaults(func=run)


def _format(value: np.ndarray) -> str:
    """Every digit (the error lines are computed from these values)."""
    return json.dumps(np.asarray(value).tolist())


def run(args: argparse.Namespace) -> int:
    matrix = load_matrix(args.matrix)
    iters = args.iters if args.iters is not None else (20 if args.kind == "inverse" else 30)
    check_iters(iters, args.kind)
    config = engine_config(args)
    if config.dtype is None:
        config = replace(config, dtype="float64")
    progress = Progress("steps", max_seconds=args.max_seconds)  # minutes at d = 16
    try:
        result = solve(args.kind, matrix, iters, config, block_parameters(args.param), progress)
    finally:
        progress.done()
    if args.show and not args.json:
        print(result.source)
    if args.json:  # a NaN result (a --param that overflows the products) is null, as in run
        shown = {"program": result.source} if args.show else {}
        print(json.dumps(finite_or_null({**shown, "kind": result.kind, "dtype": result.dtype, "steps": result.steps,
                          "iters": iters, "bound": result.bound, "domain": result.domain,
                          "converged": result.converged, **result.errors,
                          **{f"transformer_{k}": np.asarray(v).tolist()
                             for k, v in result.transformer.items()},
                          **{f"exact_{k}": np.asarray(v).tolist()
                             for k, v in result.exact.items()},
                          **{f"numpy_{k}": np.asarray(v).tolist()
                             for k, v in result.numpy.items()}}), indent=2, allow_nan=False))
    else:
        for name in result.transformer:
            print(f"{name}: {_format(result.transformer[name])}")
            print(f"numpy_{name}: {_format(result.numpy[name])}")
        for key in ("error", "exact_algorithm_error", "transformer_error"):
            print(f"{key}: {result.errors[key]:.6g}")
        print(f"bound: {result.bound:.6g}")
        print(f"converged: {'yes' if result.converged else 'no'}")
        print(f"iters: {iters}")
        print(f"steps: {result.steps}")
        print(f"dtype: {result.dtype}")
        print(f"domain: {result.domain}")
    algorithm = "Newton-Schulz" if args.kind == "inverse" else "power iteration"
    failed = False
    if not result.converged:  # at the most --iters, "raise --iters" would only be refused
        advice = ("raise --iters" if iters < MAX_ITERS else
                  f"--iters is at its most ({MAX_ITERS})" + (
                      ": |lam2| is too close to |lam1| for power iteration"
                      if args.kind == "eig" else ""))
        print(f"ltvm: {algorithm} has not converged in {iters} iterations (the exact algorithm "
              f"is {result.errors['exact_algorithm_error']:.3g} from numpy.linalg, more than "
              f"{CONVERGED:g}); {advice}", file=sys.stderr)
        failed = True
    if result.domain != "ok":
        print("ltvm: a block ran outside the domain its error bound covers", file=sys.stderr)
        failed = True
    elif not result.vouches:
        print(f"ltvm: the documented bound is {result.bound:.3g} relative to the result: it "
              "vouches for no digit (it grows with the condition number of A, or for eig of its "
              "eigenvectors, with the size in float32, and with --param values such as "
              "matmul_tn.span)", file=sys.stderr)
        failed = True
    elif not result.within_bound:
        print("ltvm: the transformer's error exceeds the documented bound", file=sys.stderr)
        failed = True
    return 1 if failed else 0

