"""Fast worker start for `distrain run`: fork workers from a server that already imported torch.

A torchrun worker is a fresh interpreter that pays for ``import torch`` (~2 s here), the first
optimizer's lazy ``import torch._dynamo`` (~1.5 s) and the script's own imports — every worker,
on every start and every restart.  ``--start-method fast`` (the default) instead:

1. starts Python's multiprocessing fork server at the very beginning of `distrain run`, before
   the launcher imports torch itself, preloading torch, ``torch._dynamo``, distrain and the
   script's top-level imports (:mod:`distrain._preload`), so both imports overlap;
2. hands torch's elastic agent a *callable* entrypoint (:func:`run_script`) with
   ``LaunchConfig.start_method = "forkserver"``: the agent's rendezvous, restarts, environment
   (RANK, …), log redirection and error files are unchanged; each worker is forked from the warm
   server and runs the script with ``runpy.run_path(script, run_name="__main__")``;
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
import atexit
import ctypes
import functools
import importlib.util
import io
import logging
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

PROG = "distrain run"
START_METHODS = ("fast", "spawn", "fork", "forkserver")
#: options after which the script is not a Python file distrain can fork
_FRESH_ONLY_FLAGS = {"-m", "--module", "--no-python", "--no_python", "--run-path", "--run_path"}
_NO_LAUNCH_FLAGS = {"-h", "--help", "--dry-run", "--dry_run"}


# -- launcher side ----------------------------------------------------------------------------
def extend_parser(parser: argparse.ArgumentParser) -> None:
    """Give torchrun's ``--start-method`` distrain's choices and the fast default."""
    for action in parser._actions:
        if action.dest == "start_method":
            action.choices = START_METHODS
            action.default = "fast"
            action.help = (
                "how workers start: fast (fork from a preloaded server, fresh interpreter as fallback; "
                "default), spawn (fresh interpreters, like torchrun), forkserver, fork"
            )


def _script_from_argv(argv: list[str]) -> str | None:
    """The script `argv` would run with the fast path, found without importing torch; else None."""
    for i, tok in enumerate(argv):
        name = tok.split("=", 1)[0]
        if name in _FRESH_ONLY_FLAGS or name in _NO_LAUNCH_FLAGS:
            return None
        if name in ("--start-method", "--start_method"):
            value = tok.split("=", 1)[1] if "=" in tok else (argv[i + 1] if i + 1 < len(argv) else "")
            if value not in ("fast", "forkserver"):
                return None
        if tok.endswith(".py") and os.path.isfile(tok):
            return tok
    return None


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
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module != "__future__":
            names.append(node.module)
    here = os.path.dirname(os.path.abspath(script))
    keep: list[str] = []
    for name in dict.fromkeys(names):
        try:
            spec = importlib.util.find_spec(name.split(".")[0])
        except (ImportError, ValueError):
            continue
        origin = getattr(spec, "origin", None) or ""
        # modules beside the script are the user's own: they may read argv or start work
        if spec is not None and not os.path.abspath(origin).startswith(here + os.sep):
            keep.append(name)
    return keep


def start_server(script: str) -> None:
    """Start the preloading fork server now, so its imports overlap the launcher's own."""
    import multiprocessing.forkserver as forkserver

    os.environ["DISTRAIN_PRELOAD"] = ",".join(top_level_imports(script))
    try:
        forkserver.set_forkserver_preload(["distrain._preload"])
        forkserver.ensure_running()
    finally:
        os.environ.pop("DISTRAIN_PRELOAD", None)


def early_start(argv: list[str]) -> bool:
    """Start the fork server if `argv` looks like a fast-path launch (a guess; run() decides)."""
    script = _script_from_argv(argv)
    if script is None:
        return False
    start_server(script)
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
        return f"{args.training_script} is not Python source distrain can fork ({type(err).__name__})"
    return None


