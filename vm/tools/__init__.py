"""Measurement, comparison and inspection tools: lockstep comparison, the exactness sweep,
block error measurement, the domain replay, benchmarks and their workloads, pictures,
progress lines.

Sits on top: may import the assembler, the runtime and the instruction-set objects
(`vm.isa`).
"""
