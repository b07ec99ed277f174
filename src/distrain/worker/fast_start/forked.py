"""A worker forked from `distrain run`'s preloading fork server: run the script as ``__main__``.

The launcher side (:mod:`distrain.launch.fast_start.forkserver`) starts the server and hands torch's
elastic agent :func:`run_script` (by name), which runs in every worker.  The
worker makes its interpreter look like a fresh ``python -u script.py`` (argv, sys.path,
unbuffered stdio, environment, thread count), runs the script, and falls back to a fresh
interpreter when the script fails before it formed the process group.
"""

# Environment boundary (scripts/structure_metrics.py ENV_BOUNDARY): this child rebuilds the
# worker's environment from the server's before distrain.init() exists to read it.
from __future__ import annotations

import atexit
import io
import os
import signal
import sys
import time
from types import ModuleType, TracebackType
from typing import Any

from distrain.contract import CPU_REHEARSAL, PRELOAD_MODULE, REPLICA_GROUP, SELF_STARTING, ForkJob
from distrain.log import get_logger
from distrain.process import patching
from distrain.process.lineage import die_with_parent, own_session
from distrain.process.patching import Args
from distrain.worker.fast_start import as_exec
from distrain.worker.lifecycle.stacks import dump_stacks_on_signal
from distrain.worker.start.title import set_worker_title

_log = get_logger("runtime")

PROG = "distrain run"


def run_script(job: ForkJob, *script_args: str) -> None:
    """Worker entrypoint: run `job.script` as ``__main__``, as a fresh ``python -u`` would.

    The exit status is the script's: ``sys.exit(n)`` exits with n (``sys.exit()`` with 0: never
    a worker the agent waits for forever), an uncaught exception goes to ``sys.excepthook``
    (traceback on stderr; distrain's hook writes the agent's error file) and exits with 1.
    atexit handlers run, which a forked child's ``os._exit`` would otherwise skip.
    """
    die_with_parent()  # the fork server; it dies with the launcher
    own_session()  # as torchrun's worker: its own children are stopped with its group
    _restore_environment(job.env)
    # the dispositions an exec'd worker has, not the fork server's (a background job's SIG_IGN)
    as_exec.reset_as_exec(job.ignored_signals, job.env.get("TORCHELASTIC_SIGNALS_TO_HANDLE", ""))
    as_exec.fault_handler_as_fresh(bool(os.environ.get("PYTHONFAULTHANDLER")))
    dump_stacks_on_signal()  # kill -USR1 <pid> dumps the stacks, init() called or not
    fresh = _fresh_marker(job)
    if _fresh_before_running(job, fresh, script_args):
        return
    _install_worker_features()
    _prepare_interpreter(job.script, script_args, job.imports_distrain)
    set_worker_title(
        os.environ.get("RANK", "?"),
        os.environ.get("WORLD_SIZE", "?"),
        sys.argv,
        os.environ.get(REPLICA_GROUP),
    )
    if fresh is not None:
        _watch_process_group()
    queue = as_exec.return_queue()
    if queue is not None:  # the agent's wait for a value, not for an exit code (as_exec)
        as_exec.report_on_exit(queue)
    _run_to_its_end(job, fresh, script_args, queue)


def _fresh_before_running(job: ForkJob, fresh: str | None, script_args: tuple[str, ...]) -> bool:
    """Run the script in a fresh interpreter instead when the fork cannot serve it (True if so).

    A marker left by an earlier worker, an unsafe server or a shadowed import sends the worker
    to a fresh interpreter when falling back is allowed (`fresh` is its marker).
    """
    if fresh is not None and os.path.exists(fresh):
        _fresh().run_fresh(job.script, script_args)
        return True
    unsafe = _server_unsafe()
    if unsafe and fresh is not None:
        _fresh().announce(fresh, f"the fork server is unsafe ({unsafe})")
        _fresh().run_fresh(job.script, script_args)
        return True
    shadowed = shadowed_imports(job.script)
    if shadowed and fresh is not None:
        _fresh().announce(fresh, shadowed)
        _fresh().run_fresh(job.script, script_args)
        return True
    if shadowed:  # --start-method forkserver: no fallback, but not silently
        _log.warning(f"{PROG}: {shadowed}; the forked worker keeps the server's")
    return False


