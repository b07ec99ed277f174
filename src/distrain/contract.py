"""What passes between the `distrain run` process and its workers: names, codes, small parsers.

Both sides import this module and nothing of each other: the launcher (``distrain.launch``)
writes these environment variables and reads these exit codes; every worker
(``distrain.worker``, ``distrain.worker``) reads the variables and exits with the codes.  It
imports no torch, so the launcher can start (and start its fork server) before paying for it.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from distrain.errors import UsageError

# -- environment variables set by the launcher, read by the workers -------------------------------
#: which distrain launcher started the job ("distrain-run")
#: the fd of the go pipe a `--hosts` node's `distrain run` waits on (launch/hosts/go.py)
HOST_GO_FD = "DISTRAIN_HOST_GO_FD"
LAUNCHER = "DISTRAIN_LAUNCHER"
#: where ctx.log() writes per-rank metrics and TensorBoard events (distrain run --run-dir)
RUN_DIR = "DISTRAIN_RUN_DIR"
#: torchrun's --log-dir as the workers see it (NCCL flight-recorder dumps go there)
LOG_DIR = "DISTRAIN_LOG_DIR"
#: seconds without a step before the watchdog aborts the job (distrain run --watchdog)
WATCHDOG = "DISTRAIN_WATCHDOG"
#: collective timeout once training runs, in seconds
TRAIN_TIMEOUT = "DISTRAIN_TRAIN_TIMEOUT"
#: the one address rank 0's store listens on (the interface distrain run chose)
BIND_ADDR = "DISTRAIN_BIND_ADDR"
#: the c10d rendezvous endpoint (host:port): a rank whose error would recur closes it (no restart)
RDZV_ENDPOINT = "DISTRAIN_RDZV_ENDPOINT"
#: the pid of this node's `distrain run` (its agent): a static job's rank stops it
#: (worker/stop_job.py)
LAUNCHER_PID = "DISTRAIN_LAUNCHER_PID"
#: a static multi-node job's agent store (host:port, in node 0's `distrain run`): a rank that stops
#: the job leaves why there, and every node's launcher stops on reading it (launch/stop_watch.py)
STATIC_STORE = "DISTRAIN_STATIC_STORE"
#: seconds a restarted attempt of a multi-node static job waits for its peers (worker/rejoin.py)
REJOIN_TIMEOUT = "DISTRAIN_REJOIN_TIMEOUT"
#: CPU threads per worker, overriding the cores ÷ processes split
NUM_THREADS = "DISTRAIN_NUM_THREADS"
#: device override for init() ("cpu", "cuda:1", ...)
DEVICE = "DISTRAIN_DEVICE"
#: the script's top-level imports, preloaded by the fork server
PRELOAD = "DISTRAIN_PRELOAD"
#: set in processes started by distrain.spawn
SPAWN = "DISTRAIN_SPAWN"
#: set by distrain run for a script that starts its own workers (run once; its children are the job)
SELF_STARTING = "DISTRAIN_SELF_STARTING"
#: seconds from the first child joining until a self-starting script's group must have formed
FORM_TIMEOUT = "DISTRAIN_FORM_TIMEOUT"
#: the pid of a self-starting script's process, set there for its children: they only report
#: their group's forming (``group`` events), the script's process watches it
SELF_START_WATCHER = "DISTRAIN_SELF_START_WATCHER"
#: distrain run --cpu: how many CPU processes stand in for GPUs on this node (unset: no rehearsal)
CPU_REHEARSAL = "DISTRAIN_CPU_REHEARSAL"
#: torch: give workers their own store instead of sharing the agent's (restarts; pytorch#135712)
NO_SHARED_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
#: seconds between two metrics records of one rank
METRICS_INTERVAL = "DISTRAIN_METRICS_INTERVAL"
#: torch: how many times the agent restarted this worker group
RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"
#: torch: where a worker writes its root-cause error for the agent
ERROR_FILE = "TORCHELASTIC_ERROR_FILE"
#: the job's folder, made by `distrain run`: the event stream every process of the job reports to
#: (distrain/events/) and the stop claim (:data:`STOP_MARK`)
JOB_DIR = "DISTRAIN_JOB_DIR"
#: "0" turns the per-rank step breakdown off (distrain.monitor.breakdown)
BREAKDOWN = "DISTRAIN_BREAKDOWN"
#: "0": torch.save writes a path in place, as torch does (distrain.worker.atomic_save)
ATOMIC_SAVE = "DISTRAIN_ATOMIC_SAVE"
#: where the checkpointer's memory tier keeps its snapshots (default /dev/shm; checkpoint/memory.py)
MEMORY_DIR = "DISTRAIN_MEMORY_DIR"
#: "1": a sharded model's large buffers get mappings of their own (distrain.parallel.heap)
MAP_LARGE_BUFFERS = "DISTRAIN_MAP_LARGE_BUFFERS"
#: distrain run --replicas: this worker's replica group (0..R-1; unset: no replica groups)
REPLICA_GROUP = "DISTRAIN_REPLICA_GROUP"
#: distrain run --replicas: how many replica groups the job has
REPLICA_GROUPS = "DISTRAIN_REPLICA_GROUPS"
#: distrain run --replicas: the folder where workers and agents leave steps, heals and losses
FT_EVENTS = "DISTRAIN_FT_EVENTS"
#: distrain run --replicas across nodes: the address this node's groups give the other groups
FT_HOST = "DISTRAIN_FT_HOST"
#: TorchFT's own name for the lighthouse address (http://host:port), read by torchft.Manager
LIGHTHOUSE = "TORCHFT_LIGHTHOUSE"
#: distrain run --replicas: seconds the launcher waits for its lighthouse to listen (default 60)
LIGHTHOUSE_START_TIMEOUT = "DISTRAIN_LIGHTHOUSE_START_TIMEOUT"
#: --replicas --nnodes: seconds another node waits for node 0's lighthouse and roll call (default
#: 120)
NODE0_WAIT = "DISTRAIN_NODE0_WAIT"
#: --replicas: seconds a cross-group collective or a heal's transfer may take (default 10)
FT_TIMEOUT = "DISTRAIN_FT_TIMEOUT"
#: --replicas: seconds one quorum may wait for the lighthouse and the group's ranks (default 60)
FT_QUORUM_TIMEOUT = "DISTRAIN_FT_QUORUM_TIMEOUT"
#: --replicas: seconds a group's first quorum waits for every group to reach its own (default 120)
FT_START_WAIT = "DISTRAIN_FT_START_WAIT"
#: --replicas: seconds a group that ended keeps serving groups that did not meet it (default 120)
FT_LINGER = "DISTRAIN_FT_LINGER"
#: ``debug``: every line torch and TorchFT print, unfiltered (distrain's noise filters off)
LOG_LEVEL = "DISTRAIN_LOG_LEVEL"
#: ``1``/``0``: rank 0's progress bar over prepared loaders on or off (default: on when stdout is a
#: terminal)
PROGRESS = "DISTRAIN_PROGRESS"


def rehearse_boot_dir() -> str:
    """The folder whose sitecustomize.py installs the --cpu rehearsal in every fresh interpreter.

    The launcher prepends it to PYTHONPATH; found beside this file, without importing the
    worker side (worker/rehearse/).
    """
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker", "rehearse", "boot")


def boot_first(env: MutableMapping[str, str]) -> None:
    """Put the boot folder (:func:`rehearse_boot_dir`) first on `env`'s PYTHONPATH, once."""
    boot = rehearse_boot_dir()
    path = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    if boot not in path.split(os.pathsep):
        env["PYTHONPATH"] = boot + (os.pathsep + path if path else "")


