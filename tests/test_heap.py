"""harness.pipeline.heap: the judge's malloc keeps what it frees, so the elementwise passes of the
references stop faulting their pages in again (counted by the kernel: minor page faults)."""
import os
import platform
import subprocess
import sys

import pytest

FAULTS = """
import resource, sys, torch
if sys.argv[1] == "keep":
    from harness.pipeline.heap import keep_freed_memory
    assert keep_freed_memory()
a = torch.ones(1 << 17, dtype=torch.float64)          # 1 MB tensors: above glibc's first mmap threshold


def passes():
    for _ in range(50):
        b = a * 2
        c = b + 1
        d = c * b
        del b, c, d


passes()                                               # the heap grows to what the passes need
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
passes()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    return int(out.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_kept_memory_is_not_faulted_in_again():
    """The same passes again, once the heap has grown: kept, no page faults at all; by default,
    glibc trims the heap's free top and faults it in again (here 480 to 5 088 faults; how many
    depends on where the blocks lie, so the default is the more faulting of two processes)."""
    kept = _faults("keep")
    default = max(_faults("default") for _ in range(2))
    assert kept < 50 < default, (kept, default)
