"""What makes a worker forked from the fast start's server behave as one torch's agent execs.

A torchrun worker is a fresh ``python script.py`` exec'd by the agent; a forked worker is a copy
of the fork server.  Its start, its run and its end each differ, and each is made as exec would
make it (measured, torch 2.14, Python 3.11: tests/jobs/test_fidelity_probe.py):

- **its signal dispositions.**  A fork copies every disposition of the server, a fork of
  `distrain run` from before the agent started: whatever the launcher ignored (a background job
  of a shell script ignores SIGINT and SIGQUIT, ``nohup`` SIGHUP) and the server's own choices.
  exec resets every handled signal to ``SIG_DFL`` and keeps ``SIG_IGN``; the agent handles
  ``TORCHELASTIC_SIGNALS_TO_HANDLE`` (SIGTERM, SIGINT, SIGHUP, SIGQUIT) while workers run, so
  those reach the worker as ``SIG_DFL`` even where the launcher ignored them; the new
  interpreter ignores SIGPIPE and SIGXFSZ, and turns SIGINT into ``KeyboardInterrupt``
  (``default_int_handler``) unless it inherited SIGINT ignored.
- **the script as ``__main__``.**  ``runpy.run_path`` is close but not the same: it keeps
  ``__file__`` as given (Python 3.9+ makes ``__main__.__file__`` absolute, so a script that
  chdirs and then finds its files through ``__file__`` failed only under distrain, issue 41),
  and it sets ``sys.argv[0]`` to the path it ran, where Python keeps the path as typed.  Here,
  as Python does it: ``__file__`` is the current folder joined with the path as given, not
  normalised (``/work/./train.py``); ``sys.argv[0]`` is left as it is; ``__loader__`` is a
  ``SourceFileLoader``, ``__spec__``/``__package__``/``__cached__`` are None; and, as runpy
  does, a fresh ``__main__`` module stands in ``sys.modules`` while the script runs.
- **its end, as the agent sees it.**  torch's agent starts a function entrypoint through
  ``_wrap`` (``torch/distributed/elastic/multiprocessing/api.py``): it runs the function, puts
  the return value on the rank's ``SimpleQueue`` and waits on an ``Event`` until the agent has
  read every rank's value.  The agent counts a worker done only once its value arrived.  Two
  ends of a forked worker break that, where torchrun's worker (a subprocess, judged by its exit
  code) is fine: a script that ends with ``os._exit(0)`` never puts a value (the agent waits
  forever); a worker killed while it sleeps in that ``Event.wait`` leaves a sleeper in the
  Event's condition that never wakes (the agent's ``Event.set`` waits forever for it).  So the
  worker puts its value (``None``: what ``run_script`` returns) itself and ends with
  ``os._exit(0)``, without the wait: what was written to a pipe stays readable after its writer
  exited, and the agent holds the read end.  ``os._exit`` is wrapped through the registry so
  the script's own ``os._exit(0)`` does the same in this process; in a child the script forked
  it is the plain call.

One module, not three: the forked worker's entry (forked.py) uses all of it, always together.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import importlib.machinery
import inspect
import io
import os
import signal
import sys
import threading
import types
from collections.abc import Iterable
from typing import Any

from distrain.process import patching

# -- its start: the dispositions an exec'd worker has

#: what a fresh interpreter ignores itself at start (Python's signal module initialisation)
PYTHON_IGNORES = frozenset(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name)
)
#: what torch's agent handles when TORCHELASTIC_SIGNALS_TO_HANDLE is unset
AGENT_DEFAULT = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"


def agent_handles(names: str) -> frozenset[int]:
    """The signals a ``TORCHELASTIC_SIGNALS_TO_HANDLE`` value names (unknown names skipped)."""
    found = set()
    for name in (names or AGENT_DEFAULT).split(","):
        sig = getattr(signal, name.strip(), None)
        if isinstance(sig, signal.Signals):
            found.add(int(sig))
    return frozenset(found)


def exec_dispositions(launcher_ignores: Iterable[int], handled: Iterable[int]) -> dict[int, Any]:
    """Every named signal's disposition in a Python worker the agent would exec.

    `launcher_ignores`: the signals `distrain run` ignored when the job started; `handled`: the
    ones torch's agent installs a handler for (exec turns those back to ``SIG_DFL``).
    """
    kept = set(launcher_ignores) - set(handled)
    wanted: dict[int, Any] = {}
    for sig in signal.Signals:
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        wanted[int(sig)] = (
            signal.SIG_IGN if sig in kept or sig in PYTHON_IGNORES else signal.SIG_DFL
        )
    if wanted.get(signal.SIGINT) == signal.SIG_DFL:
        wanted[signal.SIGINT] = signal.default_int_handler
    return wanted


def reset_as_exec(launcher_ignores: Iterable[int], agent_signals: str) -> None:
    """Give this (forked, main-thread) process the dispositions an exec'd worker would have.

    A disposition set from C (``getsignal`` answers None) is left alone: it belongs to a
    library the server imported, which a fresh worker's import installs just the same.
    """
    for sig, want in exec_dispositions(launcher_ignores, agent_handles(agent_signals)).items():
        try:
            current = signal.getsignal(sig)
        except ValueError:
            continue
        if current is None or current == want:
            continue
        with contextlib.suppress(OSError, ValueError):  # a signal the platform will not change
            signal.signal(sig, want)


def fault_handler_as_fresh(asked: bool) -> None:
    """Disable faulthandler's fatal-signal dump unless a fresh interpreter would have it.

    `asked`: the worker's environment sets ``PYTHONFAULTHANDLER``.

    torch's wrapper of a *callable* worker entrypoint (its elastic error handler's
    ``initialize``) enables it; a torchrun worker running a script has it only when asked
    (``PYTHONFAULTHANDLER``, or the script's own ``faulthandler.enable()``).
    """
    import faulthandler

    if faulthandler.is_enabled() and not asked:
        faulthandler.disable()


# -- its run: the script as ``__main__``


def main_file(script: str) -> str:
    """The ``__file__`` that ``python script`` gives its main module."""
    return script if os.path.isabs(script) else os.path.join(os.getcwd(), script)


def run_as_main(script: str) -> None:
    """Run `script` as ``__main__``; its exceptions (SystemExit included) propagate."""
    path = main_file(script)
    with io.open_code(path) as f:  # bytes: compile() honours the file's coding cookie
        code = compile(f.read(), path, "exec", dont_inherit=True)
    module = types.ModuleType("__main__")
    module.__dict__.update(
        __file__=path,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", path),
        __package__=None,
        __spec__=None,
        __builtins__=builtins,
    )
    previous = sys.modules.get("__main__")
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - running the user's script is the point
    finally:
        if previous is not None:
            sys.modules["__main__"] = previous


# -- its end: the return value torch's agent waits for

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
