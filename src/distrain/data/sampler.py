"""Distributed data: a resumable, world-size-aware batch sampler and exact evaluation shards.

Training order is defined globally, independent of the number of processes: each epoch draws
one permutation of the dataset (seeded by ``seed + epoch``), cuts it into *global* batches of
``batch_size × world_size`` samples, and rank r takes the r-th contiguous slice of every global
batch.  So the union of what the ranks see in step k is the same global batch on 1, 2 or 3
processes, and a job can resume on another world size at the same sample.

The last ``len(dataset) mod global batch`` samples of each epoch's permutation are dropped (a
different set every epoch when shuffling).  Padding them with duplicates (DistributedSampler)
trains on samples twice, and splitting a short batch unevenly would need every rank's loss
weighted by its share, while DDP averages ranks equally; dropping is the same on every world
size, so N ranks of batch B train exactly like one rank of batch N·B.

Evaluation uses :class:`ShardedEvalSampler`: contiguous, unpadded shards, so every sample is
counted exactly once (DistributedSampler pads with duplicates to equalise shard sizes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sized
from time import perf_counter
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from distrain.data.sample_seeds import EpochKeyedBatches, SeededSamples, draws_nothing
from distrain.log import get_logger

_log = get_logger("data")


class GlobalBatchSampler(Sampler[list[int]]):
    """Yields this rank's per-step index lists; resumable at any step, any world size.

    ``batch_size`` is per process.  Every step gives every rank exactly ``batch_size`` distinct
    samples; the remainder of the epoch that does not fill a global batch is dropped, the same
    way on every world size (``drop_last=False`` is refused: see the module docstring).
    """

    def __init__(
        self,
        dataset_len: int,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if dataset_len < 1:
            raise ValueError("the dataset is empty")
        if not drop_last:
            raise ValueError(
                "drop_last=False is not supported: padding the last global batch "
                "duplicates samples and an "
                "uneven split is averaged wrongly by DDP; the short last global batch "
                "is always dropped"
            )
        if dataset_len < batch_size * world_size:
            raise ValueError(
                f"the dataset has {dataset_len} samples, fewer than one global batch of "
                f"{batch_size * world_size} "
                f"(batch_size {batch_size} × {world_size} process(es)); use a smaller batch_size"
            )
        self.dataset_len = dataset_len
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self.start_step = 0  # steps of the current epoch already consumed (resume)

    @property
    def global_batch_size(self) -> int:
        """Samples per optimiser step across all ranks."""
        return self.batch_size * self.world_size

    def _order(self) -> list[int]:
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.dataset_len, generator=g).tolist()
        else:
            order = list(range(self.dataset_len))
        return order[: self.steps_per_epoch() * self.global_batch_size]

    def steps_per_epoch(self) -> int:
        """Optimiser steps in one epoch: full global batches only."""
        return self.dataset_len // self.global_batch_size

    def __len__(self) -> int:
        return self.steps_per_epoch() - self.start_step

    def __iter__(self) -> Iterator[list[int]]:
        order = self._order()
        gbs = self.global_batch_size
        for step in range(self.start_step, self.steps_per_epoch()):
            start = step * gbs + self.rank * self.batch_size
            yield order[start : start + self.batch_size]

    def set_epoch(self, epoch: int, start_step: int = 0) -> None:
        """Select the epoch (reshuffles) and the step inside it to start from."""
        self.epoch = epoch
        self.start_step = start_step


class ShardedEvalSampler(Sampler[int]):
    """Contiguous, unpadded shards: rank r gets indices [r·N/W, (r+1)·N/W); sizes may differ by 1"""

    def __init__(self, dataset_len: int, rank: int = 0, world_size: int = 1) -> None:
        self.start = dataset_len * rank // world_size
        self.stop = dataset_len * (rank + 1) // world_size

    def __len__(self) -> int:
        return self.stop - self.start

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.stop))


class DistributedLoader(DataLoader):
    """A DataLoader over :class:`GlobalBatchSampler` that advances the epoch by itself.

    Each full pass over the loader moves to the next epoch (no ``set_epoch`` call needed), and
    ``state_dict()`` / ``load_state_dict()`` capture the epoch and the step inside it, so a
    resumed job continues at the exact batch where it stopped.  Random draws in the dataset's
    ``__getitem__`` (augmentation) are seeded per sample (:mod:`.sample_seeds`), so they resume
    exactly too, with any ``num_workers``; ``seed_samples=False`` turns that off, and it is off
    by default for a TensorDataset, which draws nothing.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        batch_sampler: GlobalBatchSampler,
        seed_samples: bool | None = None,
        **kwargs: Any,
    ) -> None:
        # A private generator: DataLoader draws the workers' base seed from it when an iterator
        # starts, instead of from the global RNG, so a mid-epoch resume (which starts a new
        # iterator) leaves the training RNG stream exactly as in an uninterrupted run.
        kwargs.setdefault("generator", torch.Generator())
        if seed_samples is None:
            seed_samples = not draws_nothing(dataset)
        #: whether every sample's random draws are seeded by (seed, epoch, index):
        #: data/sample_seeds.py
        self.seeds_samples = seed_samples
        if seed_samples:
            super().__init__(
                SeededSamples(dataset, batch_sampler.seed),
                batch_sampler=EpochKeyedBatches(batch_sampler),
                **kwargs,
            )
        else:
            super().__init__(dataset, batch_sampler=batch_sampler, **kwargs)
        self.global_sampler = batch_sampler
        self.epoch = 0
        self.step_in_epoch = 0

    #: called with the perf_counter() time a batch was asked for, once it is handed out
    #: (the step breakdown's data time: distrain.monitor.breakdown); None: not timed
    on_data: Callable[[float], None] | None = None
    #: rank 0's progress bar (distrain.monitor.progress.EpochBar); None: no bar
    bar: Any = None

    # batches, not torch's iterator object
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        self.global_sampler.set_epoch(self.epoch, self.step_in_epoch)
        if self.generator is not None:  # worker seeds differ per epoch, same on resume
            self.generator.manual_seed(self.global_sampler.seed * 1_000_003 + self.epoch)
        batches, on_data, bar = super().__iter__(), self.on_data, self.bar
        if bar is not None:
            bar.start(self.epoch, self.step_in_epoch, self.global_sampler.steps_per_epoch())
        try:
            while True:
                asked = perf_counter() if on_data is not None else 0.0
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                if on_data is not None:
                    on_data(asked)
                self.step_in_epoch += 1
                if bar is not None:
                    bar.advance()
                yield batch
        finally:  # also when the loop is left early: the bar never outlives its epoch
            if bar is not None:
                bar.stop()
        self.epoch += 1
        self.step_in_epoch = 0

    def epoch_ended(self) -> bool:
        """True after the last batch of the epoch was handed out (before the next one starts)."""
        return self.step_in_epoch >= self.global_sampler.steps_per_epoch()

    def state_dict(self) -> dict[str, int]:
        """Position in the global sample order: epoch, step within it, and the global batch size.

        The end of an epoch is stored as the start of the next one, so a resume never replays
        an empty remainder of the finished epoch.
        """
        ended = self.epoch_ended()
        return {
            "epoch": self.epoch + 1 if ended else self.epoch,
            "step_in_epoch": 0 if ended else self.step_in_epoch,
            "global_batch_size": self.global_sampler.global_batch_size,
            "seed": self.global_sampler.seed,
            "seed_samples": self.seeds_samples,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from a saved position; the global batch size must match."""
        gbs = int(state.get("global_batch_size", self.global_sampler.global_batch_size))
        if gbs != self.global_sampler.global_batch_size:
            raise ValueError(
                f"saved global batch {gbs} != current {self.global_sampler.global_batch_size} "
                f"(batch_size {self.global_sampler.batch_size} × world "
                f"{self.global_sampler.world_size})"
            )
        self.epoch = int(state["epoch"])
        self.step_in_epoch = int(state["step_in_epoch"])
        changed = []
        if "seed" in state and int(state["seed"]) != self.global_sampler.seed:
            changed.append(
                f"seed {state['seed']} → {self.global_sampler.seed} (another sample "
                "order from here on)"
            )
        if bool(state.get("seed_samples", False)) != self.seeds_samples:
            changed.append(
                f"per-sample seeding {'on' if state.get('seed_samples') else 'off'} → "
                f"{'on' if self.seeds_samples else 'off'} "
                "(other augmentation draws from here on)"
            )
        if (
            changed and self.global_sampler.rank == 0
        ):  # resumable, but not the run that was saved: say so once
            _log.warning(f"distrain: loader: resumed with {'; '.join(changed)}")


def dataset_length(dataset: Any) -> int:
    """len(dataset), with a clear error for iterable datasets."""
    if not isinstance(dataset, Sized):
        raise TypeError("distributed loaders need a map-style dataset with __len__")
    return len(dataset)
