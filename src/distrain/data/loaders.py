"""The DataLoaders a Context prepares: a training loader over global batches, an eval shard."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from distrain.data.global_batch import split
from distrain.data.sampler import (
    DistributedLoader,
    GlobalBatchSampler,
    ShardedEvalSampler,
    dataset_length,
)
from distrain.process.cores import usable_cores


def loader_defaults(
    kwargs: dict[str, Any], device: torch.device, local_world_size: int
) -> dict[str, Any]:
    """DataLoader keywords the user did not give: workers and pinned memory for this device."""
    # CPU training: loader workers would steal cores from the compute threads. GPU: a few
    # workers per process keep the device fed.
    default_workers = (
        0 if device.type != "cuda" else min(4, max(0, usable_cores() // local_world_size - 1))
    )
    kwargs.setdefault("num_workers", default_workers)
    kwargs.setdefault("pin_memory", device.type == "cuda")
    if kwargs["num_workers"] > 0:
        kwargs.setdefault("persistent_workers", True)
    return kwargs


def training_loader(
    dataset: Dataset[Any],
    batch_size: int,
    rank: int,
    world: int,
    device: torch.device,
    local_world_size: int,
    *,
    shuffle: bool,
    drop_last: bool,
    seed: int,
    seed_samples: bool | None,
    global_batch: int | None = None,
    **kwargs: Any,
) -> DistributedLoader:
    """`batch_size` samples per process from global batches that do not depend on `world`.

    With `global_batch`, the global batch is that whatever `world`, and `batch_size` the largest
    micro-batch a process takes (data/global_batch.py).
    """
    accumulation = 1
    if global_batch is not None:
        batch_size, accumulation = split(global_batch, world, batch_size)
    sampler = GlobalBatchSampler(
        dataset_length(dataset),
        batch_size,
        rank=rank,
        world_size=world,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        accumulation=accumulation,
    )
    options = loader_defaults(kwargs, device, local_world_size)
    return DistributedLoader(dataset, sampler, seed_samples=seed_samples, **options)


def eval_loader(
    dataset: Dataset[Any],
    batch_size: int,
    rank: int,
    world: int,
    device: torch.device,
    local_world_size: int,
    **kwargs: Any,
) -> DataLoader:
    """This rank's unpadded shard of `dataset`: every sample in exactly one rank's batches."""
    sampler = ShardedEvalSampler(dataset_length(dataset), rank, world)
    options = loader_defaults(kwargs, device, local_world_size)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, **options)
