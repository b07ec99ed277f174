"""A model prepared for `distrain run --replicas`: DDP or FSDP inside the group, TorchFT across.

Inside a replica group the ranks reduce gradients as `distrain run -n N` would; the result is
then averaged over the live groups by TorchFT's fault-tolerant all-reduce (a peer that died
mid-all-reduce makes the step not commit, never an exception).  Moved out of training.py, which
keeps the quorum, the heal and the commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

from distrain.errors import DistrainError
from distrain.parallel.options import DDP, FSDP, Strategy

if TYPE_CHECKING:
    from torchft import Manager


class Group(Protocol):
    """What preparing a model asks of this process's replica group (training.py's Replicas)."""

    manager: Manager
    size: int  # processes in the group
    precision: str
    map_buffers: bool


def prepare(replicas: Group, model: nn.Module, device: torch.device, spec: Strategy) -> nn.Module:
    """`model` on `device`, DDP or FSDP over this group, gradients averaged over live groups.

    `spec` is the resolved strategy: DDP with its defaults only, or FSDP (sharded inside the
    group, the reduce-scattered shards all-reduced across groups); an option this path would
    not honour is refused, never dropped.
    """
    if type(spec) is FSDP:
        return _sharded(replicas, model, device, spec)
    if type(spec) is not DDP:
        raise DistrainError(
            f"--replicas supports strategy='ddp' or 'fsdp' for now (got {spec.name!r})"
        )
    if spec != DDP(find_unused_parameters=spec.find_unused_parameters):
        raise DistrainError(
            f"--replicas takes DDP without options for now (sync_bn, comm_hook, bucket_cap_mb, "
            f"activation_checkpointing, extra are not applied across groups); got {spec}"
        )
    model = model.to(device)
    kwargs: dict[str, Any] = {"device_ids": [device.index]} if device.type == "cuda" else {}
    # find_unused_parameters keeps the buckets as first built: every group must all-reduce
    # the same buckets, and a replacement would otherwise rebuild them differently
    wrapped = nn.parallel.DistributedDataParallel(model, find_unused_parameters=True, **kwargs)
    manager, size = replicas.manager, replicas.size

    def hook(state, bucket):  # DDP refuses a string annotation here
        if size > 1:  # inside the group first, then across groups (same rank in every group)
            dist.all_reduce(bucket.buffer())
            bucket.buffer().div_(size)
        # across groups: TorchFT's fault-tolerant all-reduce (errors skip the step, never raise)
        work = manager.allreduce(bucket.buffer())
        if work.wait():  # builds the chain that divides by the participants
            averaged = work.get_future().wait()
        else:  # a peer died mid-all-reduce: TorchFT noted the error and this step will not
            # commit; the buffer may be half-reduced, and TorchFT's future was never set
            averaged = bucket.buffer().zero_()
        done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        done.set_result(averaged)
        return done

    wrapped.register_comm_hook(None, hook)
    return wrapped


def _sharded(replicas: Group, model: nn.Module, device: torch.device, spec: FSDP) -> nn.Module:
    from torch.distributed.fsdp import FSDPModule

    from distrain.parallel import prepare as prepare_strategy

    # FSDP over this group's ranks (its process group), as `distrain run -n N` would shard
    sharded = prepare_strategy(
        model,
        spec,
        device=device,
        precision=replicas.precision,
        distributed=True,
        num_nodes=1,
        map_buffers=replicas.map_buffers,
    )
    manager = replicas.manager
    for module in sharded.modules():  # each unit's reduce-scattered shard, then across groups
        if isinstance(module, FSDPModule):
            module.set_all_reduce_hook(lambda shard: _cross_group(manager, shard))
    return sharded


def _cross_group(manager: Manager, shard: torch.Tensor) -> None:
    # the same rank of every live group holds the same shard: TorchFT's fault-tolerant average
    work = manager.allreduce(shard)
    if work.wait():
        averaged = work.get_future().wait()
        if averaged is not shard:
            shard.copy_(averaged)
    else:  # a peer died mid-all-reduce: this step will not commit (see the DDP hook)
        shard.zero_()
