"""The judging process's heap: glibc's malloc told to keep the memory it frees.

The references and checks are chains of elementwise float64 passes (references.intervals: each
a fresh tensor of 0.1-2 MB for most cases). By default glibc returns such blocks to the kernel as
they are freed (a block above its mmap threshold is unmapped; a free top of the heap above its trim
threshold is trimmed), so the next pass faults every page in again. With KEEP, a block under 32 MB
comes from the heap and up to 256 MB of free heap top stays mapped: repeated passes of one size
fault nothing (tests/test_heap.py; the time it saves: docs/performance.md section 10). Only the
judge is told: the implementation's process allocates as the user's own would, so its calls and
timings are not changed by the harness."""
from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3          # glibc's mallopt(3) parameters
# Blocks under 32 MB from the heap, not mmap (glibc's own ceiling for its adaptive threshold); up
# to 256 MB free at its top kept; the heap grown 64 MB at a time. A judge keeps its heap's high-water
# mark (fragmentation can put it above the peak of what is live) less what it trims past 256 MB.
KEEP = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 256 << 20, M_TOP_PAD: 64 << 20}


def keep_freed_memory() -> bool:
    """Set KEEP in this process's malloc; False where it is not glibc's (nothing changes there)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return all(mallopt(k, v) == 1 for k, v in KEEP.items())
