"""A forked worker's own children end with it, as a torchrun worker's do (issue 41).

torchrun starts each worker in a session of its own (``start_new_session=True``) and stops it with
``os.killpg``: whatever the script started itself (a ``Process`` loop or ``mp.spawn`` that
distrain did not read as self-starting, a helper) is in the worker's process group and is
stopped with it. torch's multiprocessing context, which runs the fast start's forked workers,
signals the worker's pid only: its children were left running, re-parented to pid 1, after the
job had failed.

So a forked worker makes itself a session leader first (``process.lineage.own_session``,
as torchrun's worker is one), and the launcher's agent stops each worker's whole group
(:func:`stop_whole_groups`: torch's ``MultiprocessContext._close`` wrapped through the patching
registry): the stop signal to every group first, as torch's ``SubprocessHandler.close`` sends
it, then torch's own close (its wait, its SIGKILL of a worker that outlived the wait), then
SIGKILL to the group of each worker torch had to kill.

When a worker fails, torch's ``ProcessContext.join`` SIGTERMs the others and waits up to 30 s
(``_join_procs_with_timeout``) before its SIGKILL.  A worker that is stopped (SIGSTOP: a rank
frozen for good, which the watchdog has just named) cannot obey SIGTERM, so the job ended 30 s
after the verdict for nothing (measured: verdict at 9 s, the agent's SIGKILL at 41 s).  That wait
is wrapped too (:func:`kill_stopped_in_join`): a worker stopped when it starts is SIGKILLed, with
its group; a live one keeps its grace (launch/nodes/stop_watch.py does the same on a static
job's other nodes).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from typing import Any

FEATURE = "fast_start"


def _signal_group(pid: int, sig: int) -> None:
    """`sig` to the process group `pid` leads, if it is one (a worker that set up its session)."""
    with contextlib.suppress(OSError):  # a leader already gone: its group may remain
        if os.getpgid(pid) != pid:
            return  # not a group leader (it did not set up its session): torch's kill only
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _wrap_close(original: Callable[..., Any]) -> Callable[..., Any]:
    def _close(self: Any, *args: Any, **kwargs: Any) -> None:
        death_sig = kwargs.get("death_sig", args[0] if args else signal.SIGTERM)
        context = getattr(self, "_pc", None)
        processes = [p for p in getattr(context, "processes", None) or [] if p.pid is not None]
        # every worker's group, exited ones too (their children may remain), as torchrun does
        for proc in processes:
            _signal_group(proc.pid, death_sig)
        original(self, *args, **kwargs)
        for proc in processes:  # torch had to SIGKILL the worker: its group gets the same
            if proc.exitcode == -signal.SIGKILL:
                _signal_group(proc.pid, signal.SIGKILL)

    return _close


def _wrap_join_wait(original: Callable[..., Any]) -> Callable[..., Any]:
    def _join_wait(self: Any, *args: Any, **kwargs: Any) -> None:
        import psutil

        for proc in getattr(self, "processes", None) or []:
            if proc.pid is None or proc.exitcode is not None:
                continue
            with contextlib.suppress(psutil.Error, OSError):  # gone meanwhile
                if psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED:
                    _signal_group(proc.pid, signal.SIGKILL)
                    os.kill(proc.pid, signal.SIGKILL)  # not a group leader: the pid itself
        original(self, *args, **kwargs)

    return _join_wait


def kill_stopped_in_join() -> None:
    """Have the agent SIGKILL a stopped worker, not wait 30 s for it, once another failed."""
    from torch.multiprocessing.spawn import ProcessContext

    from distrain.process import patching

    patching.wrap(ProcessContext, "_join_procs_with_timeout", _wrap_join_wait, feature=FEATURE)


def stop_whole_groups() -> None:
    """Have torch's agent stop each forked worker's process group, not only its pid, and
    SIGKILL a stopped one at once (:func:`kill_stopped_in_join`)."""
    from torch.distributed.elastic.multiprocessing.api import MultiprocessContext

    from distrain.process import patching

    patching.wrap(MultiprocessContext, "_close", _wrap_close, feature=FEATURE)
    kill_stopped_in_join()
