"""DistributedLoader.continue_from: a live loop's loader moved to another loader's step start.

A replica group healed inside a step (worker/replicas/training.py) holds its step's batch: that
batch stands for the source's, and the next one its loop gets is the one the source draws next,
also with worker processes that prefetched batches of the old position.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from distrain.data.sampler import DistributedLoader, GlobalBatchSampler

DATA = TensorDataset(torch.arange(40))


def _loader(accumulation: int = 1, workers: int = 0) -> DistributedLoader:
    sampler = GlobalBatchSampler(40, 2, seed=5, accumulation=accumulation)
    options = {"num_workers": workers, "persistent_workers": workers > 0}
    return DistributedLoader(DATA, sampler, seed_samples=False, **options)


def _ids(batch: list[torch.Tensor]) -> list[int]:
    return batch[0].tolist()


@pytest.mark.parametrize("workers", [0, 2])
def test_the_next_batch_is_the_sources_next_one(workers: int) -> None:
    source, moved = _loader(), _loader(workers=workers)
    drawn = iter(source)
    for _ in range(7):  # the source finished 7 steps
        next(drawn)
    start = source.state_dict()
    loop = iter(moved)
    next(loop)  # this step's batch, drawn at step 0 (workers prefetch steps 1, 2, …)
    moved.continue_from(start)
    assert moved.state_dict() != start  # the batch in hand is the step's: it counts as done
    next(drawn)  # the source's batch of the same step
    assert moved.state_dict() == source.state_dict()
    rest = [_ids(b) for b in loop]
    assert rest == [_ids(b) for b in drawn] and len(rest) == 20 - 8  # to the epoch's end
    assert moved.state_dict() == source.state_dict() and moved.epoch == 1


def test_micro_batches_handed_out_count_as_the_steps_first_ones() -> None:
    source, moved = _loader(accumulation=2), _loader(accumulation=2)
    drawn = iter(source)
    for _ in range(6):  # 3 steps of 2 micro-batches
        next(drawn)
    start = source.state_dict()
    loop = iter(moved)
    next(loop)  # micro-batch 0 of the step
    moved.continue_from(start)
    assert moved.state_dict() == start  # the step is not done yet
    next(drawn)
    assert _ids(next(loop)) == _ids(next(drawn)) and moved.step_boundary
    assert moved.state_dict() == source.state_dict()


def test_a_loader_not_iterating_takes_the_position_as_it_is() -> None:
    source, moved = _loader(), _loader()
    drawn = iter(source)
    for _ in range(3):
        next(drawn)
    moved.continue_from(source.state_dict())
    assert moved.state_dict() == source.state_dict()
    assert _ids(next(iter(moved))) == _ids(next(drawn))
