"""How a model is spread over the ranks: ``DDP`` (replicated) or ``FSDP``/``HSDP`` (sharded, FSDP2).

The strategy objects and their name aliases live in :mod:`.options`.  :func:`prepare` is what
``ctx.prepare_model`` runs; the other functions are what the Context (and the checkpointer) need
to treat every strategy alike: :func:`unwrap`, :func:`is_sharded`, :func:`gradient_sync_off`,
:func:`clip_grad_norm`, :func:`full_state_dict`, :func:`release`.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import sys
import time
import weakref
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule

from distrain.errors import DistrainError
from distrain.parallel.ddp import release_ddp, wrap_ddp
from distrain.parallel.options import DDP, FSDP, HSDP, STRATEGIES, Decorated, Strategy, resolve

__all__ = [
    "DDP",
    "FSDP",
    "HSDP",
    "STRATEGIES",
    "Strategy",
    "clip_grad_norm",
    "full_state_dict",
    "gradient_sync_off",
    "is_on_meta",
    "is_sharded",
    "prepare",
    "release",
    "resolve",
    "unwrap",
]


def is_sharded(model: nn.Module) -> bool:
    """True when `model` was sharded by FSDP2 (its parameters are DTensors split across ranks)."""
    return isinstance(model, FSDPModule)


def is_on_meta(model: nn.Module) -> bool:
    """True when any parameter or buffer of `model` is on the meta device."""
    return any(t.is_meta for t in model.parameters()) or any(t.is_meta for t in model.buffers())


def _materialise(model: nn.Module) -> None:
    # a model built on the meta device only (``ctx.init_model()``) needs materialise.py
    from distrain.parallel.materialise import init_order, materialise_own

    memo: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for module in init_order(model):
            materialise_own(module, memo)


def _same_generator_everywhere() -> None:
    """Every rank's CPU generator takes rank 0's state, so a meta model initialises alike."""
    box = [torch.get_rng_state()]
    dist.broadcast_object_list(box, src=0)
    torch.set_rng_state(box[0])


def prepare(
    model: nn.Module,
    strategy: str | Strategy | Decorated,
    *,
    device: torch.device,
    precision: str,
    distributed: bool,
    num_nodes: int,
    map_buffers: bool = False,
    **options: Any,
) -> nn.Module:
    """Place `model` on `device` and spread it per `strategy` (see ``Context.prepare_model``).

    `strategy` is a :class:`~.options.Strategy` object, or a name whose loose keyword `options`
    build one (:func:`~.options.resolve`).  `map_buffers`: the opt-in allocator setting of a
    sharded model (:mod:`.heap`, ``Settings.map_large_buffers``).
    """
    if isinstance(strategy, Decorated):  # a feature's own preparation around the strategy
        return strategy.prepare(model, device)
    spec = resolve(strategy, **options)
    sharded = isinstance(spec, FSDP)
    if isinstance(spec, FSDP) and spec.cpu_offload and device.type != "cuda":
        raise DistrainError(
            "cpu_offload=True needs strategy='fsdp' or 'hsdp' on a GPU (on the CPU the parameters "
            "already live in host memory)"
        )
    blocks: list[nn.Module] = []
    if sharded or spec.activation_checkpointing:
        # fsdp.py (and the heap's and meta models' code it uses) only for the strategies and
        # options that ask for it: a plain DDP model imports none of it
        from distrain.parallel.fsdp import checkpoint_blocks, find_blocks

        blocks = find_blocks(model, spec.shard)
        if spec.activation_checkpointing:
            blocks = checkpoint_blocks(model, blocks)
    on_meta = is_on_meta(model)
    if on_meta and distributed:
        _same_generator_everywhere()
    if isinstance(spec, FSDP) and distributed:
        from distrain.parallel.fsdp import build_mesh, shard_model

        hybrid = isinstance(spec, HSDP)
        mesh = build_mesh(
            device.type,
            dist.get_world_size(),
            hybrid,
            spec.replicate if isinstance(spec, HSDP) else None,
            num_nodes,
        )
        return shard_model(
            model,
            blocks,
            mesh,
            device,
            precision,
            cpu_offload=spec.cpu_offload,
            on_meta=on_meta,
            map_buffers=map_buffers,
            **spec.callee_options(),
        )
    if on_meta:
        _materialise(model)
    model = model.to(device)
    if not isinstance(spec, DDP) or not distributed:
        return model  # one process: the plain model, whatever the strategy
    return wrap_ddp(model, device, spec.sync_bn, spec.comm_hook, **spec.callee_options())


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module: inside a DDP wrapper, or the (sharded) model itself."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


@contextlib.contextmanager
def _fsdp_sync_off(model: Any) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def gradient_sync_off(model: nn.Module) -> contextlib.AbstractContextManager[Any]:
    """A block whose backward keeps gradients local: DDP's no_sync, FSDP's gradient-sync switch."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        return model.no_sync()
    if is_sharded(model):
        return _fsdp_sync_off(model)
    return contextlib.nullcontext()


