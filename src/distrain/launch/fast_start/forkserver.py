"""Fast worker start for `distrain run`: fork workers from a server that already imported torch.

A torchrun worker is a fresh interpreter that pays for ``import torch`` (~2 s here), the first
optimizer's lazy ``import torch._dynamo`` (~1.5 s) and the script's own imports — every worker,
on every start and every restart.  ``--start-method fast`` (the default) instead:

1. starts Python's multiprocessing fork server at the beginning of `distrain run`, forked from the
   launcher right after its ``import torch`` (:mod:`distrain.launch.fast_start.server_fork`), which
   then preloads ``torch._dynamo``, distrain and the script's top-level imports
   (:mod:`distrain.worker.fast_start.preload`) while the launcher goes on;
2. hands torch's elastic agent (launch/agent.py, wrapped by launch/fast_start/feature.py) a
   *callable* entrypoint
   (:func:`distrain.worker.fast_start.forked.run_script`, named by a
   :class:`~distrain.contract.WorkerEntrypoint`) with ``LaunchConfig.start_method = "forkserver"``:
   the agent's rendezvous, restarts, environment (RANK, …), log redirection and error files are
   unchanged; each worker is forked from the warm server and runs the script with
   ``runpy.run_path(script, run_name="__main__")``;
3. falls back to a fresh interpreter, saying so once, when the script cannot run this way:
   statically for ``-m``/``--no-python``/``--run-path`` or a file that is not Python source, and
   at run time when the script raises an exception in a forked worker *before* it formed the
   process group (then that worker reruns it in a fresh interpreter, which the other ranks still
   meet at ``init_process_group``).

``--start-method spawn`` is torchrun's normal path (fresh interpreters), ``forkserver`` is the
fork server without fallback, ``fork`` forks workers from the launcher itself (which hosts the
rendezvous store's threads: use with care).
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.machinery
import importlib.util
import os
import signal
import sys

from distrain.contract import PRELOAD, PRELOAD_MODULE
from distrain.errors import UsageError
from distrain.launch.command_line import CommandLine
from distrain.launch.fast_start.env_writes import env_set_before_torch
from distrain.launch.fast_start.torch_free import never_imports_torch
from distrain.launch.launch_plan import StartMethod

PROG = "distrain run"
#: options (dests) after which nothing is forked now: no Python file, or nothing launched
_NO_EARLY_START = ("module", "no_python", "run_path", "help", "dry_run", "replicas")


#: first patch release per 3.x whose forkserver listens on a filesystem socket instead of the
#: abstract namespace, which any local user could connect to (CVE-2022-42919); 3.12+ are fixed
_SAFE_FORKSERVER = {7: 16, 8: 16, 9: 16, 10: 9, 11: 1}


def forkserver_unsafe(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> str | None:
    """Why this Python's fork server must not be used (CVE-2022-42919), or None when it is safe."""
    major, minor, patch = (tuple(version) + (0, 0, 0))[:3]
    needed = _SAFE_FORKSERVER.get(minor) if major == 3 else None
    if needed is None or patch >= needed:
        return None
    return (
        f"Python {major}.{minor}.{patch}'s fork server accepts any local user (CVE-2022-42919; "
        f"fixed in {major}.{minor}.{needed})"
    )


def choose_start(args: argparse.Namespace) -> StartMethod:
    """The start method ``--start-method`` asks for, resolved; UsageError when it cannot be."""
    method = args.start_method
    if method == "forkserver" and forkserver_unsafe():
        raise UsageError(f"--start-method forkserver: {forkserver_unsafe()}; use fast or spawn")
    if method != "fast":
        return StartMethod(method)
    reason = forkserver_unsafe() or fresh_reason(args)
    if reason is None and not args.module and torch_free(args.training_script):
        # what a worker forked from the server would add is torch itself: torchrun's path
        return StartMethod("spawn")
    if reason is None:
        return StartMethod("forkserver", fallback=True)
    # distrain's own tools (doctor, bench comm) run as `-m distrain.…`: how their workers start
    # is not the user's concern
    quiet = args.module and str(args.training_script).startswith("distrain.")
    return StartMethod(
        "spawn", note="" if quiet else f"{reason}; starting workers in fresh interpreters"
    )


def fast_start_script(command: CommandLine) -> str | None:
    """The Python file whose workers this command line forks, known before anything is parsed
    further (so the server can start early); None when it forks none, or not yet."""
    if command.unknown or command.has(*_NO_EARLY_START):
        return None
    if (command.value("start_method") or "fast") not in ("fast", "forkserver"):
        return None
    if (command.value("launcher") or "torchrun") != "torchrun":
        return None
    script = command.script
    if not (script and script.endswith(".py") and os.path.isfile(script)):
        return None
    # a script the plan will start in fresh interpreters gets no server (choose_start)
    return None if torch_free(script) or env_before_torch(script) else script