# -- the step breakdown: what a rank reports at its exit (a ``breakdown`` event, distrain/events/)
#: the parts a training step's wall time is split into, in the order they are shown
PHASES = ("data", "compute", "comm", "optimizer", "checkpoint", "other")


def breakdown_fractions(seconds: dict[str, float]) -> dict[str, float]:
    """Each phase's share of the total of `seconds` (missing phases count 0); all 0 for no time.

    Negative inputs (a clock that stepped back) count as 0, so the shares always sum to 1.
    """
    parts = {phase: max(0.0, float(seconds.get(phase, 0.0) or 0.0)) for phase in PHASES}
    total = sum(parts.values())
    return {phase: (value / total if total > 0 else 0.0) for phase, value in parts.items()}


def debug_logging() -> bool:
    """Whether ``DISTRAIN_LOG_LEVEL=debug`` asks for every line, unfiltered (distrain/noise.py)."""
    return os.environ.get(LOG_LEVEL, "").strip().lower() == "debug"


def restarted_by_distrain_run() -> bool:
    """A worker of a restarted attempt under `distrain run`, whose console said so already."""
    restarts = os.environ.get(RESTART_COUNT, "0") not in ("", "0")  # this node's agent's count
    return restarts and os.environ.get(LAUNCHER) == "distrain-run"


