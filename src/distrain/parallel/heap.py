"""glibc's heap under a sharded model: large buffers get own mappings, so freeing returns memory.

Opt-in (``DISTRAIN_MAP_LARGE_BUFFERS=1``, ``Settings.map_large_buffers``): it changes the
allocator of the whole process and costs step time, so a job gets it only when asked for.

By default glibc serves an allocation above 128 KiB with its own ``mmap`` only until the first
such block is freed; then it raises the threshold to that size (up to 32 MiB), and every later
buffer of that size comes from the heap.  A sharded model allocates and frees large buffers all
the time (each unit's full weights while it is built, the all-gathered weights of every forward
and backward, reduce-scatter inputs, activations); the heap keeps them after they are freed, so
resident memory stays near what an unsharded model needs.  A fixed threshold also turns the
dynamic raise off, and costs step time: every large buffer is mapped, faulted in and unmapped
each step.  What it saves and costs: benchmarks/train/RESULTS.md ("heap setting").
When it is asked for, a user's own ``MALLOC_MMAP_THRESHOLD_`` still wins
and distrain leaves the allocator alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util

from distrain.settings import USER_MMAP_THRESHOLD

#: glibc's mallopt() parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
#: buffers from this size on get their own mapping under a sharded model
MMAP_THRESHOLD_BYTES = 1 << 20
#: the environment variable glibc reads at start-up for the same setting: a user's choice wins
USER_SETTING = USER_MMAP_THRESHOLD

_applied = False


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
    except OSError:
        return None
    return (
        libc if hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version") else None
    )  # glibc only


def map_large_buffers(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at `threshold` bytes for this process (once); True when set.

    Left alone when the C library is not glibc; a user's ``MALLOC_MMAP_THRESHOLD_`` turns the
    setting off before this is called (distrain.settings).
    """
    global _applied
    if _applied:
        return False
    libc = _libc()
    if libc is None or libc.mallopt(M_MMAP_THRESHOLD, int(threshold)) != 1:
        return False
    _applied = True
    return True
