"""ltvm: a looped-transformer virtual machine.

A program is an input matrix X (the punchcard); one transformer with
hardcoded weights is applied in a loop, X <- TF(X), one instruction per pass.
"""

__version__ = "0.1.0"
