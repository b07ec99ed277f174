"""A script that starts its own workers, run once by `distrain run` (worker side).

The launcher (launch/self_start/detect.py) found the script starting its own processes and set
``DISTRAIN_SELF_STARTING``.  :func:`install` runs in the script's process before its code
(the fast start's forked worker calls it; a fresh interpreter gets it from the boot
sitecustomize) and in each fresh child (spawn start method):

- in the script's process it names itself to its children (``DISTRAIN_SELF_START_WATCHER``),
  records every child ``multiprocessing`` starts and watches them form their group from their
  ``group`` events (watch.py);
- in every process, children included (forked ones inherit the hooks), it reports joining,
  forming and failing (members.py).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing.process
import os
import sys
from types import TracebackType
from typing import Any

from distrain.contract import SELF_START_WATCHER
from distrain.process import patching
from distrain.settings import for_report
from distrain.worker.self_start import members
from distrain.worker.self_start.watch import Watcher

_watcher: Watcher | None = None


def requested() -> bool:
    """Whether the launcher said this job's script starts its own workers."""
    return for_report().self_starting


def install() -> None:
    """Watch (in the script's process) or note (in its children) the group's forming; once."""
    global _watcher
    if not requested():
        return
    members.hook_process_run()
    if "torch" in sys.modules:
        members.hook_torch()
    if for_report().self_start_watcher or _watcher is not None:
        return  # a child (fresh interpreter): reports only; the watcher is its parent's
    from distrain.settings import Settings

    os.environ[SELF_START_WATCHER] = str(os.getpid())  # inherited by the children
    settings = Settings.read()
    _watcher = Watcher(settings.job_dir, settings.form_timeout_s, settings.error_file)
    atexit.register(_watcher.script_ended)
    _watch_children()
    _record_uncaught()


def _watch_children() -> None:
    """Every child ``multiprocessing`` starts in this process goes to the watcher."""
    watcher_pid = os.getpid()  # a forked child inherits this hook but watches nobody

    def make(original: Any) -> Any:
        def start(self: multiprocessing.process.BaseProcess) -> None:
            original(self)
            if _watcher is not None and self.pid is not None and os.getpid() == watcher_pid:
                _watcher.add(self)

        return start

    patching.wrap(multiprocessing.process.BaseProcess, "start", make, feature=members.FEATURE)


def _record_uncaught() -> None:
    """The script's uncaught exception (``mp.spawn``'s re-raise of a child's) in the error file.

    A fresh interpreter (``--start-method spawn``) runs no distrain code at its end: without
    this the agent finds no error file and `distrain run`'s last line had no cause.  The
    watcher's own verdict, written first, stands.  The traceback still goes to the hook that
    was there (the interpreter's, or the script's).
    """

    def record(
        kind: type[BaseException],
        err: BaseException,
        tb: TracebackType | None,
        below: patching.ExceptHook,
    ) -> None:
        from distrain.settings import for_report

        settings = for_report()
        path = settings.error_file
        if path and not os.path.exists(path):
            from distrain.worker.lifecycle.failure import is_peer_failure, write_error_file

            if not is_peer_failure(err):
                with contextlib.suppress(OSError):
                    write_error_file(path, err, tb, settings)
        below(kind, err, tb)

    patching.on_uncaught(members.FEATURE, record)