def replica_group_env() -> str | None:
    """This process's replica group under `distrain run --replicas` (None otherwise)."""
    return os.environ.get(REPLICA_GROUP)


#: made in DISTRAIN_JOB_DIR by the first rank (or node launcher) that stops a static job.  A claim,
#: not a report: it holds nothing, and only the process that made it signals the launcher, once
#: (why goes to the job's event stream, a ``stop`` event, or stays in the launcher's own watch)
STOP_MARK = "stopped.txt"


def claim_stop(folder: str | None) -> bool:
    """Make :data:`STOP_MARK` in `folder` unless it is there already; True when this call made it
    (the caller then signals the launcher: once, however many ranks stop it)."""
    if not folder:
        return True
    try:
        os.close(os.open(os.path.join(folder, STOP_MARK), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:  # the launcher's folder is gone (it is exiting): signal it anyway
        return True
    return True


#: in a static multi-node job's agent store (STATIC_STORE): why a rank stopped the job;
#: ``…/read/N``: node N's launcher read it, ``…/alive/N``: node N's launcher still watches
JOB_STOPPED_KEY = "distrain/job-stopped"


# -- replica groups: the folder the groups share (DISTRAIN_FT_EVENTS) ------------------------------
# Its files coordinate the groups (each group's step, start and end, read by the others to decide
# when to train and end); the reports to the launcher are ``replica`` events in the folder's
# stream (distrain/events/, the same API and reader as every job's).
#: `distrain run --replicas --run-dir DIR`: the launcher's replica events, for `distrain top DIR`
REPLICA_EVENTS_FILE = "replicas.jsonl"


def ft_step_file(folder: str, group: int) -> str:
    """Where replica group `group` keeps its last committed step (rewritten in place)."""
    return os.path.join(folder, f"step.{group}")


def ft_start_file(folder: str, group: int) -> str:
    """Exists once replica group `group` reached its first quorum or ended (holds no start up)."""
    return os.path.join(folder, f"start.{group}")


def mark_ft_start(folder: str, group: int) -> None:
    """Leave replica group `group`'s start mark (:func:`ft_start_file`) in `folder`."""
    with open(ft_start_file(folder, group), "a"):
        pass


def ft_end_file(folder: str, group: int) -> str:
    """Exists once replica group `group`'s launcher ended for good (no replacement will come)."""
    return os.path.join(folder, f"end.{group}")


# -- exit codes ----------------------------------------------------------------------------------
#: every rank's exit code when the watchdog aborts a job (as timeout(1) does)
WATCHDOG_EXIT_CODE = 124
#: exit code of a usage error on the command line
USAGE_EXIT_CODE = 2
#: exit code of a job refused at its start: what it asks cannot be done as asked (a CPU
#: rehearsal of a GPU-only call, a script under --replicas that nothing joins to the groups)
REFUSED_EXIT_CODE = 3


def split_endpoint(endpoint: str, default_port: int = 29400) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``, or a bare host: torch's default port) → (host, port)."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit() or (host.startswith("[") != host.endswith("]")):
        return endpoint.strip("[]"), default_port
    return host.strip("[]"), int(port)


def stop_key(run_id: str) -> str:
    """Where, in the rendezvous store, a rank leaves why it stopped the job (launchers read it)."""
    return f"distrain/stopped/{run_id}"


def signal_exit_code(signum: int) -> int:
    """The conventional 128 + N a shell reports for a process ended by signal N."""
    return 128 + int(signum)


# -- threads -------------------------------------------------------------------------------------
def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, which containers and mpirun narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_per_process(local_world_size: int) -> int:
    """Cores divided evenly among the processes of this node, at least 1."""
    return max(1, usable_cores() // max(1, local_world_size))


# -- parsing -------------------------------------------------------------------------------------
def parse_seconds(text: str, what: str) -> float:
    """A positive number of seconds; bad input raises UsageError with `what` in the message."""
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{what} expects seconds (got {text!r})") from None
    if not value > 0 or value != value or value == float("inf"):
        raise UsageError(f"{what} must be a positive number of seconds (got {text!r})")
    return value


# -- the fork-server entrypoint ------------------------------------------------------------------
@dataclass
class ForkJob:
    """What a forked worker needs beyond its argv: the script and the launcher's environment."""

    script: str
    env: dict[str, str] = field(default_factory=dict)
    #: where a worker records that the script needs fresh interpreters (None: no fallback)
    fallback_dir: str | None = None
    #: the script imports distrain at top level (whose import strips a legacy --local-rank)
    imports_distrain: bool = False
    #: signals the launcher ignored when the job started (:func:`ignored_signals`): what a
    #: worker exec'd by the agent would inherit as ``SIG_IGN`` (worker/fast_start/dispositions.py)
    ignored_signals: tuple[int, ...] = ()


def ignored_signals(status: str = "/proc/self/status") -> tuple[int, ...]:
    """The signals this process ignores (``SIG_IGN``), as the kernel has them.

    Read from the kernel's ``SigIgn`` mask, not ``signal.getsignal``: a disposition set from C
    (or before Python started) is what exec passes on, whatever Python's table says.
    """
    try:
        with open(status) as f:
            line = next((x for x in f if x.startswith("SigIgn:")), "")
    except OSError:
        line = ""
    if not line:  # no procfs: Python's own view
        return tuple(
            int(s) for s in signal.Signals if _getsignal_or_none(s) == signal.SIG_IGN
        )  # fmt: skip
    mask = int(line.split(":", 1)[1].strip(), 16)
    return tuple(bit + 1 for bit in range(64) if mask >> bit & 1)


def _getsignal_or_none(sig: int) -> Any:
    try:
        return signal.getsignal(sig)
    except (ValueError, OSError):
        return None


def fallback_line(reason: str) -> str:
    """The line that says why the fast start's workers run in fresh interpreters instead."""
    return (
        f"distrain run: {reason}; running workers in fresh interpreters instead "
        "(--start-method spawn skips the fork)"
    )


def own_session() -> None:
    """Make this process a session and group leader, as torchrun starts its workers.

    A fast-start worker does it first (worker/fast_start/forked.py): its own children are then
    in its group, which the launcher stops with it (launch/fast_start/worker_groups.py).
    """
    try:
        os.setsid()
    except OSError:  # a group leader already: nothing to change
        pass


def die_with_parent() -> None:
    """SIGKILL this process when the thread that started it ends (Linux ``PR_SET_PDEATHSIG``).

    The chain launcher → fork server → worker (and launcher → replica group, lighthouse) holds
    together only by pipes that the workers themselves keep open: a SIGKILLed `distrain run`
    left its fork server and a rank running for good (seen in the chaos campaign). A parent
    that is already gone (re-parented before the call) kills this process at once.
    """
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


class WorkerEntrypoint:
    """A worker function named by module and attribute: picklable without importing it here.

    The launcher hands torch's elastic agent ``WorkerEntrypoint(FORKED_WORKER, "run_script")``;
    the worker imports the module when it is called, so neither side imports the other.
    """

    def __init__(self, module: str, function: str) -> None:
        self.module = module
        self.function = function
        # torch's agent names the entrypoint in its logs by these
        self.__name__ = self.__qualname__ = function

    def __call__(self, *args: Any) -> Any:
        """Import the worker module and call the function with `args`."""
        return getattr(importlib.import_module(self.module), self.function)(*args)


#: the worker module a forked worker runs (worker/fast_start/forked.py) and the one the server
#: preloads
FORKED_WORKER = "distrain.worker.fast_start.forked"
PRELOAD_MODULE = "distrain.worker.fast_start.preload"
