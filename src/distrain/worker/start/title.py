"""A worker's process title: `distrain rank 1/2 · train.py --epochs 30` in ps, top and nvidia-smi
(`distrain rank 0/2 · group 1 · …` under ``--replicas``).

Workers forked from `distrain run`'s fork server would otherwise all show the server's command
line (``python -B -c from multiprocessing.forkserver import main…``), and those of
``distrain.spawn`` show multiprocessing's ``spawn_main``: no way to tell which job or rank a
process belongs to.  The title replaces the command line (``/proc/PID/cmdline``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable

# Imported at module load, before anything edits the environment: setproctitle finds the
# process's argv memory by walking from `environ`, which a rewritten os.environ no longer
# points at (forked workers rebuild theirs; the fork server imports this module first).
_setproctitle: Callable[[str], None] | None
try:
    from setproctitle import setproctitle as _setproctitle
except ImportError:  # a dependency, but a title is never worth failing a job for
    _setproctitle = None

#: longer titles are cut here (ps and nvidia-smi columns are narrow anyway)
MAX_TITLE = 200


def worker_title(
    rank: int | str, world_size: int | str, argv: list[str], group: int | str | None = None
) -> str:
    """``distrain rank R/W · script.py args`` for the script command line `argv`.

    Under ``--replicas`` every group has a rank 0: ``distrain rank R/W · group G · …`` then.
    """
    script = os.path.basename(argv[0]) if argv else "python"
    command = shlex.join([script, *argv[1:]])
    group_part = f"group {group} · " if group not in (None, "") else ""
    title = f"distrain rank {rank}/{world_size} · {group_part}{command}"
    return title if len(title) <= MAX_TITLE else title[: MAX_TITLE - 1] + "…"


def set_worker_title(
    rank: int | str, world_size: int | str, argv: list[str], group: int | str | None = None
) -> None:
    """Set this process's title (a no-op where neither setproctitle nor /proc can)."""
    title = worker_title(rank, world_size, argv, group)
    if _setproctitle is not None:
        _setproctitle(title)
    if _cmdline().startswith(title):
        return
    # setproctitle finds the argv area by walking back from `environ`; in a worker forked from
    # the fork server that pointer no longer leads there, so write the area the kernel reports
    _overwrite_argv_area(title)


def _cmdline() -> str:
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _overwrite_argv_area(title: str) -> None:
    """Write `title` over this process's argv memory (Linux: arg_start..arg_end in stat)."""
    import ctypes

    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = (
            int(fields[45]),
            int(fields[46]),
        )  # fields 48 and 49 of proc(5), after "pid (comm)"
    except (OSError, IndexError, ValueError):
        return
    size = end - start
    if size < 2:
        return
    data = title.encode()[: size - 1]
    ctypes.memmove(start, data + b"\0" * (size - len(data)), size)