def clip_grad_norm(model: nn.Module, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
    """Scale gradients so their global norm is at most `max_norm`; returns the global norm.

    Sharded gradients are DTensors: their norm is reduced over every shard (as torchtitan's
    clip_grad_norm_ does) and returned as a plain tensor, equal on every rank.
    """
    from torch.distributed.tensor import DTensor

    params = [p for p in model.parameters() if p.grad is not None]
    total = torch.nn.utils.get_total_norm(
        [g for g in (p.grad for p in params) if g is not None], norm_type
    )
    if isinstance(total, DTensor):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


def full_state_dict(model: nn.Module) -> dict[str, Any]:
    """The whole unsharded state dict on CPU on rank 0; {} elsewhere (collective if distributed)."""
    if not (dist.is_available() and dist.is_initialized()):
        return {k: v.detach().to("cpu", copy=True) for k, v in unwrap(model).state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )


def release(model: nn.Module) -> None:
    """Drop the model's references to process groups before the group is destroyed (exit safety)."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        release_ddp(model)
    elif is_sharded(model):
        from distrain.parallel.fsdp import release_fsdp

        release_fsdp(model)


def release_all(models: list[weakref.ref[nn.Module]]) -> None:
    """Free the prepared models' DDP/FSDP state, then destroy the process group.

    The group's C++ object (and its threads) must die here, while Python is fully alive, not at
    interpreter teardown, where gloo aborts or deadlocks on the GIL.
    """
    for ref in models:
        model = ref()
        if model is not None:
            with contextlib.suppress(Exception):
                release(model)
    models.clear()
    if dist.is_available() and dist.is_initialized():
        groups = list(dist.distributed_c10d._world.pg_map)
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
        gc.collect()
        _drop_here(groups)
    gc.collect()


#: destroyed groups something else still held when released (see _drop_here)
_KEPT: list[Any] = []


def _drop_here(groups: list[Any], bound_s: float = 0.25) -> None:
    """Drop the last references to destroyed `groups` on this thread, never on a gloo thread.

    A comm hook's ``Future.then`` callback (PowerSGD's hold ``group.WORLD``) runs on the group's
    own worker thread and is freed there just after it completes the future the reducer waits
    on.  If the main thread has destroyed the group in that window, the callback's reference is
    the last: the group's destructor then joins its worker threads from one of them, and
    ``std::thread::join`` on itself aborts the process ("terminate called after throwing an
    instance of 'std::system_error' what(): Resource deadlock avoided").  So each group is let
    go here only once this list is its only holder.  That takes microseconds for a callback; a
    holder that stays past `bound_s` (the script's own ``pg = dist.new_group(...)``) may be
    either kind, so the group is kept, and dropped at exit if the list is its only holder then.
    """
    deadline = time.monotonic() + bound_s
    while any(_held_elsewhere(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.002)  # the GIL goes to the thread that frees its callback
    kept = [g for g in groups if _held_elsewhere(g)]
    groups.clear()
    if kept and not _KEPT:
        atexit.register(_drop_kept)  # runs before handlers registered earlier (LIFO)
    _KEPT.extend(kept)


def _held_elsewhere(group: Any) -> bool:
    # when only one list holds it: that list, the caller's loop name, this function's parameter
    # and getrefcount's argument
    return sys.getrefcount(group) > 4


def _drop_kept() -> None:
    """At exit: let go of the kept groups no one else holds any more, on the main thread."""
    _KEPT[:] = [g for g in _KEPT if _held_elsewhere(g)]
