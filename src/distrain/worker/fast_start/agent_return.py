"""A fast-start worker hands torch's agent its return value itself, then exits.

torch's agent starts a function entrypoint through ``_wrap``
(``torch/distributed/elastic/multiprocessing/api.py``): it runs the function, puts the return
value on the rank's ``SimpleQueue`` and waits on an ``Event`` until the agent has read every
rank's value.  The agent counts a worker done only once its value arrived.  Two ends of a
forked worker break that, where torchrun's worker (a subprocess, judged by its exit code) is
fine:

- a script that ends with ``os._exit(0)`` never puts a value: the agent waits forever;
- a worker killed while it sleeps in that ``Event.wait`` leaves a sleeper in the Event's
  condition that never wakes: the agent's ``Event.set`` waits forever for it to acknowledge.

So the worker puts its value (``None``: what ``run_script`` returns) itself and ends with
``os._exit(0)``, without the wait: what was written to a pipe stays readable after its writer
exited, and the agent holds the read end.  ``os._exit`` is wrapped through the registry so the
script's own ``os._exit(0)`` does the same in this process; in a child the script forked it is
the plain call.
"""

from __future__ import annotations

import ctypes
import inspect
import os
import sys
import threading
from typing import Any

from distrain.process import patching

#: the torch module whose ``_wrap`` runs the entrypoint, and its local holding the rank's queue
_AGENT_MODULE = "torch.distributed.elastic.multiprocessing.api"
_QUEUE_LOCAL = "ret_val_"
#: the interpreter's own, taken before :func:`report_on_exit` wraps it
_EXIT = os._exit


def return_queue() -> Any | None:
    """The queue torch's ``_wrap`` puts this worker's return value on (None when not under it)."""
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code.co_name == "_wrap" and frame.f_globals.get("__name__") == _AGENT_MODULE:
            return frame.f_locals.get(_QUEUE_LOCAL)
        frame = frame.f_back
    return None


def report_on_exit(queue: Any) -> None:
    """Make the script's ``os._exit(0)`` in this process put the worker's value first."""
    worker = os.getpid()

    def make(original: Any) -> Any:
        def _exit(status: int) -> None:
            if status == 0 and os.getpid() == worker:
                _put(queue)
            original(status)

        return _exit

    patching.wrap(os, "_exit", make, feature="fast_start")


def finish(queue: Any | None) -> None:
    """End a worker whose script finished with status 0, as ``python script.py`` would end
    (under torch's ``_wrap``: `queue` from :func:`return_queue`; with None it returns).

    The interpreter's own thread shutdown runs first, as it does at a fresh interpreter's exit
    and in multiprocessing's child after its target: the exit callbacks threads registered
    (``concurrent.futures`` stops its executors' workers there; Inductor's compile pool is one)
    and then the join of the script's non-daemon threads.  A bare join would wait forever for
    an executor's workers.  Then everything buffered is written and the value put.
    """
    if queue is None:
        return
    threading._shutdown()  # type: ignore[attr-defined]
    _put(queue)
    _EXIT(0)


def _put(queue: Any) -> None:
    _flush()
    queue.put(None)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed or replaced by the script
            pass
    ctypes.CDLL(None).fflush(None)  # C-level stdio a library wrote to
