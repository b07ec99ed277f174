"""The Context: everything a training script asks of the distributed engine, in one facade.

Model and data, reductions, mixed precision, accumulation, printing once, checkpoints, metrics;
made by :func:`distrain.init` (worker/init.py), and every call works in one plain process too.

One thing: the facade a script holds, each method a short delegation to the layer that does the
work (data/, parallel/, checkpoint/, monitor/); its reductions are process/reductions.py.
"""

from __future__ import annotations

import contextlib
import os
import sys
import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, overload

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from distrain.cluster import ClusterEnvironment
from distrain.data import loaders
from distrain.data.sampler import DistributedLoader
from distrain.process.info import ProcessInfo
from distrain.process.reductions import Reductions
from distrain.settings import Settings
from distrain.worker.layer import PLAIN, Layer
from distrain.worker.lifecycle import watchdog
from distrain.worker.services import Services
from distrain.worker.steps import StepCounter

if TYPE_CHECKING:
    from distrain.checkpoint import Checkpointer, NoDisk
    from distrain.parallel.options import Strategy

T = TypeVar("T")

#: the Context made by the last init() (None before, and after its shutdown)
_active: Context | None = None


def current() -> Context | None:
    """The Context made by the last init(), or None (also once its shutdown began)."""
    return _active if _active is not None and not _active._closed else None


def _remember(ctx: Context) -> None:
    global _active
    _active = ctx


def _forget(ctx: Context) -> None:
    global _active
    if _active is ctx:
        _active = None