def _install_worker_features() -> None:
    """What a fresh worker's `import distrain` or sitecustomize would install, by its variable."""
    if os.environ.get(CPU_REHEARSAL):  # distrain run --cpu: CUDA stands in on the CPU
        from distrain.worker.rehearse import install

        install()
    if os.environ.get(SELF_STARTING):  # the script starts its own workers: watch them form
        from distrain.worker.self_start import install as watch_own_workers

        watch_own_workers()
    if os.environ.get(REPLICA_GROUP):  # --replicas: every optimizer step goes through the commit
        from distrain.worker.replicas.optimizers import install as commit_optimizer_steps

        commit_optimizer_steps()
    from distrain.settings import for_report
    from distrain.worker import atomic_save

    atomic_save.install(for_report().atomic_save)  # a worker killed mid-save leaves no torn file


def _run_to_its_end(
    job: ForkJob, fresh: str | None, script_args: tuple[str, ...], queue: Any
) -> None:
    """Run the script as ``__main__`` and end as a fresh interpreter would (see run_script)."""
    try:
        as_exec.run_as_main(job.script)  # as `python script.py` does (absolute __file__, argv kept)
    except SystemExit as exc:
        code = _exit_status(exc.code)
        if code:
            from distrain.worker.lifecycle.failure import mark_failing

            mark_failing()  # its watchdog must not wait at shutdown for peers that may wait for it
        _run_atexit()
        if code:
            raise SystemExit(code) from None
        as_exec.finish(queue)
        return
    except Exception as exc:
        if fresh is not None and not _process_group_formed() and fork_may_be_the_cause(exc):
            _run_atexit()
            _fresh().announce(
                fresh,
                f"{job.script} failed in a forked worker before training: "
                f"{type(exc).__name__}: {exc}",
            )
            _fresh().run_fresh(job.script, script_args)
            return
        _let_the_agent_see_the_cause(exc)
        from distrain.settings import for_report
        from distrain.worker.lifecycle.failure import report_uncaught

        # as a fresh interpreter would, from the script's first frame (runpy's and ours are not
        # the user's), one block per rank, and the cause in the agent's error file
        report_uncaught(
            exc.with_traceback(_script_frames(exc.__traceback__, job.script)), for_report()
        )
        _run_atexit()
        raise SystemExit(1) from None  # its exit status; error files are the excepthook's business
    _run_atexit()
    as_exec.finish(queue)


def shadowed_imports(script: str, modules: dict[str, Any] | None = None) -> str:
    """Why the fork server's imports differ from a fresh interpreter's for `script` ("" if not).

    A fresh ``python script.py`` has the script's folder first on sys.path, so a module or
    package there (a repo checkout's ``timm/`` beside ``train.py``) wins over an installed one.
    The server imported its modules (torch's dependencies, the script's imports) before the
    worker knew the script: any of them that the script's folder would shadow is the wrong one.
    Only the folder's regular modules and packages shadow: a folder without ``__init__.py`` is a
    namespace portion, which an installed package of the same name wins over.
    """
    import importlib.machinery

    here = os.path.dirname(os.path.abspath(script))
    loaded = sys.modules if modules is None else modules
    for name in sorted({m.split(".")[0] for m in loaded} - set(sys.builtin_module_names)):
        where = getattr(loaded.get(name), "__file__", None)
        if where is None or name.startswith("__"):  # a namespace package, __main__, __mp_main__
            continue
        spec = importlib.machinery.PathFinder.find_spec(name, [here])
        if spec is None or spec.origin in (None, "namespace"):
            continue
        if os.path.abspath(spec.origin) != os.path.abspath(where):
            local = os.path.relpath(spec.origin, os.getcwd())
            return (
                f"{os.path.basename(script)} would import its own {name} ({local}), "
                f"the fork server has {where}"
            )
    return ""


#: what a fresh interpreter would raise just the same: the script's own mistakes, never the fork's
_SCRIPT_ERRORS = (
    SyntaxError,
    ImportError,
    NameError,
    AttributeError,
    TypeError,
    ValueError,
    LookupError,
    AssertionError,
    ArithmeticError,
    FileNotFoundError,
    PermissionError,
    NotImplementedError,
)


def fork_may_be_the_cause(exc: BaseException) -> bool:
    """Whether rerunning the script in a fresh interpreter could end differently.

    A missing module, a syntax error or a ValueError raised by the script's own code fails the
    same way in a fresh interpreter: rerunning it only prints the error twice and loses the
    cause.  What a forked process can hit and a fresh one cannot shows up as a RuntimeError or
    OSError (a library refusing a forked process, state inherited from the server).

    A failure the script's own children raised (``mp.spawn``'s ``ProcessRaisedException`` /
    ``ProcessExitedException``, a ``Pool`` task's error carrying the child's traceback) is the
    script's: its children failed, not this process's fork; it is reported once.
    """
    import multiprocessing.pool

    from torch.multiprocessing.spawn import ProcessException

    remote = multiprocessing.pool.RemoteTraceback  # type: ignore[attr-defined]  # not in typeshed
    if isinstance(exc, ProcessException) or isinstance(exc.__cause__, remote):
        return False
    return not isinstance(exc, _SCRIPT_ERRORS)