def run(args: argparse.Namespace) -> None:
    """torch.distributed.run.run(args), with forked workers unless the start method is spawn."""
    import uuid

    import torch.multiprocessing
    from torch.distributed import run as torchrun
    from torch.distributed.launcher.api import elastic_launch

    method = args.start_method
    if method == "fast":
        reason = fresh_reason(args)
        if reason:
            print(f"{PROG}: {reason}; starting workers in fresh interpreters", file=sys.stderr, flush=True)
            method = "spawn"
    if method == "spawn":
        args.start_method = "spawn"
        torchrun.run(args)
        return

    # the rendezvous defaults of torch.distributed.run.run(), which we cannot call with a callable
    torch.multiprocessing._set_thread_name("pt_elastic")
    if args.standalone:
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    elif args.rdzv_backend == "static" and not args.rdzv_endpoint and args.master_port is None:
        if torchrun.parse_min_max_nnodes(args.nnodes)[1] == 1:
            args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    if args.master_port is None:
        args.master_port = 29500
    args.run_path = True  # torch's callable-entrypoint mode: cmd_args = [script, *script args]
    config, _, cmd_args = torchrun.config_from_args(args)
    config.start_method = "fork" if method == "fork" else "forkserver"
    if method != "fork":
        start_server(cmd_args[0])  # no-op when early_start() already did it
    env = dict(os.environ)
    env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = config.signals_to_handle
    fallback_dir = tempfile.mkdtemp(prefix="distrain-fastboot-") if method == "fast" else None
    imports = top_level_imports(cmd_args[0])
    # the script path as given, like torchrun's argv: the worker's cwd is the launcher's
    job = ForkJob(cmd_args[0], env, fallback_dir, any(n.split(".")[0] == "distrain" for n in imports))
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(_QuietWorkerExit())
    try:
        elastic_launch(config=config, entrypoint=run_script)(job, *cmd_args[1:])
    finally:
        if fallback_dir:
            shutil.rmtree(fallback_dir, ignore_errors=True)


# -- worker side ------------------------------------------------------------------------------
@dataclass
class ForkJob:
    """What a forked worker needs beyond its argv: the script and the launcher's environment."""

    script: str
    env: dict[str, str] = field(default_factory=dict)
    #: where a worker records that the script needs fresh interpreters (None: no fallback)
    fallback_dir: str | None = None
    #: the script imports distrain at top level (whose import strips a legacy --local-rank)
    imports_distrain: bool = False


def run_script(job: ForkJob, *script_args: str) -> None:
    """Worker entrypoint: run `job.script` as ``__main__``, as a fresh ``python -u`` would.

    The exit status is the script's: ``sys.exit(n)`` exits with n (``sys.exit()`` with 0: never
    a worker the agent waits for forever), an uncaught exception goes to ``sys.excepthook``
    (traceback on stderr; distrain's hook writes the agent's error file) and exits with 1.
    atexit handlers run, which a forked child's ``os._exit`` would otherwise skip.
    """
    _restore_environment(job.env)
    fresh = _fresh_marker(job)
    if fresh is not None and os.path.exists(fresh):
        _run_fresh(job.script, script_args)
        return
    unsafe = _server_unsafe()
    if unsafe and fresh is not None:
        _announce(fresh, f"the fork server is unsafe ({unsafe})")
        _run_fresh(job.script, script_args)
        return
    _prepare_interpreter(job.script, script_args, job.imports_distrain)
    if fresh is not None:
        _watch_process_group()
    try:
        runpy.run_path(job.script, run_name="__main__")
    except SystemExit as exc:
        code = _exit_status(exc.code)
        _run_atexit()
        if code:
            raise SystemExit(code) from None
        return
    except Exception as exc:
        if fresh is not None and not _process_group_formed():
            _run_atexit()
            _announce(fresh, f"{job.script} failed in a forked worker before training: {type(exc).__name__}: {exc}")
            _run_fresh(job.script, script_args)
            return
        _let_the_agent_see_the_cause(exc)
        sys.excepthook(type(exc), exc, _script_frames(exc.__traceback__, job.script))  # as a fresh interpreter
        _run_atexit()
        raise SystemExit(1) from None  # its exit status; error files are the excepthook's business
    _run_atexit()


def _let_the_agent_see_the_cause(exc: BaseException) -> None:
    """Wait a little before failing because a *peer* died, so the agent reports the peer.

    A fresh worker's exit is noticed by the agent's poll of every process; a forked one is
    found through multiprocessing's sentinels, first exit first, so a survivor that exits at
    once can be named as the failed rank instead of the SIGKILLed one.  The agent terminates
    this process as soon as it has seen the real failure, so the wait costs nothing then.
    """
    from .failure import is_peer_failure

    if is_peer_failure(exc):
        time.sleep(5.0)


def _script_frames(tb: TracebackType | None, script: str) -> TracebackType | None:
    """The traceback from the script's first frame on: runpy's and ours are not the user's."""
    target, cur = os.path.abspath(script), tb
    while cur is not None and os.path.abspath(cur.tb_frame.f_code.co_filename) != target:
        cur = cur.tb_next
    return cur if cur is not None else tb


