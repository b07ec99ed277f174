"""``torch.save`` to a path never leaves a half-written file: it writes beside it and renames.

A job's processes can die in the middle of a write: the launcher killed (its workers go with it,
so no orphan trains on beside the rerun), a node's OOM killer, a preemption without grace.  A
script that saves its snapshot in place, ``torch.save(snapshot, "snapshot.pt")`` as PyTorch's own
fault-tolerance tutorial does, is then left with a truncated file that every restart fails to
load (``EOFError``; chaos campaign, benchmarks/chaos/RESULTS.md).  In a worker distrain starts,
``torch.save`` to a path writes a temporary file in the same folder and renames it over the path
(``os.replace``, atomic on POSIX), so the path holds the old snapshot or the new one, never part
of one.  An existing file keeps its permission bits; a symbolic link keeps pointing where it did
(the file it names is replaced).  A file object, a path that is not a regular file (``/dev/null``,
a pipe) or a folder this process cannot create files in is written as torch writes it.  Where
it is installed: the workers `distrain run` forks from its preloaded server, every process of a
run on stand-in devices, and ``distrain.init()`` under `distrain run`; not a plain script's fresh
interpreters (``--start-method spawn``, or the forked start's fallback), which stay torch's own.

What it does not do: flush to the disk (a power cut may still lose the newest write; a killed
process cannot).  A temporary file of a process killed mid-write is removed by the next save to
the same path on that host.  ``DISTRAIN_ATOMIC_SAVE=0`` turns it off (a filesystem whose rename
copies, such as some object-store mounts).
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import stat
import threading
from collections.abc import Callable
from typing import Any

from distrain.process import patching

FEATURE = "atomic_save"


def _target(f: object) -> str | None:
    """The regular file (or a path to create) `f` names, through symbolic links; else None."""
    if not isinstance(f, (str, os.PathLike)):
        return None
    name = os.fspath(f)
    if not isinstance(name, str):  # a bytes path-like: as torch writes it
        return None
    path = os.path.realpath(name)
    if os.path.lexists(path) and not os.path.isfile(path):
        return None
    return path


def _prefix(name: str) -> str:
    """The temporary files' prefix for the file `name` written on this host."""
    return f".{name}.distrain-{socket.gethostname()}-"


def _sweep(folder: str, name: str) -> None:
    """Remove the temporary files that processes of this host, now gone, left for `name`."""
    import psutil

    prefix = _prefix(name)
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            pid = entry.name[len(prefix) :].split(".", 1)[0]  # <pid>.<thread>.tmp
            if entry.name.startswith(prefix) and entry.name.endswith(".tmp") and pid.isdigit():
                if not psutil.pid_exists(int(pid)):
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)


def atomic(original: Callable[..., Any]) -> Callable[..., Any]:
    """`original` (torch's save), writing a path through a temporary file and a rename."""

    @functools.wraps(original)
    def save(obj: object, f: Any, *args: Any, **kwargs: Any) -> Any:
        path = _target(f)
        if path is None:
            return original(obj, f, *args, **kwargs)
        folder, name = os.path.split(path)
        # one per process and thread: two threads saving the same path never share one
        tmp = os.path.join(folder, f"{_prefix(name)}{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666))
        except OSError:  # a folder this process cannot create files in: in place, as torch does
            return original(obj, f, *args, **kwargs)
        try:
            result = original(obj, tmp, *args, **kwargs)
            with contextlib.suppress(OSError):  # an existing file keeps its mode
                os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _sweep(folder, name)
        return result

    return save


def install(enabled: bool = True) -> None:
    """Make ``torch.save`` (and ``torch.serialization.save``) write paths atomically (once)."""
    if not enabled:
        return
    import torch
    import torch.serialization

    for owner in (torch, torch.serialization):
        patching.wrap(owner, "save", atomic, feature=FEATURE)
