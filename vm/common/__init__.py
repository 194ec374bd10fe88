"""The bottom layer: definitions both sides of the pipeline share.

Errors, the ±1 encodings, the SUBLEQ geometry and the signatures of FLEQ blocks and
routines as the assembler sees them. Imports nothing of this project outside this folder:
the assembler, the runtime and the tools all import it.
"""
