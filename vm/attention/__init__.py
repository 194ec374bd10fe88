"""Attention as an object of study: simulations and algorithms from the papers beside the
main one (`chunked`: simulating a large transformer's attention with small ones).

Self-contained numerics; may import `vm.common` only.
"""
