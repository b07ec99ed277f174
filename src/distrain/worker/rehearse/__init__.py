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
stream, distrain/events/); the launcher prints the summary.  A ``multiprocessing`` child (a
script's ``Process`` loop, a DataLoader worker) ends through ``os._exit``, past ``atexit``: it
reports from multiprocessing's own exit function, which its bootstrap runs after ``run()``.
"""

from __future__ import annotations

import atexit
import functools
import multiprocessing.util
import os
from collections import Counter

from distrain.settings import for_report

_installed_in: int | None = None
_reported_in: int | None = None


class _ForkMark:
    """What multiprocessing's after-fork registry holds (it keeps a weak reference)."""


_FORK_MARK = _ForkMark()


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
    # a forkserver or spawn child installed here, and ends through os._exit: exit functions
    multiprocessing.util.Finalize(None, write_counts, exitpriority=0)
    multiprocessing.util.register_after_fork(_FORK_MARK, _forked)
    return True


def _forked(mark: _ForkMark) -> None:
    """In a forked multiprocessing child: report what it maps itself, when its run() ends."""
    from distrain.worker.rehearse.devices import MAPPED

    inherited = Counter(MAPPED)  # the parent's counts, which the parent reports
    multiprocessing.util.Finalize(None, functools.partial(write_counts, inherited), exitpriority=0)


def write_counts(inherited: Counter[str] | None = None) -> None:
    """Report this process's mapped-call counts (less `inherited`, a forked child's parent's)
    for the launcher's end-of-job summary; once per process."""
    global _reported_in
    from distrain.events import emit
    from distrain.worker.rehearse.devices import MAPPED

    if inherited is None and os.getpid() != _installed_in:
        return  # a child forked outside multiprocessing inherits the counts: only they are there
    counts = Counter(MAPPED)
    counts.subtract(inherited or Counter())
    counts = +counts  # what this process mapped itself
    if _reported_in == os.getpid() or not counts:
        return
    _reported_in = os.getpid()
    emit("rehearsal", counts=dict(counts))
