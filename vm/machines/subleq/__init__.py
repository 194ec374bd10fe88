"""The paper's SUBLEQ (Lemma 4): punchcard layout and codec, the 4-layer machine, and the
exact reference interpreter that is its oracle.

May import `vm.common`, `vm.transformer`, `vm.blocks` and the program model
(`assembler.program`); never a parser.
"""
