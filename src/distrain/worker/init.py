"""`distrain.init()`: find the launcher, pick the device and threads, form the process group.

The order is the data flow of a worker's start: who launched me (:mod:`distrain.cluster`) →
device → threads → store and process group (:mod:`distrain.worker.start.store`) → the
:class:`~distrain.worker.context.Context` with failure reporting, metrics and watchdog attached.
"""

from __future__ import annotations

import atexit
import datetime as dt
import importlib
import os
import sys

import torch
import torch.distributed as dist

from distrain import noise
from distrain.cluster import ClusterEnvironment, ClusterError, detect_environment
from distrain.errors import DistrainError, UsageError
from distrain.events import emit
from distrain.log import get_logger
from distrain.monitor import open_monitor
from distrain.monitor.breakdown import open_breakdown
from distrain.process.cores import choose_threads
from distrain.settings import Settings, restarted_by_distrain_run
from distrain.worker import atomic_save, start
from distrain.worker.context import Context, _remember, current
from distrain.worker.lifecycle import failure, watchdog
from distrain.worker.lifecycle.stacks import dump_stacks_on_signal
from distrain.worker.services import progress_wanted
from distrain.worker.start.store import restart_safe_store
from distrain.worker.start.title import set_worker_title

_log = get_logger("runtime")

#: how long forming the group may take (slow nodes, container pulls, a late rank)
DEFAULT_INIT_TIMEOUT = dt.timedelta(minutes=10)


def _pick_device(
    env: ClusterEnvironment, device: str | torch.device | None, visible: str | None = None
) -> torch.device:
    """The device of this rank; `visible` is CUDA_VISIBLE_DEVICES (from distrain.settings)."""
    if device is not None:
        dev = torch.device(device)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", env.local_rank())
        return dev
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        if env.local_rank() >= count:
            raise DistrainError(
                f"local rank {env.local_rank()} but only {count} GPU(s) visible "
                f"(CUDA_VISIBLE_DEVICES={visible or '<unset>'}); start at most {count} "
                "processes per node"
            )
        return torch.device("cuda", env.local_rank())
    return torch.device("cpu")


def _default_backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


#: torch modules with ``group=group.WORLD`` as a default argument.  Imported after the group
#: forms, their functions keep it (its gloo threads, rank 0's store) alive past
#: destroy_process_group, and interpreter teardown then meets live threads: "terminate called
#: without an active exception" (SIGABRT) on a rank whose training succeeded.  Imported
#: before, the default is None.  distrain imports them anyway (FSDP's options), so no cost.
GROUP_DEFAULT_MODULES = (
    "torch.distributed.nn.functional",
    "torch.distributed.optim",
    "torch.distributed.fsdp.sharded_grad_scaler",
)


def _import_before_the_group() -> None:
    for name in GROUP_DEFAULT_MODULES:
        importlib.import_module(name)


def init(
    backend: str | None = None,
    device: str | torch.device | None = None,
    precision: str = "fp32",
    threads: int | None = None,
    timeout: dt.timedelta = DEFAULT_INIT_TIMEOUT,
    verbose: bool = True,
    exit_on_error: bool = True,
    run_dir: str | os.PathLike[str] | None = None,
    watchdog_seconds: float | None = None,
) -> Context:
    """Find out how this process was launched, form the process group, and return the Context.

    - ``backend``: None picks NCCL with a GPU, gloo otherwise.
    - ``device``: None picks ``cuda:<local rank>`` when a GPU is visible, else CPU
      (``DISTRAIN_DEVICE`` overrides).
    - ``precision``: ``fp32``, ``bf16`` (CPU or CUDA) or ``fp16`` (CUDA, with a GradScaler).
    - ``threads``: CPU threads per process; None divides the cores among local processes.
    - ``exit_on_error``: a set-up mistake (too many ranks for the GPUs, an incomplete launcher
      environment) prints one ``distrain: error:`` line and exits 1 instead of raising
      :class:`DistrainError`.
    - ``run_dir``: where :meth:`Context.log` writes metrics and TensorBoard events
      (default: ``DISTRAIN_RUN_DIR``, set by ``distrain run --run-dir/--log-dir``).
    - ``watchdog_seconds``: abort with every rank's stack when no step completes this long
      (default: ``DISTRAIN_WATCHDOG``, else off); see :mod:`distrain.worker.lifecycle.watchdog`.
    Calling it again returns the same Context.
    """
    try:
        if (active := current()) is not None:
            return active
        dump_stacks_on_signal()  # kill -USR1 <pid> prints this rank's stacks, watchdog or not
        # torch's and its libraries' known noise off the console (DISTRAIN_LOG_LEVEL=debug: all)
        noise.install()
        if precision not in ("fp32", "bf16", "fp16"):
            raise DistrainError(f"precision must be fp32, bf16 or fp16, got {precision!r}")
        env = _launch_environment()
        settings = Settings.read(
            device=device, threads=threads, run_dir=run_dir, watchdog_s=watchdog_seconds
        )
        dev = _take_the_device(env, settings, precision)
        n_threads = _set_threads(env, settings)
        chosen_backend, attempt = _form_the_group(env, dev, backend, timeout, settings)
        ctx = Context(env, dev, chosen_backend, precision, n_threads, settings)
        _report_as_a_worker(ctx, settings)
        _open_services(ctx, settings, attempt)
        _start_the_context(ctx, settings, precision)
        # after a restart `distrain run` has said what happened and that every rank restarts
        # (launch/report/console.py): the same start line again would say nothing new
        if verbose and not restarted_by_distrain_run():
            ctx.print(ctx.describe())
        return ctx
    # DistrainErrors too, but not init's set-up errors: raised as they are
    except (ClusterError, UsageError):
        raise
    except DistrainError as err:
        if not exit_on_error:
            raise
        _log.error(f"distrain: error: {err}")
        raise SystemExit(1) from None


