"""examples/fleq_compile_pace.py: runs on the CPU (dynamo's eager backend, no compile),
finds a pass that leaves X different from the full pass's, and refuses what it cannot run
before printing anything."""

from __future__ import annotations

import pytest
import torch

from example_scripts import example_module, run_example
from vm.runtime.executor import EngineConfig, TransformerExecutor, machine_for
from vm.machines.fleq.punchcard import fleq_geometry_for
from vm.tools.bench import fleq_workload

SCRIPT = "fleq_compile_pace.py"


def test_the_traced_halves_leave_x_equal_to_the_full_pass_on_the_cpu():
    done = run_example(SCRIPT, "--device", "cpu", "--backend", "eager", "--seconds", "0.1",
                       "calculator")
    assert done.returncode == 0, done.stderr
    rows = [line.split("|") for line in done.stdout.splitlines() if line.startswith("| ")]
    compiled = [row for row in rows if "halves compiled (eager)" in row[1]]
    assert len(compiled) == 1
    equal, _, made, _ = compiled[0][3].split()
    assert int(made) > 1 and equal == made
    assert float(compiled[0][4]) > 0


def test_lockstep_counts_only_the_passes_before_the_first_difference():
    module = example_module(SCRIPT)
    program = fleq_workload("calculator")
    config = EngineConfig(device="cpu", dtype="float64", checked=False, evaluation="full")
    executor = TransformerExecutor(fleq_geometry_for(program), config)
    X = executor.load([program])
    geometry = executor.geometry
    planted = X.clone()
    memory = machine_for(geometry, None).layout["mem"].start
    planted[0, memory, geometry.cell_column(1)] += 1.0  # an operand: every result after differs
    with torch.inference_mode():
        made, equal = module.lockstep(executor.runner(planted), executor.runner(X))
    assert made > 1 and equal == 0


@pytest.mark.parametrize("arguments, message", [
    (["--batch", "0"], "--batch: from 1 to 4096"),
    (["--seconds", "0"], "--seconds: more than 0"),
    (["--device", "cpu", "no_such_workload"], "no FLEQ workload or file named"),
])
def test_it_refuses_what_it_cannot_run_before_printing_anything(arguments, message):
    done = run_example(SCRIPT, *arguments)
    assert done.returncode == 2 and message in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
