"""Running machines: the executor (loop, halting, batching, device, dtype, checked mode),
the active-column and fused evaluations of a pass (bit-identical to the full pass, with a
run-time guard), the lockstep comparison with the reference interpreter, and the weight
export.

Takes programs and punchcards; may import `vm.common`, `vm.transformer`, `vm.machines`
and the program models, never a parser (`assembler.subleq`, `assembler.fleq`, ...).
"""