def _let_the_agent_see_the_cause(exc: BaseException) -> None:
    """Wait a little before failing because a *peer* died, so the agent reports the peer.

    A fresh worker's exit is noticed by the agent's poll of every process; a forked one is
    found through multiprocessing's sentinels, first exit first, so a survivor that exits at
    once can be named as the failed rank instead of the SIGKILLed one.  The agent sends this
    process SIGTERM as soon as it has seen the real failure: if that already happened there
    is nothing to wait for, and otherwise SIGTERM ends the wait (and the process) at once.
    The preemption handler must not catch it here: it would turn the agent's teardown into
    "checkpoint at the end of this step" and the sleep would run to its end.
    """
    from distrain.process.signals import stop_signal_received
    from distrain.worker.lifecycle.failure import is_peer_failure

    if not is_peer_failure(exc) or stop_signal_received():
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # the dead peer may be on another node, whose loss no local agent sees: waiting 5 s
    # there would only delay the survivors' restart; a local peer is seen within ~0.1 s
    multi_node = os.environ.get("LOCAL_WORLD_SIZE", "1") != os.environ.get("WORLD_SIZE", "1")
    time.sleep(1.0 if multi_node else 5.0)


def _script_frames(tb: TracebackType | None, script: str) -> TracebackType | None:
    """The traceback from the script's first frame on: runpy's and ours are not the user's."""
    target, cur = os.path.abspath(script), tb
    while cur is not None and os.path.abspath(cur.tb_frame.f_code.co_filename) != target:
        cur = cur.tb_next
    if cur is None:
        return tb
    # the registry's one init_process_group wrapper sits between the script and torch: unlink it
    link = cur
    while link.tb_next is not None:
        code = link.tb_next.tb_frame.f_code
        if code.co_filename == patching.__file__ and code.co_name == "init_process_group":
            link.tb_next = link.tb_next.tb_next
        else:
            link = link.tb_next
    return cur


def _restore_environment(launcher_env: dict[str, str]) -> None:
    """Make os.environ what a fresh worker gets: the launcher's now, plus the agent's variables.

    The fork server copied the launcher's environment when it started, before `distrain run`
    set OMP_NUM_THREADS and friends; the agent's per-worker variables (RANK, …) are those that
    differ from that copy.
    """
    preload = sys.modules.get(PRELOAD_MODULE)
    if preload is None:  # forked from the launcher itself: the environment is already current
        return
    base: dict[str, str] = preload.BASE_ENV
    own: frozenset[str] = getattr(preload, "SET_BY_PRELOAD", frozenset())
    agent = {k: v for k, v in os.environ.items() if base.get(k) != v and k not in own}
    os.environ.clear()
    os.environ.update(launcher_env)
    os.environ.update(agent)


def _server_unsafe() -> str:
    preload = sys.modules.get(PRELOAD_MODULE)
    return str(getattr(preload, "UNSAFE", "")) if preload is not None else ""


def _prepare_interpreter(script: str, script_args: tuple[str, ...], imports_distrain: bool) -> None:
    """argv, sys.path[0], unbuffered stdio, threads and multiprocessing as `python -u script`."""
    sys.argv = [script, *script_args]
    if imports_distrain:  # what its `import distrain` does in a fresh interpreter
        from distrain.cluster import strip_launcher_argv

        strip_launcher_argv()
    if sys.path:  # as Python computes it: the script's real folder (symlinks resolved)
        sys.path[0] = os.path.dirname(os.path.realpath(script))
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        old.flush()
        stream = io.TextIOWrapper(
            # the file lives as long as the process (hence no `with`)
            open(fd, "wb", buffering=0, closefd=False),  # noqa: SIM115
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
    from distrain.process.patching import GroupHook, on_init_process_group

    def started(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Args:
        global _group_started
        _group_started = True
        return args, kwargs

    on_init_process_group(GroupHook("fast_start", before=started))


def _process_group_formed() -> bool:
    try:
        import torch.distributed as dist

        return _group_started or (dist.is_available() and dist.is_initialized())
    except Exception:
        return False


def _fresh_marker(job: ForkJob) -> str | None:
    return os.path.join(job.fallback_dir, "fresh") if job.fallback_dir else None


def _fresh() -> ModuleType:
    """The fresh-interpreter fallback, imported only by a worker that falls back."""
    from distrain.worker.fast_start import fresh_child

    return fresh_child
