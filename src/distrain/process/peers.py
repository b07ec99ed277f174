"""Whether a peer process still lives: the lifecycle's check, which the checkpoint writer asks.

A process publishes :func:`process_identity`; another process of the same machine and pid
namespace can tell from it (:func:`gone`) whether that process has ended.  Elsewhere nothing is
judged: a process on another machine is never called dead.
"""

from __future__ import annotations

import os
import uuid

import psutil


def process_identity() -> str:
    """``<boot id>:<pid namespace>:<pid>``: equal prefixes mean this process can see that pid."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:  # not Linux: never judge another process dead
        return f"{uuid.uuid4()}:0:{os.getpid()}"
    return f"{boot}:{namespace}:{os.getpid()}"


def gone(identity: str) -> bool:
    """True when the process `identity` names is visible from here and no longer exists."""
    where, _, pid = identity.rpartition(":")
    return where == process_identity().rsplit(":", 1)[0] and not psutil.pid_exists(int(pid))
