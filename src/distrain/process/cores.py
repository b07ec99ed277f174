"""The CPU cores a process may run on, its share of them among the node's processes, and the
thread count it uses: neither 1 thread on a big node nor oversubscribed cores."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, which containers and mpirun narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_per_process(local_world_size: int) -> int:
    """Cores divided evenly among the processes of this node, at least 1."""
    return max(1, usable_cores() // max(1, local_world_size))


def choose_threads(
    local_world_size: int, requested: int | None = None, omp: str | None = None
) -> int:
    """The thread count to use.

    An explicit request (``init(threads=)`` or DISTRAIN_NUM_THREADS, through distrain.settings)
    wins, then an OMP_NUM_THREADS other than 1.
    OMP_NUM_THREADS=1 is what torchrun sets on every multi-process job whatever the machine, so
    it is treated as "not chosen" and replaced by cores / local processes.
    """
    if requested is not None:
        return max(1, int(requested))
    raw = omp or ""  # OMP_NUM_THREADS, through distrain.settings
    if raw.isdigit() and int(raw) > 1:
        return int(raw)
    return threads_per_process(local_world_size)
