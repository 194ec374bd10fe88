"""vm/__init__.py: importing the package asks torch's CPU allocator for huge pages."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
PROBE = """
import vm, torch
x = torch.ones(16 << 20, dtype=torch.uint8)
print(sum(int(line.split()[1]) for line in open('/proc/self/smaps')
          if line.startswith('AnonHugePages')))
"""


def huge_page_kilobytes(env_value: str | None) -> int:
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    if env_value is not None:
        env["THP_MEM_ALLOC_ENABLE"] = env_value
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, check=True)
    return int(done.stdout)


@pytest.mark.skipif(not THP.exists() or "[never]" in THP.read_text(),
                    reason="the kernel offers no transparent huge pages")
def test_importing_vm_gives_large_tensors_huge_pages_unless_the_user_said_no():
    assert huge_page_kilobytes(None) >= 2048
    if "[madvise]" in THP.read_text():  # with [always] every large block gets them
        assert huge_page_kilobytes("0") == 0
