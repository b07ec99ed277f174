"""What a worker takes from its environment, read and checked once: :class:`Settings`.

Beside it, the few environment readings both sides share: seconds given on a command line or in a
variable (:func:`parse_seconds`), the log level, a restart's count, the boot folder on a fresh
interpreter's PYTHONPATH (:func:`boot_first`).

``distrain.init()`` builds one from its arguments and the ``DISTRAIN_*`` variables and hands it
to the device choice, the thread split, the store, the monitor and the watchdog
(``ctx.settings``), so no part of a worker reads these variables on its own.  Precedence: an
argument wins over the environment, which wins over the default.  A malformed value is one
line naming the variable, never a silent fallback.  Every variable: docs/environment.md.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from distrain import contract
from distrain.errors import DistrainError, UsageError

#: the collective timeout once training runs (``DISTRAIN_TRAIN_TIMEOUT``)
DEFAULT_TRAIN_TIMEOUT_S = 300.0
#: how long a self-starting script's children have to form their group (``DISTRAIN_FORM_TIMEOUT``)
DEFAULT_FORM_TIMEOUT_S = 60.0
#: how long a restarted attempt of a multi-node static job waits for its peers
#: (``DISTRAIN_REJOIN_TIMEOUT``)
DEFAULT_REJOIN_TIMEOUT_S = 60.0
#: seconds between two metrics records of one rank (``DISTRAIN_METRICS_INTERVAL``)
DEFAULT_METRICS_INTERVAL_S = 1.0
#: glibc's own setting of the mmap threshold; distrain leaves the allocator alone when it is set
USER_MMAP_THRESHOLD = "MALLOC_MMAP_THRESHOLD_"
#: variables that CI services set (GitHub Actions, GitLab, Jenkins, Buildkite; most others set CI)
CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "JENKINS_URL", "BUILDKITE")
#: the shortest metrics interval accepted (shorter values are raised to it)
MIN_METRICS_INTERVAL_S = 0.05
#: --replicas: a cross-group collective or a heal's transfer (``DISTRAIN_FT_TIMEOUT``)
DEFAULT_FT_TIMEOUT_S = 10.0
#: --replicas: one quorum (``DISTRAIN_FT_QUORUM_TIMEOUT``)
DEFAULT_FT_QUORUM_TIMEOUT_S = 60.0
#: --replicas: a group's first quorum waiting for every group's (``DISTRAIN_FT_START_WAIT``)
DEFAULT_FT_START_WAIT_S = 120.0
#: --replicas: a group that ended serving the groups still to come (``DISTRAIN_FT_LINGER``)
DEFAULT_FT_LINGER_S = 120.0


@dataclass(frozen=True)
class Settings:
    """A worker's settings; None means "not chosen" (the component's own default applies)."""

    device: str | None = None  # DISTRAIN_DEVICE
    threads: int | None = None  # DISTRAIN_NUM_THREADS
    run_dir: str | None = None  # DISTRAIN_RUN_DIR
    log_dir: str | None = None  # DISTRAIN_LOG_DIR
    watchdog_s: float | None = None  # DISTRAIN_WATCHDOG (None: off)
    train_timeout_s: float = DEFAULT_TRAIN_TIMEOUT_S  # DISTRAIN_TRAIN_TIMEOUT
    metrics_interval_s: float = DEFAULT_METRICS_INTERVAL_S  # DISTRAIN_METRICS_INTERVAL
    bind_addr: str | None = None  # DISTRAIN_BIND_ADDR
    cpu_rehearsal: int | None = None  # DISTRAIN_CPU_REHEARSAL (None: not rehearsing)
    replica_group: int | None = None  # DISTRAIN_REPLICA_GROUP (None: no replica groups)
    replica_groups: int | None = None  # DISTRAIN_REPLICA_GROUPS
    ft_events: str | None = None  # DISTRAIN_FT_EVENTS
    ft_host: str | None = None  # DISTRAIN_FT_HOST (None: one node, loopback)
    breakdown: bool = True  # DISTRAIN_BREAKDOWN (0: no step breakdown)
    atomic_save: bool = True  # DISTRAIN_ATOMIC_SAVE (0: torch.save writes a path in place)
    memory_dir: str | None = None  # DISTRAIN_MEMORY_DIR (None: /dev/shm)
    #: glibc's mmap threshold fixed at 1 MiB under FSDP: lower peak memory, slower steps (opt-in;
    #: off when the user set glibc's own MALLOC_MMAP_THRESHOLD_: their choice wins)
    map_large_buffers: bool = False  # DISTRAIN_MAP_LARGE_BUFFERS
    form_timeout_s: float = DEFAULT_FORM_TIMEOUT_S  # DISTRAIN_FORM_TIMEOUT
    rejoin_timeout_s: float = DEFAULT_REJOIN_TIMEOUT_S  # DISTRAIN_REJOIN_TIMEOUT
    ft_timeout_s: float = DEFAULT_FT_TIMEOUT_S  # DISTRAIN_FT_TIMEOUT
    ft_quorum_timeout_s: float = DEFAULT_FT_QUORUM_TIMEOUT_S  # DISTRAIN_FT_QUORUM_TIMEOUT
    ft_start_wait_s: float = DEFAULT_FT_START_WAIT_S  # DISTRAIN_FT_START_WAIT
    ft_linger_s: float = DEFAULT_FT_LINGER_S  # DISTRAIN_FT_LINGER
    progress: bool | None = (
        None  # DISTRAIN_PROGRESS (None: rank 0's bar when stdout is a terminal; False in CI)
    )
    # Where the launcher, torch's agent and the scheduler put this worker: plain text, never
    # checked (an error report reads them, and must not fail on the error it reports).
    error_file: str | None = None  # TORCHELASTIC_ERROR_FILE (the agent's root-cause file)
    restart_count: int = 0  # TORCHELASTIC_RESTART_COUNT (this agent's restarts)
    run_id: str | None = None  # TORCHELASTIC_RUN_ID
    agent_rank: str | None = None  # RANK, as the agent gave it (for reports before a group)
    group_rank: str | None = None  # GROUP_RANK (this node's index)
    local_world_size: int = 1  # LOCAL_WORLD_SIZE
    group_world_size: int = 1  # GROUP_WORLD_SIZE (the job's nodes)
    launcher: str | None = None  # DISTRAIN_LAUNCHER ("distrain-run" under distrain run)
    master_addr: str | None = None  # MASTER_ADDR (the job's store)
    master_port: str | None = None  # MASTER_PORT
    rdzv_endpoint: str | None = None  # DISTRAIN_RDZV_ENDPOINT (a c10d rendezvous)
    launcher_pid: str | None = None  # DISTRAIN_LAUNCHER_PID
    static_store: str | None = None  # DISTRAIN_STATIC_STORE (a static multi-node job's store)
    lighthouse: str | None = None  # TORCHFT_LIGHTHOUSE
    slurm_job_id: str | None = None  # SLURM_JOB_ID (None: not under SLURM)
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES
    agent_world_size: str | None = None  # WORLD_SIZE, as the agent gave it
    job_dir: str | None = (
        None  # DISTRAIN_JOB_DIR (the job's folder: its event stream, distrain.events)
    )
    self_starting: bool = False  # DISTRAIN_SELF_STARTING (the script starts its own workers)
    self_start_watcher: str | None = None  # DISTRAIN_SELF_START_WATCHER (for the script's children)
    nccl_trace_buffer: str | None = None  # TORCH_NCCL_TRACE_BUFFER_SIZE (the user's, if set)
    omp_num_threads: str | None = None  # OMP_NUM_THREADS (as set: 1 is torchrun's default)

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None, **arguments: Any) -> Settings:
        """Settings from `arguments` (not None), else `environ` (default os.environ), else defaults.

        Raises :class:`~distrain.errors.DistrainError` with one line for a malformed value.
        """
        env = os.environ if environ is None else environ

        def text(name: str) -> str | None:
            return env.get(name) or None

        values: dict[str, Any] = {
            "device": text(contract.DEVICE),
            "threads": _count(contract.NUM_THREADS, text(contract.NUM_THREADS)),
            "run_dir": text(contract.RUN_DIR),
            "log_dir": text(contract.LOG_DIR),
            "watchdog_s": _seconds(contract.WATCHDOG, text(contract.WATCHDOG), zero_is_off=True),
            "train_timeout_s": _seconds(contract.TRAIN_TIMEOUT, text(contract.TRAIN_TIMEOUT))
            or DEFAULT_TRAIN_TIMEOUT_S,
            "metrics_interval_s": max(
                MIN_METRICS_INTERVAL_S,
                _seconds(contract.METRICS_INTERVAL, text(contract.METRICS_INTERVAL))
                or DEFAULT_METRICS_INTERVAL_S,
            ),
            "bind_addr": text(contract.BIND_ADDR),
            "cpu_rehearsal": _count(contract.CPU_REHEARSAL, text(contract.CPU_REHEARSAL)),
            "replica_group": _index(contract.REPLICA_GROUP, text(contract.REPLICA_GROUP)),
            "replica_groups": _count(contract.REPLICA_GROUPS, text(contract.REPLICA_GROUPS)),
            "ft_events": text(contract.FT_EVENTS),
            "memory_dir": text(contract.MEMORY_DIR),
            "ft_host": text(contract.FT_HOST),
            "atomic_save": _switch(contract.ATOMIC_SAVE, text(contract.ATOMIC_SAVE), default=True)
            is not False,
            "breakdown": _switch(contract.BREAKDOWN, text(contract.BREAKDOWN), default=True)
            is not False,
            "map_large_buffers": _switch(
                contract.MAP_LARGE_BUFFERS, text(contract.MAP_LARGE_BUFFERS), default=False
            )
            is True,
            "form_timeout_s": _seconds(contract.FORM_TIMEOUT, text(contract.FORM_TIMEOUT))
            or DEFAULT_FORM_TIMEOUT_S,
            "rejoin_timeout_s": _seconds(contract.REJOIN_TIMEOUT, text(contract.REJOIN_TIMEOUT))
            or DEFAULT_REJOIN_TIMEOUT_S,
            "ft_timeout_s": _seconds(contract.FT_TIMEOUT, text(contract.FT_TIMEOUT))
            or DEFAULT_FT_TIMEOUT_S,
            "ft_quorum_timeout_s": _seconds(
                contract.FT_QUORUM_TIMEOUT, text(contract.FT_QUORUM_TIMEOUT)
            )
            or DEFAULT_FT_QUORUM_TIMEOUT_S,
            "ft_start_wait_s": _seconds(contract.FT_START_WAIT, text(contract.FT_START_WAIT))
            or DEFAULT_FT_START_WAIT_S,
            "ft_linger_s": _seconds(contract.FT_LINGER, text(contract.FT_LINGER))
            or DEFAULT_FT_LINGER_S,
            # unset: none in CI (its log is no terminal worth redrawing), else rank 0's terminal
            # decides
            "progress": _switch(
                contract.PROGRESS,
                text(contract.PROGRESS),
                False if any(text(v) for v in CI_VARIABLES) else None,
            ),
        }
        values.update(_placement(text))
        unknown = set(arguments) - set(values)
        if unknown:
            raise TypeError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        values.update({k: v for k, v in arguments.items() if v is not None})
        if env.get(USER_MMAP_THRESHOLD):
            values["map_large_buffers"] = False
        if values["threads"] is not None and int(values["threads"]) < 1:
            raise DistrainError(f"threads must be at least 1 (got {values['threads']})")
        if values["watchdog_s"] is not None and float(values["watchdog_s"]) <= 0:
            values["watchdog_s"] = None  # init(watchdog_seconds=0): off, as the variable's 0
        for key in ("device", "run_dir", "log_dir"):
            if values[key] is not None:
                values[key] = os.fspath(values[key]) if key != "device" else str(values[key])
        return cls(**values)


def _placement(text: Any) -> dict[str, Any]:
    """The unchecked fields: where the launcher, the agent and the scheduler put this worker."""
    restarts, local = text(contract.RESTART_COUNT) or "", text("LOCAL_WORLD_SIZE") or ""
    nodes = text("GROUP_WORLD_SIZE") or ""
    return {
        "error_file": text(contract.ERROR_FILE),
        "restart_count": int(restarts) if restarts.isdigit() else 0,
        "run_id": text("TORCHELASTIC_RUN_ID"),
        "agent_rank": text("RANK"),
        "group_rank": text("GROUP_RANK"),
        "local_world_size": max(1, int(local)) if local.isdigit() else 1,
        "group_world_size": max(1, int(nodes)) if nodes.isdigit() else 1,
        "launcher": text(contract.LAUNCHER),
        "master_addr": text("MASTER_ADDR"),
        "master_port": text("MASTER_PORT"),
        "rdzv_endpoint": text(contract.RDZV_ENDPOINT),
        "launcher_pid": text(contract.LAUNCHER_PID),
        "static_store": text(contract.STATIC_STORE),
        "lighthouse": text(contract.LIGHTHOUSE),
        "slurm_job_id": text("SLURM_JOB_ID"),
        "visible_devices": text("CUDA_VISIBLE_DEVICES"),
        "agent_world_size": text("WORLD_SIZE"),
        "job_dir": text(contract.JOB_DIR),
        "self_starting": bool(text(contract.SELF_STARTING)),
        "self_start_watcher": text(contract.SELF_START_WATCHER),
        "nccl_trace_buffer": text("TORCH_NCCL_TRACE_BUFFER_SIZE"),
        "omp_num_threads": text("OMP_NUM_THREADS"),
    }


def for_report(environ: Mapping[str, str] | None = None) -> Settings:
    """:meth:`Settings.read`, or only the unchecked fields when a value is malformed.

    For code that reports a failure outside ``distrain.init()`` (the fork server's child, a
    self-started child, the rehearsal's boot): the failure may be that very malformed value.
    """
    try:
        return Settings.read(environ)
    except DistrainError:
        env = os.environ if environ is None else environ
        return Settings(**_placement(lambda name: env.get(name) or None))


def _seconds(name: str, raw: str | None, zero_is_off: bool = False) -> float | None:
    """A positive, finite number of seconds, None when unset (or 0 with `zero_is_off`)."""
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if zero_is_off and value == 0:
        return None
    if not (0 < value < math.inf):
        raise DistrainError(f"{name}={raw!r}: expected a positive number of seconds")
    return value


def _count(name: str, raw: str | None) -> int | None:
    """A positive integer, None when unset."""
    if raw is None:
        return None
    if not raw.strip().isdigit() or int(raw) < 1:
        raise DistrainError(f"{name}={raw!r}: expected a positive whole number")
    return int(raw)


def _index(name: str, raw: str | None) -> int | None:
    """A whole number from 0, None when unset."""
    if raw is None:
        return None
    if not raw.strip().isdigit():
        raise DistrainError(f"{name}={raw!r}: expected a whole number from 0")
    return int(raw)


_ON = {"1", "on", "true", "yes"}
_OFF = {"0", "off", "false", "no"}


def _switch(name: str, raw: str | None, default: bool | None) -> bool | None:
    """On/off from 1/0, on/off, true/false, yes/no (any case); `default` when unset."""
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in _ON or word in _OFF:
        return word in _ON
    raise DistrainError(f"{name}={raw!r}: expected 1 or 0 (on or off)")


def parse_seconds(text: str, what: str) -> float:
    """A positive number of seconds; bad input raises UsageError with `what` in the message."""
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{what} expects seconds (got {text!r})") from None
    if not value > 0 or value != value or value == float("inf"):
        raise UsageError(f"{what} must be a positive number of seconds (got {text!r})")
    return value


def debug_logging() -> bool:
    """Whether ``DISTRAIN_LOG_LEVEL=debug`` asks for every line, unfiltered (distrain/noise.py)."""
    return os.environ.get(contract.LOG_LEVEL, "").strip().lower() == "debug"


def restarted_by_distrain_run() -> bool:
    """A worker of a restarted attempt under `distrain run`, whose console said so already."""
    restarts = os.environ.get(contract.RESTART_COUNT, "0") not in ("", "0")  # this node's count
    return restarts and os.environ.get(contract.LAUNCHER) == "distrain-run"


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
