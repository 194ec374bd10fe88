"""Applications built on the FLEQ machine: the calculator and SGD training.

Sit on top: may import the assembler, the runtime, the tools and `vm.isa`.
"""
