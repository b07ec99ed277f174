"""Replicated data parallelism: every rank holds the whole model; DDP all-reduces gradients."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def wrap_ddp(
    model: nn.Module, device: torch.device, sync_bn: bool, comm_hook: str | None, **ddp_kwargs: Any
) -> nn.Module:
    """`model` (already on `device`) in DistributedDataParallel, with SyncBN and a hook if asked.

    DDP broadcasts rank 0's parameters and buffers at construction, so every rank starts from
    identical weights.
    """
    if sync_bn:  # SyncBatchNorm's module only for the option that asks for it
        from distrain.parallel.batchnorm import convert_sync_batchnorm

        model = convert_sync_batchnorm(model, device.type).to(device)
    if comm_hook is not None:
        from distrain.parallel.comm_hooks import one_bucket_mb, parse_hook

        if (
            parse_hook(comm_hook)[0] == "powersgd"
            and dist.get_backend(ddp_kwargs.get("process_group")) == "gloo"
        ):
            # gloo needs PowerSGD's all-reduces in one bucket (see comm_hooks); a larger cap asked
            # for stays
            ddp_kwargs["bucket_cap_mb"] = max(
                ddp_kwargs.get("bucket_cap_mb") or 25.0, one_bucket_mb(model)
            )
    if device.type == "cuda":
        ddp_kwargs.setdefault("device_ids", [device.index])
        ddp_kwargs.setdefault("output_device", device.index)
    wrapped = nn.parallel.DistributedDataParallel(model, **ddp_kwargs)
    if comm_hook is not None:
        from distrain.parallel.comm_hooks import register_comm_hook

        wrapped._distrain_comm_hook_state = register_comm_hook(wrapped, comm_hook)
    else:  # a resumed run's first step then adds gradients as the uninterrupted run's did
        from distrain.parallel.ddp_layout import align_first_reduction

        wrapped._distrain_comm_hook_state = align_first_reduction(wrapped)
    return wrapped


def release_ddp(model: nn.parallel.DistributedDataParallel) -> None:
    """Drop DDP's references to its reducer and group, so they die with the process group.

    Done before interpreter teardown: freeing a Reducer there while gloo's threads wait for the
    GIL deadlocks the exit or aborts it ("terminate called without an active exception").
    """
    for attr in ("reducer", "logger", "process_group"):
        with contextlib.suppress(Exception):
            setattr(model, attr, None)