class _QuietWorkerExit(logging.Filter):
    """Drop the agent's traceback of *our* ProcessExitedException when a forked worker fails.

    The worker already printed its own traceback (as a fresh interpreter would); the agent's
    second one only shows torch.multiprocessing internals.  The one-line message stays.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and type(record.exc_info[1]).__name__ == "ProcessExitedException":
            record.exc_info, record.exc_text = None, None
        return True


def _restore_environment(launcher_env: dict[str, str]) -> None:
    """Make os.environ what a fresh worker gets: the launcher's now, plus the agent's variables.

    The fork server copied the launcher's environment when it started, before `distrain run`
    set OMP_NUM_THREADS and friends; the agent's per-worker variables (RANK, …) are those that
    differ from that copy.
    """
    preload = sys.modules.get("distrain._preload")
    if preload is None:  # forked from the launcher itself: the environment is already current
        return
    base: dict[str, str] = preload.BASE_ENV
    agent = {k: v for k, v in os.environ.items() if base.get(k) != v}
    os.environ.clear()
    os.environ.update(launcher_env)
    os.environ.update(agent)


def _server_unsafe() -> str:
    preload = sys.modules.get("distrain._preload")
    return str(getattr(preload, "UNSAFE", "")) if preload is not None else ""


def _prepare_interpreter(script: str, script_args: tuple[str, ...], imports_distrain: bool) -> None:
    """argv, sys.path[0], unbuffered stdio, threads and multiprocessing as `python -u script`."""
    sys.argv = [script, *script_args]
    if imports_distrain:  # what its `import distrain` does in a fresh interpreter
        from .cluster import strip_launcher_argv

        strip_launcher_argv()
    if sys.path:
        sys.path[0] = os.path.dirname(os.path.abspath(script))
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        old.flush()
        stream = io.TextIOWrapper(
            open(fd, "wb", buffering=0, closefd=False),  # noqa: SIM115 - lives as long as the process
            encoding=old.encoding,
            errors=old.errors,
            write_through=True,
        )
        setattr(sys, name, stream)
    # OpenMP read OMP_NUM_THREADS when the server imported torch, before distrain set it
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        import torch

        torch.set_num_threads(int(threads))
    # a fresh interpreter has no start method yet; the fork server's child has one fixed, which
    # would make the script's own multiprocessing.set_start_method(...) raise
    import multiprocessing.context

    multiprocessing.context._default_context._actual_context = None  # type: ignore[attr-defined]


def _exit_status(code: object) -> int:
    """The process exit status for SystemExit(code), as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr, flush=True)
    return 1


def _run_atexit() -> None:
    """Run the script's atexit handlers: a forked worker ends with os._exit, which skips them."""
    atexit._run_exitfuncs()


#: set when the script calls init_process_group (before the call: once inside, other ranks may
#: be waiting in the group, so the script must not be rerun)
_group_started = False


def _watch_process_group() -> None:
    """Note the script's init_process_group call (is_initialized() forgets a destroyed group)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    original = distributed_c10d.init_process_group

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        global _group_started
        _group_started = True
        return original(*args, **kwargs)

    dist.init_process_group = distributed_c10d.init_process_group = init_process_group


def _process_group_formed() -> bool:
    try:
        import torch.distributed as dist

        return _group_started or (dist.is_available() and dist.is_initialized())
    except Exception:
        return False


def _fresh_marker(job: ForkJob) -> str | None:
    return os.path.join(job.fallback_dir, "fresh") if job.fallback_dir else None


def _announce(marker: str, reason: str) -> None:
    """Record that the script needs fresh interpreters; the first worker to do so says why."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)
    first = (reason.strip().splitlines() or [reason])[0]
    print(f"{PROG}: {first}; running workers in fresh interpreters instead (--start-method spawn skips the fork)", file=sys.stderr, flush=True)


def _die_with_parent() -> None:
    """In the fresh child: SIGKILL when this forked worker dies (the agent only knows our pid)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _run_fresh(script: str, script_args: tuple[str, ...]) -> None:
    """Run the script in a fresh interpreter and end this worker the way that child ended."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    python = os.environ.get("PYTHON_EXEC", sys.executable)  # torchrun's interpreter override
    proc = subprocess.Popen([python, "-u", script, *script_args], preexec_fn=_die_with_parent)

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    code = proc.wait()
    if code < 0:  # killed by a signal: die by the same one so the agent reports it
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    if code:
        raise SystemExit(code)
