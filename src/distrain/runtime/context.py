"""The Context: everything a training script asks of the distributed engine, in one facade.

Preparing the model and data, reductions, mixed precision, gradient accumulation, printing
once, checkpoints and metrics.  :func:`distrain.init` (runtime/init.py) makes it; with one
plain process there is no process group and every call still works.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import weakref
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ..cluster import ClusterEnvironment
from ..contract import usable_cores
from ..train import watchdog
from ..train.data import DistributedLoader, GlobalBatchSampler, ShardedEvalSampler, dataset_length
from ..train.nn import convert_sync_batchnorm

T = TypeVar("T")

#: the Context made by the last init() (None before, and after its shutdown)
_active: Context | None = None


def current() -> Context | None:
    """The Context made by the last init(), or None."""
    return _active


def _remember(ctx: Context) -> None:
    global _active
    _active = ctx


def _forget(ctx: Context) -> None:
    global _active
    if _active is ctx:
        _active = None


class Context:
    """This process's place in the job and the tools to train there.

    Attributes: ``rank``, ``world_size``, ``local_rank``, ``local_world_size``, ``node_rank``,
    ``num_nodes``, ``device``, ``backend`` (None when there is no process group), ``env`` (the
    detected :class:`~distrain.cluster.ClusterEnvironment`), ``precision``.
    """

    def __init__(
        self,
        env: ClusterEnvironment,
        device: torch.device,
        backend: str | None,
        precision: str,
        threads: int,
    ) -> None:
        self.env = env
        self.rank = env.rank()
        self.world_size = env.world_size()
        self.local_rank = env.local_rank()
        self.local_world_size = env.local_world_size()
        self.node_rank = env.node_rank()
        self.num_nodes = env.num_nodes()
        self.device = device
        self.backend = backend
        self.precision = precision
        self.threads = threads
        self.scaler: torch.amp.GradScaler | None = None
        if precision == "fp16":
            self.scaler = torch.amp.GradScaler(device.type)
        self._models: list[weakref.ref[nn.Module]] = []
        self._closed = False
        self._monitor: Any = None  # distrain.monitor.Monitor when a run directory is set
        #: optimizer steps taken (the watchdog's measure of progress)
        self.steps = 0
        self._watchdog: Any = None

    # -- where am I -----------------------------------------------------------------------
    @property
    def is_main(self) -> bool:
        """True on global rank 0."""
        return self.rank == 0

    @property
    def is_local_main(self) -> bool:
        """True on local rank 0 (one per node: downloads, per-node caches)."""
        return self.local_rank == 0

    @property
    def distributed(self) -> bool:
        """True when a process group exists (any launcher, even with one process)."""
        return self.backend is not None

    def describe(self) -> str:
        """The one-line summary rank 0 prints at start."""
        nodes = f"{self.num_nodes} node" + ("s" if self.num_nodes != 1 else "")
        procs = f"{self.world_size} process" + ("es" if self.world_size != 1 else "")
        return (
            f"distrain: {procs} on {nodes} · launcher {self.env.name} · backend "
            f"{self.backend or 'none'} · device {self.device.type} · {self.threads} thread(s)/process"
            + (f" · {self.precision}" if self.precision != "fp32" else "")
        )

    # -- model and data -------------------------------------------------------------------
    def prepare_model(self, model: nn.Module, sync_bn: bool = False, comm_hook: str | None = None, **ddp_kwargs: Any) -> nn.Module:
        """Move `model` to the device and wrap it in DDP when distributed.

        DDP broadcasts rank 0's parameters and buffers at construction, so every rank starts
        from identical weights.  ``sync_bn=True`` turns BatchNorm layers into cross-process
        ones (torch's SyncBatchNorm on CUDA, :class:`~distrain.train.nn.CPUSyncBatchNorm` elsewhere).
        ``comm_hook`` compresses the gradient all-reduce (``"bf16"``, ``"fp16"``, ``"powersgd"``;
        see :mod:`distrain.train.comm_hooks`); off by default because it changes the numerics.
        Extra keyword arguments go to DistributedDataParallel (e.g. ``bucket_cap_mb``).
        """
        if comm_hook is not None:
            from ..train.comm_hooks import parse_hook

            parse_hook(comm_hook)  # a bad name fails on every world size, not only on N > 1
        if sync_bn and self.distributed:
            model = convert_sync_batchnorm(model, self.device.type)
        model = model.to(self.device)
        if not self.distributed:
            return model
        if self.device.type == "cuda":
            ddp_kwargs.setdefault("device_ids", [self.device.index])
            ddp_kwargs.setdefault("output_device", self.device.index)
        wrapped = nn.parallel.DistributedDataParallel(model, **ddp_kwargs)
        if comm_hook is not None:
            from ..train.comm_hooks import register_comm_hook

            wrapped._distrain_comm_hook_state = register_comm_hook(wrapped, comm_hook)  # type: ignore[assignment]
        self._models.append(weakref.ref(wrapped))
        return wrapped

    @staticmethod
    def unwrap(model: nn.Module) -> nn.Module:
        """The user's module inside a DDP wrapper (for saving, evaluation and attribute access)."""
        return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model

    def _loader_defaults(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        # CPU training: loader workers would steal cores from the compute threads. GPU: a few
        # workers per process keep the device fed.
        default_workers = 0 if self.device.type != "cuda" else min(4, max(0, usable_cores() // self.local_world_size - 1))
        kwargs.setdefault("num_workers", default_workers)
        kwargs.setdefault("pin_memory", self.device.type == "cuda")
        if kwargs["num_workers"] > 0:
            kwargs.setdefault("persistent_workers", True)
        return kwargs

    def prepare_loader(
        self,
        dataset: Dataset[Any],
        batch_size: int,
        shuffle: bool = True,
        drop_last: bool = True,
        seed: int = 0,
        **kwargs: Any,
    ) -> DistributedLoader:
        """A training DataLoader: ``batch_size`` samples **per process**, epochs advance by themselves.

        The global batch is ``batch_size × world_size``; its contents do not depend on the
        world size, and the short last global batch of each epoch is dropped on every world size
        (no duplicated samples; see :mod:`distrain.train.data`).  Other keyword arguments (``num_workers``,
        ``collate_fn``, …) go to DataLoader.
        """
        sampler = GlobalBatchSampler(
            dataset_length(dataset),
            batch_size,
            rank=self.rank,
            world_size=self.world_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
        )
        return DistributedLoader(dataset, sampler, **self._loader_defaults(kwargs))

    def prepare_eval_loader(self, dataset: Dataset[Any], batch_size: int, **kwargs: Any) -> DataLoader:
        """An evaluation DataLoader over this rank's unpadded shard: every sample counted once.

        Ranks may get different numbers of batches, so evaluate with ``ctx.unwrap(model)``
        (no DDP collectives in the forward) and combine with :meth:`all_reduce`.
        """
        sampler = ShardedEvalSampler(dataset_length(dataset), self.rank, self.world_size)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, **self._loader_defaults(kwargs))

    # -- reductions -----------------------------------------------------------------------
    def all_reduce(self, value: torch.Tensor | float | int, op: str = "sum") -> torch.Tensor:
        """Sum, mean, max or min of `value` over all ranks (a new tensor; inputs untouched)."""
        tensor = torch.as_tensor(value).detach().clone()
        if tensor.dtype in (torch.float16, torch.bfloat16):
            tensor = tensor.float()
        if not self.distributed:
            return tensor
        device = self.device if self.backend == "nccl" else torch.device("cpu")
        work = tensor.to(device)
        ops = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
        if op not in ops:
            raise ValueError(f"op must be one of {sorted(ops)}, got {op!r}")
        if op == "mean" and not work.is_floating_point():
            work = work.double()
        dist.all_reduce(work, op=ops[op])
        if op == "mean":
            work = work / self.world_size
        return work.to(tensor.device)

    def gather_object(self, obj: T) -> list[T]:
        """Every rank's picklable `obj`, in rank order, on every rank (trusted in-job data only)."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: T, src: int = 0) -> T:
        """Rank `src`'s `obj` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.distributed:
            dist.barrier()

    # -- mixed precision and accumulation -------------------------------------------------
    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast for the chosen precision (bf16 on CPU/CUDA, fp16 on CUDA); no-op for fp32."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward(), scaled when fp16 needs a GradScaler."""
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """optimizer.step() (through the GradScaler for fp16)."""
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()
        self.steps += 1
        watchdog.on_step(self, self.steps)

    def clip_grad_norm(self, model: nn.Module, max_norm: float, optimizer: torch.optim.Optimizer) -> torch.Tensor:
        """Clip gradients (unscaling fp16 gradients first); returns the total norm."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)
        return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    def no_sync(self, model: nn.Module, skip: bool = True) -> contextlib.AbstractContextManager[Any]:
        """Skip DDP's gradient all-reduce in this block when `skip` (accumulation micro-steps)."""
        if skip and isinstance(model, nn.parallel.DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()

    def accumulate(self, model: nn.Module, micro_step: int, every: int) -> contextlib.AbstractContextManager[Any]:
        """Gradient accumulation over `every` micro-batches: all-reduce only on the last one.

        ``micro_step`` counts from 0; the block of micro-step k skips the all-reduce unless
        ``(k + 1) % every == 0``.  Scale the loss by ``1 / every`` to average.
        """
        return self.no_sync(model, skip=(micro_step + 1) % every != 0)

    # -- checkpoints ------------------------------------------------------------------------
    def checkpointer(self, directory: str | os.PathLike[str], **kwargs: Any) -> Any:
        """A :class:`~distrain.train.checkpoint.Checkpointer` saving to `directory` (see docs/checkpointing.md)."""
        from ..train.checkpoint import Checkpointer

        return Checkpointer(self, directory, **kwargs)

    # -- printing ---------------------------------------------------------------------------
    def print(self, *args: Any, **kwargs: Any) -> None:
        """print() on rank 0 only."""
        if self.is_main:
            kwargs.setdefault("flush", True)
            print(*args, **kwargs)

    def progress(self, iterable: Iterable[T], total: int | None = None, description: str = "") -> Iterator[T]:
        """Iterate with a rich progress bar on rank 0 (plain iteration elsewhere and off a TTY)."""
        if not self.is_main or not sys.stderr.isatty():
            yield from iterable
            return
        from rich.progress import track

        yield from track(iterable, total=total, description=description, transient=True)

    def log(self, step: int | None = None, **values: Any) -> None:
        """Record progress for `distrain top` and TensorBoard; a no-op without a run directory.

        ``step`` defaults to one more than the last call (``advance=False``: the same step, for
        per-epoch values); ``epoch=`` and ``samples=`` (samples this rank processed since the
        last call) are understood; every other keyword is a scalar (``loss=loss`` may be a tensor: it is read ~once a second, not every step).
        See :mod:`distrain.monitor`.
        """
        if self._monitor is not None:
            self._monitor.log(step, **values)

    # -- shutdown ---------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Release DDP state and destroy the process group (idempotent; also run at exit).

        Done deliberately before interpreter teardown: letting the garbage collector free a
        DDP Reducer while gloo's threads wait for the GIL can deadlock the exit.
        """
        if self._closed:
            return
        self._closed = True
        if self._monitor is not None:
            self._monitor.close()
        if self._watchdog is not None:
            self._watchdog.stop()
        for ref in self._models:
            model = ref()
            if model is None:
                continue
            # Drop every DDP reference to the reducer and the group, so the group's C++ object
            # (and its threads) is destroyed below, while Python is fully alive, instead of at
            # interpreter teardown (where gloo aborts with "terminate called without an active
            # exception" or deadlocks on the GIL).
            for attr in ("reducer", "logger", "process_group"):
                with contextlib.suppress(Exception):
                    setattr(model, attr, None)
        self._models.clear()
        if dist.is_available() and dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        gc.collect()
        _forget(self)
