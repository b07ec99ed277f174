"""CPU thread count per process: neither 1 thread on a big node nor oversubscribed cores."""

from __future__ import annotations

from distrain.process.cores import threads_per_process


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
