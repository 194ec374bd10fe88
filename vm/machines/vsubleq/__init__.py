"""Standard (von Neumann) SUBLEQ: one memory of N-bit words holding code and data, the
exact reference interpreter, the punchcard and the looped transformer that runs it.

May import `vm.common`, `vm.transformer` and `vm.blocks`; never a parser.
"""
