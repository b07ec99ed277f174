"""Start Python's fork server by forking `distrain run` after its ``import torch``, not by exec.

multiprocessing starts its fork server as a fresh ``python -c "from multiprocessing.forkserver
import main; main(...)"``, which imports torch again (~2 CPU-seconds here) while the launcher
imports it too.  Forking the launcher once it has imported torch gives the server torch for
free (the server then only adds ``torch._dynamo``, distrain and the script's imports), with the
same command the stdlib would have run: the launcher has started no thread, no store and no
CUDA at that point.  The server's file descriptors are what the stdlib's exec would have kept
(stdio and the descriptors it passes); only the fork server is started this way, never the
resource tracker.

Forked before the plan (``early_start``), the server does not serve inside the launcher's call
stack, which every worker forked from it would keep with each frame's module globals: it unwinds
out to the entry point, ``distrain.cli.run_subcommand`` (:class:`LeaveLauncherStack`), and serves
from there.  It then forgets the launcher's own modules (:func:`_forget_launcher_modules`): a
worker forked from it holds what a fresh interpreter's ``import distrain`` holds, not the
launcher's command line, plan, agent and features, in ``sys.modules`` (tests/jobs/test_seams.py)
or alive (this module's functions only: tests/jobs/test_module_census.py).  A module's dict and
its functions are a cycle: Python's collector frees them (no explicit ``gc.collect()``, 0.1-0.2
CPU-s over torch's heap, on the way to the server's preload).
The stdlib name swapped while the server starts goes through the patching registry
(``multiprocessing.util.spawnv_passfds``, feature ``fast_start``; docs/torch_internals.md), and
the server puts it back (:func:`_put_back_launcher_patches`): workers get the stdlib's.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from distrain.process import patching

#: the stdlib's launch of its fork server, which is what gets forked instead of exec'd
_SERVER_MAIN = "from multiprocessing.forkserver import main"
#: the launcher's package and the console script's module, forgotten by the server
ENTRY = ("distrain.launch", "distrain.cli")
#: the entry point's function that catches :class:`LeaveLauncherStack` (distrain/cli.py)
ENTRY_CATCHER = "run_subcommand"


@contextlib.contextmanager
def forked_server(leave_stack: bool = False) -> Iterator[None]:
    """While active, ``multiprocessing.forkserver.ensure_running()`` forks this process; with
    `leave_stack`, the server leaves the launcher's stack (:class:`LeaveLauncherStack`) when the
    entry point is there to catch it: only where what lies between runs no job's cleanup."""
    import multiprocessing.util as mp_util

    original = mp_util.spawnv_passfds

    def spawnv_passfds(path: Any, args: list[str], passfds: Any) -> int:
        command = _server_command(args)
        if command is None or threading.active_count() > 1:  # a thread would not survive the fork
            return original(path, args, passfds)
        return _fork_and_run(command, set(passfds), leave_stack)

    with patching.temporarily(mp_util, "spawnv_passfds", spawnv_passfds, feature="fast_start"):
        yield


def _server_command(args: list[str]) -> str | None:
    """The ``-c`` command of a fork-server launch (None for any other program, e.g. the tracker).

    The stdlib ends both of its launches with ``-c COMMAND`` (multiprocessing/forkserver.py,
    resource_tracker.py), so the command is the last word; which program it starts is in the
    command's text, not in the interpreter's options before it."""
    command = args[-1] if len(args) > 2 else ""
    return command if command.startswith(_SERVER_MAIN) else None


def _fork_and_run(command: str, passfds: set[int], leave_stack: bool) -> int:
    for stream in (sys.stdout, sys.stderr):  # or the child would write our buffered output again
        with contextlib.suppress(Exception):
            stream.flush()
    pid = os.fork()
    if pid:
        return pid
    if leave_stack and _caught_at_entry():
        _leave_launcher_stack(command, passfds)  # raises: the server goes on at the entry point
    _serve(command, passfds)


def _serve(command: str, passfds: set[int]) -> NoReturn:
    """Run the stdlib's server loop in this (forked) process, as its exec'd one would; never
    returns into the launcher."""
    code = 1
    try:
        _close_fds_except(passfds | {0, 1, 2})
        _fresh_forkserver_state()
        _put_back_launcher_patches()
        _forget_launcher_modules()
        exec(command, {"__name__": "__mp_forkserver__"})  # noqa: S102 - the stdlib's own command
        code = 0
    except SystemExit as stop:  # the server ends with SystemExit when every client is gone
        code = stop.code if isinstance(stop.code, int) else 0
    except BaseException:  # noqa: BLE001 - the child must never return into the launcher
        with contextlib.suppress(Exception):
            sys.excepthook(*sys.exc_info())
    finally:
        os._exit(code)


