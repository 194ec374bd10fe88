"""Measurement and inspection tools: the exactness sweep, block error measurement,
benchmarks and their workloads, pictures, progress lines.

Sits on top of the runtime: may import the assembler, the runtime and the instruction-set
objects (`vm.isa`).
"""
