"""`distrain run --cpu`: an unmodified CUDA/NCCL script runs on N CPU processes (worker side).

:func:`install` runs in every worker before the script's own code touches torch: the fast
start's forked workers call it before running the script (worker/fast_start/forked.py); fresh
interpreters (``--start-method spawn``, the fallback, ``torch.multiprocessing.spawn``
children, DataLoader workers started with spawn) get it from ``boot/sitecustomize.py`` on the
PYTHONPATH the launcher set, the moment they import torch.  The pieces:

- :mod:`.devices`: CUDA device arguments of factories, ``.to``/``.cuda()``/``new_*`` → CPU;
- :mod:`.fake_cuda`: ``torch.cuda``/``torch.accelerator`` answering for N stand-in devices;
- :mod:`.patches`: nccl → gloo, DDP/DataParallel, SyncBatchNorm, autocast, GradScaler,
  ``torch.load``, DataLoader pinning;
- :mod:`.refuse`: what needs a real GPU stops with one line naming the user's file:line.

At exit each process reports its counts of mapped calls (a ``rehearsal`` event in the job's
stream, distrain/events/); the launcher prints the summary.
"""

from __future__ import annotations

import atexit
import os

from distrain.settings import for_report

_installed_in: int | None = None


def requested() -> int:
    """The number of stand-in GPUs the launcher asked for (0: no rehearsal)."""
    return for_report().cpu_rehearsal or 0  # DISTRAIN_CPU_REHEARSAL; malformed: 0


def install() -> bool:
    """Install the rehearsal in this process if the launcher asked for it (once); True if active."""
    global _installed_in
    count = requested()
    if not count:
        return False
    if _installed_in is not None:
        return True
    # first: its tables name torch's own functions (any optimizer imports it)
    import torch._dynamo  # noqa: F401

    from distrain.worker.rehearse import devices, fake_cuda, patches, refuse

    devices.install()
    fake_cuda.install(count)
    patches.install()
    refuse.install()
    from distrain.settings import for_report
    from distrain.worker import atomic_save

    atomic_save.install(for_report().atomic_save)  # as in every worker of distrain run's own
    _installed_in = os.getpid()
    atexit.register(write_counts)
    return True


def write_counts() -> None:
    """Report this process's mapped-call counts for the launcher's end-of-job summary."""
    from distrain.events import emit
    from distrain.worker.rehearse.devices import MAPPED

    if os.getpid() != _installed_in or not MAPPED:
        return  # a forked child (DataLoader worker) inherits the counts: only the installer writes
    emit("rehearsal", counts=dict(MAPPED))
