"""What ties a process to the one that started it: its session, its parent's death, the signal
dispositions it inherits.  The fast start's fork server and workers and the replica
groups' processes use it (a chain held together only by pipes otherwise).  Imports no torch.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Any


def ignored_signals(status: str = "/proc/self/status") -> tuple[int, ...]:
    """The signals this process ignores (``SIG_IGN``), as the kernel has them.

    Read from the kernel's ``SigIgn`` mask, not ``signal.getsignal``: a disposition set from C
    (or before Python started) is what exec passes on, whatever Python's table says.
    """
    try:
        with open(status) as f:
            line = next((x for x in f if x.startswith("SigIgn:")), "")
    except OSError:
        line = ""
    if not line:  # no procfs: Python's own view
        return tuple(int(s) for s in signal.Signals if _getsignal_or_none(s) == signal.SIG_IGN)
    mask = int(line.split(":", 1)[1].strip(), 16)
    return tuple(bit + 1 for bit in range(64) if mask >> bit & 1)


def _getsignal_or_none(sig: int) -> Any:
    try:
        return signal.getsignal(sig)
    except (ValueError, OSError):
        return None


def own_session() -> None:
    """Make this process a session and group leader, as torchrun starts its workers.

    A fast-start worker does it first (worker/fast_start/forked.py): its own children are then
    in its group, which the launcher stops with it (launch/fast_start/worker_groups.py).
    """
    try:
        os.setsid()
    except OSError:  # a group leader already: nothing to change
        pass


def die_with_parent() -> None:
    """SIGKILL this process when the thread that started it ends (Linux ``PR_SET_PDEATHSIG``).

    The chain launcher → fork server → worker (and launcher → replica group, lighthouse) holds
    together only by pipes that the workers themselves keep open: a SIGKILLed `distrain run`
    left its fork server and a rank running for good (seen in the chaos campaign). A parent
    that is already gone (re-parented before the call) kills this process at once.
    """
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)