def top_level_imports(script: str) -> list[str]:
    """Absolute modules `script` imports at module level, minus its own neighbours (user code)."""
    try:
        with open(script, "rb") as f:
            tree = ast.parse(f.read(), filename=script)
    except (OSError, SyntaxError, ValueError):
        return []
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module != "__future__"
        ):
            names.append(node.module)
    here = os.path.dirname(os.path.abspath(script))
    keep: list[str] = []
    for name in dict.fromkeys(names):
        top = name.split(".")[0]
        # a fresh `python script.py` has the script's folder first on sys.path: what is found
        # there is the user's own code (it may read argv or start work), or a local package
        # shadowing an installed one (a repo checkout's timm/), which the server must not import
        if importlib.machinery.PathFinder.find_spec(top, [here]) is not None:
            continue
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        if spec is not None:
            keep.append(name)
    return keep


def start_server(script: str, self_starting: bool | None = None, leave_stack: bool = False) -> None:
    """Start the preloading fork server now: forked from this process once it imported torch.

    The server then imports only what torch does not bring (``torch._dynamo``, distrain, the
    script's imports) while the launcher goes on; a fresh server would import torch a second
    time beside the launcher's own import (launch/fast_start/server_fork.py).  With
    `leave_stack` (the start before the plan, where nothing of the job has started yet), the
    server unwinds the launcher's frames out to the entry point before it serves.
    """
    import multiprocessing.forkserver as forkserver

    import torch  # noqa: F401 - the launcher imports it anyway; the forked server inherits it

    from distrain.launch.fast_start.server_fork import forked_server
    from distrain.launch.self_start import detect as selfstart

    os.environ[PRELOAD] = ",".join(top_level_imports(script))
    # the server and multiprocessing's resource tracker it starts inherit "ignore SIGUSR1": a
    # scheduler's SIGUSR1 (SLURM's time-limit warning) reaches every process of the job, and must
    # not kill those two (the tracker blocks SIGINT/SIGTERM itself; see
    # worker/fast_start/preload.py)
    previous = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        forkserver.set_forkserver_preload([PRELOAD_MODULE])
        # a script that starts its own workers keeps the exec'd server: the hang once blamed on
        # the forked one was torch's Event.set() waiting for a worker the watch had ended (on
        # either server; docs/fast_start.md), since fixed by the script's end waiting for it.
        # The plan's decision: a starter under a condition runs as torchrun would
        # (launch/self_start/detect.decide)
        if selfstart.decide(script, self_starting)[0] is None:
            with forked_server(leave_stack):
                forkserver.ensure_running()
        else:
            forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGUSR1, previous)
        os.environ.pop(PRELOAD, None)


def early_start(command: CommandLine) -> bool:
    """Start the fork server now when `command` forks its workers from it (the plan may still
    refuse the command line: then stop_server)."""
    script = fast_start_script(command)
    if script is None or forkserver_unsafe():
        return False
    forced = command.given("self_starting")
    start_server(script, forced[-1].name == "--self-starting" if forced else None, True)
    return True


def stop_server() -> None:
    """Stop a fork server started by this process (bad arguments found after early_start)."""
    import multiprocessing.forkserver as forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)  # no public accessor
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def fresh_reason(args: argparse.Namespace) -> str | None:
    """Why this launch cannot fork its workers (None when it can)."""
    if args.module:
        return "-m runs a module"
    if args.no_python:
        return "--no-python runs a program"
    if args.run_path:
        return "--run-path asks for torch's own runpy entrypoint"
    try:
        with open(args.training_script, "rb") as f:
            compile(f.read(), args.training_script, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError) as err:
        return (
            f"{args.training_script} is not Python source distrain can fork ({type(err).__name__})"
        )
    return env_before_torch(args.training_script)


@functools.lru_cache(maxsize=8)
def env_before_torch(script: str) -> str | None:
    """Why a worker forked after ``import torch`` would miss what `script` sets first, or None."""
    try:
        with open(script, encoding="utf-8", errors="replace") as f:
            found = env_set_before_torch(f.read(), script)
    except OSError:
        return None
    if found is None:
        return None
    name, line = found
    return (
        f"{os.path.basename(script)} sets {name} (line {line}) before torch reads it at import, "
        "and the fork server imported torch already"
    )


@functools.lru_cache(maxsize=8)
def torch_free(script: str) -> bool:
    """Whether `script` surely never imports torch (launch/fast_start/torch_free.py)."""
    return never_imports_torch(script)