class Context(Reductions):
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
        settings: Settings | None = None,
    ) -> None:
        self.env = env
        #: what init() read from its arguments and the DISTRAIN_* variables (distrain.settings)
        self.settings = settings if settings is not None else Settings()
        #: the frozen description components receive instead of the Context (process/info.py)
        self.process = ProcessInfo(
            env.rank(), env.world_size(), env.local_rank(), env.local_world_size(),
            env.node_rank(), env.num_nodes(), device, backend,
        )  # fmt: skip
        self.rank, self.world_size = self.process.rank, self.process.world_size
        self.local_rank, self.local_world_size = env.local_rank(), env.local_world_size()
        self.node_rank, self.num_nodes = self.process.node_rank, self.process.num_nodes
        self.device, self.backend = device, backend
        self.precision = precision
        self.threads = threads
        self.scaler: torch.amp.GradScaler | None = None
        if precision == "fp16":
            self.scaler = torch.amp.GradScaler(device.type)
        self._models: list[weakref.ref[nn.Module]] = []
        self._closed = False
        #: the metrics recorder and the watchdog, as init() started them (worker/services.py)
        self.services = Services()
        self._step_counter = StepCounter(self._on_step)
        self._logs_without_steps = 0
        #: what a job-level feature changes in training (worker/layer.py; plain: nothing)
        self.layer: Layer = PLAIN

    @property
    def steps(self) -> int:
        """Optimizer steps on prepared models (or the job's step, when its layer decides it)."""
        committed = self.layer.committed_step()
        return self._step_counter.count if committed is None else committed

    def _on_step(self, count: int) -> None:
        if self.services.breakdown is not None:
            self.services.breakdown.step_done()
        watchdog.on_step(self, count)

    # -- where am I -----------------------------------------------------------------------
    @property
    def is_main(self) -> bool:
        """True on global rank 0 (of one group of them, when the job's layer has several)."""
        return self.layer.is_main(self.rank)

    @property
    def is_local_main(self) -> bool:
        """True on local rank 0 (one per node: downloads, per-node caches)."""
        return self.local_rank == 0

    def describe(self) -> str:
        """The one-line summary rank 0 prints at start."""
        nodes = f"{self.num_nodes} node" + ("s" if self.num_nodes != 1 else "")
        procs = f"{self.world_size} process" + ("es" if self.world_size != 1 else "")
        return (
            f"distrain: {procs} on {nodes} · launcher {self.env.name} · backend "
            f"{self.backend or 'none'} · device {self.device.type} · {self.threads} "
            "thread(s)/process" + (f" · {self.precision}" if self.precision != "fp32" else "")
        )

    # -- model and data -------------------------------------------------------------------
    def prepare_model(
        self,
        model: nn.Module,
        strategy: str | Strategy = "ddp",
        *,
        shard: Any = None,
        activation_checkpointing: bool = False,
        cpu_offload: bool = False,
        replicate: int | None = None,
        sync_bn: bool = False,
        comm_hook: str | None = None,
        **kwargs: Any,
    ) -> nn.Module:
        """Put `model` on the device and spread it over the ranks (see docs/sharding.md).

        `strategy` is a strategy object holding its options, checked when it is built:
        ``distrain.DDP(sync_bn=True, comm_hook="bf16")`` (the default, replicated; SyncBN and
        all-reduce compression), ``distrain.FSDP(reshard_after_forward=False, cpu_offload=...)``
        (FSDP2 shards parameters, gradients and optimizer state over all ranks; each block of
        ``shard=`` is one unit, the root the last) or ``distrain.HSDP(replicate=2)`` (shards inside
        each shard group, default one per node, replicates across them).  The names ``"ddp"``,
        ``"fsdp"``, ``"hsdp"`` are aliases, and the keywords of this signature (with any other one
        for DistributedDataParallel or fully_shard) build the same object: ``prepare_model(m,
        "fsdp", cpu_offload=True)`` is ``prepare_model(m, FSDP(cpu_offload=True))``.
        ``activation_checkpointing=True`` (any strategy) recomputes each block's activations in
        backward; ``precision="bf16"`` in init() computes in bf16 and reduces gradients in fp32.  A
        model built under :meth:`init_model` is materialised here.  Then create the optimizer.
        """
        from distrain import parallel as strategies

        spec = strategies.resolve(
            strategy, sync_bn=sync_bn, comm_hook=comm_hook, shard=shard, replicate=replicate,
            activation_checkpointing=activation_checkpointing, cpu_offload=cpu_offload, **kwargs,
        )  # fmt: skip
        prepared = strategies.prepare(
            model,
            self.layer.decorate(spec),  # a job-level feature may prepare around it
            device=self.device,
            precision=self.precision,
            distributed=self.distributed,
            num_nodes=self.num_nodes,
            map_buffers=self.settings.map_large_buffers,
        )
        if prepared is not model or strategies.is_sharded(prepared):
            self._models.append(weakref.ref(prepared))
        self._step_counter.track(prepared)  # parameters as they are after wrapping/sharding
        if self.services.breakdown is not None:
            self.services.breakdown.watch(prepared)
        return prepared

    def init_model(self) -> contextlib.AbstractContextManager[Any]:
        """Build a model inside this block on the meta device: shapes only, no memory, no init.

        :meth:`prepare_model` then gives it storage and initial values (sharded right away with
        ``strategy="fsdp"``): every module's ``reset_parameters()``, children first, drawing
        from rank 0's CPU generator.  The weights equal a one-process construction from the same
        generator state when each module initialises its own tensors in ``reset_parameters()``
        (torch's layers do); see docs/sharding.md for the exact rule.
        """
        return torch.device("meta")

    @staticmethod
    def unwrap(model: nn.Module) -> nn.Module:
        """The user's module inside a DDP wrapper (a sharded model is its own module)."""
        from distrain.parallel import unwrap

        return unwrap(model)

    def full_state_dict(self, model: nn.Module) -> dict[str, Any]:
        """The whole, unsharded state dict on CPU on rank 0 ({} on other ranks): for torch.save.

        Collective: call it on every rank.  Works for sharded, DDP and plain models.
        """
        from distrain.parallel import full_state_dict

        return full_state_dict(model)

    def prepare_loader(
        self,
        dataset: Dataset[Any],
        batch_size: int,
        shuffle: bool = True,
        drop_last: bool = True,
        seed: int = 0,
        seed_samples: bool | None = None,
        global_batch: int | None = None,
        **kwargs: Any,
    ) -> DistributedLoader:
        """A training DataLoader: ``batch_size`` samples **per process**; epochs advance alone.

        The global batch, ``batch_size × world_size``, is cut from one permutation per epoch
        whatever the world size; the short last one is dropped (:mod:`distrain.data.sampler`).
        A resume on another world size goes on at the epoch's next sample; ``global_batch=G``
        keeps G per step instead (``batch_size``: the largest micro-batch; see
        :mod:`distrain.data.global_batch`).  Per-sample seeding: ``seed_samples``.  Other
        keyword arguments (``num_workers``, ``collate_fn``, …) go to DataLoader.
        """
        rank, world = self.layer.data_rank(self.rank, self.world_size)
        loader = loaders.training_loader(
            dataset, batch_size, rank, world, self.device, self.local_world_size, shuffle=shuffle,
            drop_last=drop_last, seed=seed, seed_samples=seed_samples, global_batch=global_batch,
            **kwargs)  # fmt: skip
        return self.services.watch_loader(loader)  # the step breakdown's data time, rank 0's bar

    def prepare_eval_loader(
        self, dataset: Dataset[Any], batch_size: int, **kwargs: Any
    ) -> DataLoader:
        """An evaluation DataLoader over this rank's unpadded shard: every sample counted once.

        Ranks may get different numbers of batches, so evaluate with ``ctx.unwrap(model)``
        (no DDP collectives in the forward) and combine with :meth:`all_reduce`.
        """
        return loaders.eval_loader(
            dataset, batch_size, self.rank, self.world_size, self.device, self.local_world_size,
            **kwargs,
        )  # fmt: skip

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
        if self.services.breakdown is not None:
            self.services.breakdown.backward_done()

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """optimizer.step() (through the GradScaler for fp16); counted in :attr:`steps`.

        A plain ``optimizer.step()`` over a prepared model counts too; this method adds only what
        torch's step hooks cannot see: a step the GradScaler skipped (inf/NaN gradients), and an
        optimizer over a model that was not prepared.  Returns whether the step was applied:
        always, unless the job's layer withholds it (a quorum that did not commit it,
        docs/fault_tolerance.md).
        """
        return bool(self.layer.step(lambda: self._optimizer_step(optimizer)))

    def _optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        before = self._step_counter.count
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()
        if self._step_counter.count == before:
            self._step_counter.advance()

    def clip_grad_norm(
        self, model: nn.Module, max_norm: float, optimizer: torch.optim.Optimizer
    ) -> torch.Tensor:
        """Clip gradients to a global norm (unscaling fp16 gradients first); returns that norm.

        For a sharded model the norm is over every rank's shards, the same on every rank.
        """
        from distrain.parallel import clip_grad_norm

        if self.scaler is not None:
            self.scaler.unscale_(optimizer)
        return clip_grad_norm(model, max_norm)

    def no_sync(
        self, model: nn.Module, skip: bool = True
    ) -> contextlib.AbstractContextManager[Any]:
        """Keep gradients local in this block when `skip` (DDP's no_sync, FSDP's sync switch)."""
        from distrain.parallel import gradient_sync_off

        return gradient_sync_off(model) if skip else contextlib.nullcontext()

    def accumulate(
        self, model: nn.Module, micro_step: int, every: int
    ) -> contextlib.AbstractContextManager[Any]:
        """Gradient accumulation over `every` micro-batches: all-reduce only on the last one.

        ``micro_step`` counts from 0; the block of micro-step k skips the all-reduce unless
        ``(k + 1) % every == 0``.  Scale the loss by ``1 / every`` to average.
        """
        return self.no_sync(model, skip=(micro_step + 1) % every != 0)

    @overload
    def checkpointer(self, directory: None, **kwargs: Any) -> NoDisk: ...
    @overload
    def checkpointer(self, directory: str | os.PathLike[str], **kwargs: Any) -> Checkpointer: ...
    def checkpointer(
        self, directory: str | os.PathLike[str] | None, **kwargs: Any
    ) -> Checkpointer | NoDisk:
        """A :class:`~distrain.checkpoint.Checkpointer` saving to `directory`; ``None``:
        nothing saved, the state registered all the same (docs/checkpointing.md)."""
        from distrain.worker.components import checkpointer

        return checkpointer(
            directory, self.process, is_main=self.is_main, scaler=self.scaler,
            settings=self.settings, layer=self.layer, services=self.services,
            shutdown=self.shutdown, uncounted=self._step_counter.paused, **kwargs,
        )  # fmt: skip

    # -- printing ---------------------------------------------------------------------------
    def print(self, *args: Any, **kwargs: Any) -> None:
        """print() on rank 0 only."""
        if self.is_main:
            kwargs.setdefault("flush", True)
            print(*args, **kwargs)

    def progress(
        self, iterable: Iterable[T], total: int | None = None, description: str = ""
    ) -> Iterator[T]:
        """Iterate with a rich progress bar on rank 0 (plain iteration elsewhere and off a TTY)."""
        if not self.is_main or not sys.stderr.isatty():
            yield from iterable
            return
        from rich.progress import track

        yield from track(iterable, total=total, description=description, transient=True)

    def log(self, step: int | None = None, **values: Any) -> None:
        """The one metrics call: `distrain top`, TensorBoard, `distrain bench` read what it records.

        ``step`` defaults to the training's step: the step a restore resumed at plus
        :attr:`steps` (or the job's step, when its layer decides it); in a script with no
        optimizer over a prepared model, to one more than the last call (``advance=False``:
        the same step, for per-epoch values).  ``epoch=`` and ``samples=`` (samples this rank
        processed since the last call) are understood; every other keyword is a scalar
        (``loss=loss`` may be a tensor: it is read ~once a second, not every step).  Values
        logged after an epoch's last step (``accuracy=``, ``test_loss=``) belong to that epoch.
        A no-op without a run directory; see :mod:`distrain.monitor`.
        """
        committed = self.layer.committed_step()
        if step is None and committed is not None:
            step = committed  # the job's step, healed too
        if self.steps:  # counted over the whole training: a resumed run goes on from its step
            step = self.services.resumed_step + self.steps if step is None else step
        elif self.services.watchdog is not None:
            self._logs_without_steps += 1
            if self._logs_without_steps == 20:
                watchdog.warn_unarmed(self.rank)
        if self.services.monitor is not None:
            self.services.monitor.log(step, **values)

    def shutdown(self) -> None:
        """Release DDP/FSDP state and destroy the process group (idempotent; also run at exit).

        Done before interpreter teardown (parallel.release_all says why).
        """
        from distrain.parallel import release_all  # what prepared the models releases them

        if self._closed:
            return
        self._closed = True
        self._step_counter.close()
        self.layer.close()
        self.services.close()
        release_all(self._models)
        _forget(self)