def _launch_environment() -> ClusterEnvironment:
    """Who launched this process (torchrun, SLURM, MPI, ...), its variables exported for torch."""
    try:
        env = detect_environment()
        env.export_env()
    except ClusterError as err:
        raise DistrainError(str(err)) from None
    return env


def _take_the_device(env: ClusterEnvironment, settings: Settings, precision: str) -> torch.device:
    """This rank's device, checked against the precision and the GPUs visible, and made current."""
    dev = _pick_device(env, settings.device, settings.visible_devices)
    if precision == "fp16" and dev.type != "cuda":
        raise DistrainError("fp16 needs a GPU; use precision='bf16' on CPU")
    if dev.type == "cuda":
        try:
            env.check_devices(torch.cuda.device_count())
        except ClusterError as err:
            raise DistrainError(str(err)) from None
        torch.cuda.set_device(dev)
    return dev


def _set_threads(env: ClusterEnvironment, settings: Settings) -> int:
    """Torch's CPU threads for this process: asked for, else the cores shared among local ranks."""
    n_threads = choose_threads(env.local_world_size(), settings.threads, settings.omp_num_threads)
    torch.set_num_threads(n_threads)
    return n_threads


def _form_the_group(
    env: ClusterEnvironment,
    dev: torch.device,
    backend: str | None,
    timeout: dt.timedelta,
    settings: Settings,
) -> tuple[str | None, int]:
    """(the backend that formed or None, the job's attempt agreed by every rank)."""
    # Under a launcher a group exists even for one process, so `-n 1` behaves like `-n N`
    # (DDP wrapper, torch.distributed calls work); a plain `python train.py` gets none.
    if not env.forms_process_group():
        return None, 0
    chosen_backend = backend or _default_backend(dev)
    if chosen_backend == "nccl":
        from distrain.worker.start import nccl_debug

        nccl_debug.nccl_debug_defaults(settings.log_dir, settings.nccl_trace_buffer)
    _import_before_the_group()
    # which attempt of the job, agreed by every rank (worker/start/attempt.py)
    store, attempt = restart_safe_store(env, timeout, settings, settings.rejoin_timeout_s)
    dist.init_process_group(
        chosen_backend,
        store=store,
        rank=env.rank(),
        world_size=env.world_size(),
        timeout=timeout,
        device_id=dev if dev.type == "cuda" else None,
    )
    # what really formed: gloo for nccl where a feature maps one to the other
    return dist.get_backend(), attempt


def _report_as_a_worker(ctx: Context, settings: Settings) -> None:
    """The process title, one-line errors with the root cause once, and atomic saves."""
    if ctx.backend is not None:  # findable in ps/top/nvidia-smi under every launcher
        set_worker_title(ctx.rank, ctx.world_size, sys.argv, start.title_group(settings))
    # distrain errors in one line; a failed rank's root cause reported once
    failure.install(ctx.rank, settings)
    if settings.launcher == "distrain-run":  # a worker of distrain run's, however started
        atomic_save.install(settings.atomic_save)


def _open_services(ctx: Context, settings: Settings, attempt: int) -> None:
    """Progress line, step breakdown, metrics monitor and watchdog, each when asked for."""
    # a stand-in device has no NVML to ask
    real_gpu = ctx.device.type == "cuda" and not start.devices_are_stand_ins(settings)
    ctx.services.progress = progress_wanted(settings.progress, ctx.is_main)
    ctx.services.breakdown = open_breakdown(
        settings.breakdown, ctx.rank, ctx.world_size, real_gpu, settings.job_dir
    )
    ctx.services.monitor = open_monitor(
        settings.run_dir,
        ctx.rank,
        ctx.world_size,
        ctx.device.index if real_gpu else None,
        interval=settings.metrics_interval_s,
        breakdown=ctx.services.breakdown,
        attempt=settings.restart_count,
        visible_devices=settings.visible_devices,
    )
    if settings.watchdog_s is not None and ctx.distributed:
        ctx.services.watchdog = watchdog.start_watchdog(
            ctx.rank, ctx.world_size, settings.watchdog_s, settings, attempt
        )
        emit("watchdog", settings.job_dir, rank=ctx.rank)  # distrain run --watchdog: watched


def _start_the_context(ctx: Context, settings: Settings, precision: str) -> None:
    """A feature's training layer when one is asked for, the Context made current, its end."""
    layer = start.training_layer(ctx.process, settings, precision)
    if layer is not None:
        ctx.layer = layer
    _remember(ctx)
    atexit.register(ctx.shutdown)
    ctx.layer.started(ctx.shutdown)
