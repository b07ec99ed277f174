"""Start Python's fork server by forking `distrain run` after its ``import torch``, not by exec.

multiprocessing starts its fork server as a fresh ``python -c "from multiprocessing.forkserver
import main; main(...)"``, which imports torch again (~2 CPU-seconds here) while the launcher
imports it too.  Forking the launcher once it has imported torch gives the server torch for
free (the server then only adds ``torch._dynamo``, distrain and the script's imports), with the
same command the stdlib would have run: the launcher has started no thread, no store and no
CUDA at that point.  The server's file descriptors are what the stdlib's exec would have kept
(stdio and the descriptors it passes); only the fork server is started this way, never the
resource tracker.

The server then forgets the launcher's own modules (:func:`_forget_launcher_modules`): a worker
forked from it holds what a fresh interpreter's ``import distrain`` holds, not the launcher's
command line, plan, agent and features (tests/jobs/test_seams.py counts them at the first step).
The stdlib name swapped while the server starts goes through the patching registry
(``multiprocessing.util.spawnv_passfds``, feature ``fast_start``; docs/torch_internals.md), and
the server puts it back (:func:`_put_back_launcher_patches`): workers get the stdlib's.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

from distrain.process import patching

#: the stdlib's launch of its fork server, which is what gets forked instead of exec'd
_SERVER_MAIN = "from multiprocessing.forkserver import main"


@contextlib.contextmanager
def forked_server() -> Iterator[None]:
    """While active, ``multiprocessing.forkserver.ensure_running()`` forks this process."""
    import multiprocessing.util as mp_util

    original = mp_util.spawnv_passfds

    def spawnv_passfds(path: Any, args: list[str], passfds: Any) -> int:
        command = _server_command(args)
        if command is None or threading.active_count() > 1:  # a thread would not survive the fork
            return original(path, args, passfds)
        return _fork_and_run(command, set(passfds))

    with patching.temporarily(mp_util, "spawnv_passfds", spawnv_passfds, feature="fast_start"):
        yield


def _server_command(args: list[str]) -> str | None:
    """The ``-c`` command of a fork-server launch (None for any other program, e.g. the tracker)."""
    if "-c" not in args[:-1]:
        return None
    command = args[args.index("-c") + 1]
    return command if command.startswith(_SERVER_MAIN) else None


def _fork_and_run(command: str, passfds: set[int]) -> int:
    for stream in (sys.stdout, sys.stderr):  # or the child would write our buffered output again
        with contextlib.suppress(Exception):
            stream.flush()
    pid = os.fork()
    if pid:
        return pid
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
    """Drop the launcher's modules from the server's ``sys.modules`` (its workers inherit it).

    Kept: the ``distrain.launch`` modules the package's own namespace holds (``distrain.spawn``,
    from launch/spawn.py, once the launcher used it) and their packages.  A worker that imports a
    launcher module after all gets a fresh copy; the worker side imports none (the layout rule of
    tests/jobs/test_layout.py), and nothing handed to a worker is a launcher object.
    """
    package = sys.modules.get("distrain")
    held = {getattr(v, "__module__", None) for v in vars(package).values()} if package else set()
    keep = {name.rsplit(".", n)[0] for name in held if name for n in range(name.count("."))}
    launch = [m for m in sys.modules if m == "distrain.launch" or m.startswith("distrain.launch.")]
    for name in [m for m in launch if m not in keep]:
        del sys.modules[name]
        parent, _, child = name.rpartition(".")
        if parent in sys.modules and getattr(sys.modules[parent], child, None) is not None:
            with contextlib.suppress(AttributeError):
                delattr(sys.modules[parent], child)