class LeaveLauncherStack(BaseException):
    """Raised in the fork server's child, caught by ``distrain.cli.run_subcommand``: the server
    then runs from there, on a stack that holds no launcher frame.

    A forked child goes on inside its parent's call stack, and a frame holds its function and its
    module's globals (and those the modules they imported): forked inside ``early_start``, every
    worker kept the code of 28 launcher modules alive.  The exception unwinds the child's copy of
    that stack.  On its way up it runs the ``finally`` blocks and context exits between the fork
    and the entry point (the stdlib's ``ensure_running``, ``start_server``, the launcher's
    ``features.close()``): each acts on the child's own copies (its descriptors, environment,
    signal dispositions and patches), which :attr:`continue_at_entry` puts back as they were at
    the fork.  A feature whose ``close`` acts outside its process would act in the child too.
    """

    def __init__(self, continue_at_entry: Callable[[], NoReturn]) -> None:
        super().__init__("the fork server leaves the launcher's stack")
        #: what the entry point calls once the launcher's frames are gone: the server
        self.continue_at_entry = continue_at_entry


def _leave_launcher_stack(command: str, passfds: set[int]) -> NoReturn:
    """Unwind to the entry point, then serve with the state of the fork's moment."""
    # copies: the stdlib's ensure_running closes the listener and the alive pipe on the way up
    copies = {fd: os.dup(fd) for fd in passfds}
    environ = dict(os.environ)  # start_server pops its preload list on the way up
    dispositions = {n: signal.getsignal(n) for n in signal.valid_signals()}  # SIGUSR1 ignored
    raise LeaveLauncherStack(
        functools.partial(_serve_at_entry, command, copies, environ, dispositions)
    )


def _serve_at_entry(
    command: str, copies: dict[int, int], environ: dict[str, str], dispositions: dict[Any, Any]
) -> NoReturn:
    """The server, from the entry point: the fork's descriptors (at their numbers, which the
    stdlib's command names), environment and signal dispositions back, then its loop."""
    _close_fds_except({0, 1, 2, *copies.values()})
    for fd, copy in copies.items():
        os.dup2(copy, fd)
        os.close(copy)
    os.environ.clear()
    os.environ.update(environ)
    for number, handler in dispositions.items():
        with contextlib.suppress(TypeError, ValueError, OSError):  # None: not set from Python
            signal.signal(number, handler)
    _serve(command, set(copies))


def _caught_at_entry() -> bool:
    """Whether ``distrain.cli.run_subcommand`` is on this stack to catch
    :class:`LeaveLauncherStack` (the launcher may run without it: ``python -c`` of
    ``launch.cli.main``, a replica group's launcher)."""
    frame = inspect.currentframe()
    while frame is not None:
        catcher = frame.f_globals.get(ENTRY_CATCHER)
        if frame.f_code is getattr(catcher, "__code__", None):
            return True
        frame = frame.f_back
    return False


def _close_fds_except(keep: set[int]) -> None:
    """Close every descriptor but `keep`, as the stdlib's ``close_fds=True`` exec would."""
    try:
        max_fd = os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        max_fd = 65536
    start = 0
    for fd in sorted(keep) + [max_fd]:
        if fd > start:
            os.closerange(start, fd)
        start = max(start, fd + 1)


def _fresh_forkserver_state() -> None:
    """The child's copy of the stdlib's fork-server object, as a fresh interpreter would have it.

    The parent forked inside ``ensure_running()``'s lock, with distrain's preload set: a worker
    forked from this server that starts a fork server of its own (a DataLoader or a script's
    own processes with the forkserver start method) would otherwise wait on that lock forever,
    and its server would preload torch.
    """
    import multiprocessing.forkserver as forkserver

    server: Any = forkserver._forkserver  # the module's singleton (no public accessor)
    server._lock = threading.Lock()
    server._preload_modules = ["__main__"]


def _put_back_launcher_patches() -> None:
    """Undo, in the server, every patch the launcher has in place (its ``spawnv_passfds``, inside
    whose swap the server was forked): its workers inherit the server's ``multiprocessing.util``,
    and a worker's own fork server (a DataLoader's) would otherwise be a fork of the worker, with
    its threads and CUDA context, where torchrun's worker starts a fresh interpreter.
    """
    for feature in dict.fromkeys(p.feature for p in reversed(patching.applied())):
        patching.restore(feature)


def _forget_launcher_modules() -> None:
    """Drop the launcher's modules, and the console script's ``distrain.cli`` (the server runs
    from its frame, a worker has no use of it), from the server's ``sys.modules`` (its workers
    inherit it).

    Kept: the ``distrain.launch`` modules the package's own namespace holds (``distrain.spawn``,
    from launch/spawn.py, once the launcher used it) and their packages.  A worker that imports a
    launcher module after all gets a fresh copy; the worker side imports none (the layout rule of
    tests/jobs/test_layout.py), and nothing handed to a worker is a launcher object.
    """
    package = sys.modules.get("distrain")
    held = {getattr(v, "__module__", None) for v in vars(package).values()} if package else set()
    keep = {name.rsplit(".", n)[0] for name in held if name for n in range(name.count("."))}
    launch = [m for m in sys.modules if m in ENTRY or m.startswith("distrain.launch.")]
    for name in [m for m in launch if m not in keep]:
        del sys.modules[name]
        parent, _, child = name.rpartition(".")
        if parent in sys.modules and getattr(sys.modules[parent], child, None) is not None:
            with contextlib.suppress(AttributeError):
                delattr(sys.modules[parent], child)
