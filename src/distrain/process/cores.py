"""The CPU cores a process may run on, and its share of them among the node's processes."""

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
