"""FLEQ (Theorem 2): geometry and layout, punchcard codec, the machine built from the
registered function blocks, the exact reference interpreter, and its replay of block
domains.

May import `vm.common`, `vm.transformer`, `vm.blocks`, `vm.functions` and the program
model (`assembler.fleq_program`); never a parser.
"""
