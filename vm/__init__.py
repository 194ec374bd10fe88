"""ltvm: a looped-transformer virtual machine.

A program is an input matrix X (the punchcard); one transformer with
hardcoded weights is applied in a loop, X <- TF(X), one instruction per pass.
"""

import os

__version__ = "0.1.0"

# torch's CPU allocator asks for transparent huge pages for blocks of 2 MiB and more when
# this is set before its first allocation: a batch's X spans tens of MB with each program's
# rows a page apart, and with 4 KiB pages a batch of 256 at n = 1024 ran 13 % below a batch
# of 16 (docs/speed.md, "Huge pages"). A value the user set wins; it does nothing once torch
# has allocated, or where the kernel offers no huge pages.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
