"""What passes between `distrain run` and its workers: names, exit codes, the entrypoint.

The launcher (``distrain.launch``) sets these variables, reads these codes and hands torch's
agent the entrypoint; every worker (``distrain.worker``) reads the variables and exits with the
codes.  No torch, so the launcher starts (and starts its fork server) before paying for it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

# -- environment variables set by the launcher, read by the workers (docs/environment.md) ---------
#: the fd of the go pipe a `--hosts` node's `distrain run` waits on (launch/hosts/go.py)
HOST_GO_FD = "DISTRAIN_HOST_GO_FD"
#: which distrain launcher started the job ("distrain-run")
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
LAUNCHER_PID = "DISTRAIN_LAUNCHER_PID"
#: a static multi-node job's agent store (host:port, node 0's): where a rank leaves why it stopped
STATIC_STORE = "DISTRAIN_STATIC_STORE"
#: seconds a restarted attempt of a multi-node static job waits for its peers (start/store.py)
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
#: the pid of a self-starting script's process, set for its children (they report to its watch)
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
#: the job's folder, made by `distrain run`: its event stream (distrain/events/), its stop claim
JOB_DIR = "DISTRAIN_JOB_DIR"
#: "0" turns the per-rank step breakdown off (distrain.monitor.breakdown)
BREAKDOWN = "DISTRAIN_BREAKDOWN"
#: "0": torch.save writes a path in place, as torch does (distrain.worker.atomic_save)
ATOMIC_SAVE = "DISTRAIN_ATOMIC_SAVE"
#: where the memory tier keeps its snapshots (default /dev/shm; checkpoint/memory_tier/)
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
#: --replicas --nnodes: seconds another node waits for node 0's lighthouse and roll call
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
#: ``1``/``0``: rank 0's progress bar over prepared loaders (default: on when stdout is a tty)
PROGRESS = "DISTRAIN_PROGRESS"


# -- exit codes ----------------------------------------------------------------------------------
#: every rank's exit code when the watchdog aborts a job (as timeout(1) does)
WATCHDOG_EXIT_CODE = 124
#: exit code of a usage error on the command line
USAGE_EXIT_CODE = 2
#: exit code of a job refused at its start: what it asks cannot be done as asked (a CPU
#: rehearsal of a GPU-only call, a script under --replicas that nothing joins to the groups)
REFUSED_EXIT_CODE = 3


def signal_exit_code(signum: int) -> int:
    """The conventional 128 + N a shell reports for a process ended by signal N."""
    return 128 + int(signum)


# -- the entrypoint torch's agent runs -----------------------------------------------------------
@dataclass
class ForkJob:
    """What a forked worker needs beyond its argv: the script and the launcher's environment."""

    script: str
    env: dict[str, str] = field(default_factory=dict)
    #: where a worker records that the script needs fresh interpreters (None: no fallback)
    fallback_dir: str | None = None
    #: the script imports distrain at top level (whose import strips a legacy --local-rank)
    imports_distrain: bool = False
    #: signals the launcher ignored when the job started (process/lineage.py): what a
    #: worker exec'd by the agent would inherit as ``SIG_IGN`` (worker/fast_start/as_exec.py)
    ignored_signals: tuple[int, ...] = ()


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


#: the worker module a forked worker runs (worker/fast_start/forked.py) and the server's preload
FORKED_WORKER = "distrain.worker.fast_start.forked"
PRELOAD_MODULE = "distrain.worker.fast_start.preload"
