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

A resume is a *sample* position in the epoch's permutation (data/position.py), so a job that
comes back on another world size, with another global batch, goes on at the next sample.  With
``accumulation`` > 1 each rank's slice of a global batch is handed out as that many
micro-batches (data/global_batch.py: a global batch kept fixed on any world size).

Evaluation uses :class:`ShardedEvalSampler`: contiguous, unpadded shards, so every sample is
counted exactly once (DistributedSampler pads with duplicates to equalise shard sizes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sized
from time import perf_counter
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from distrain.data import position
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
        accumulation: int = 1,
    ) -> None:
        if batch_size < 1 or accumulation < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size} (× {accumulation})")
        if dataset_len < 1:
            raise ValueError("the dataset is empty")
        if not drop_last:
            raise ValueError(
                "drop_last=False is not supported: padding the last global batch "
                "duplicates samples and an "
                "uneven split is averaged wrongly by DDP; the short last global batch "
                "is always dropped"
            )
        if dataset_len < batch_size * accumulation * world_size:
            raise ValueError(
                f"the dataset has {dataset_len} samples, fewer than one global batch of "
                f"{batch_size * accumulation * world_size} "
                f"(batch_size {batch_size} × {world_size} process(es)); use a smaller batch_size"
            )
        self.dataset_len = dataset_len
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        #: micro-batches of `batch_size` each rank takes per optimiser step
        self.accumulation = accumulation
        self.epoch = 0
        self.start_sample = 0  # samples of the current epoch's permutation consumed (resume)
        self.skip = 0  # micro-batches of the start step handed out already (a mid-step move)

    @property
    def global_batch_size(self) -> int:
        """Samples per optimiser step across all ranks."""
        return self.batch_size * self.accumulation * self.world_size

    def _order(self) -> list[int]:
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.dataset_len, generator=g).tolist()
        else:
            order = list(range(self.dataset_len))
        return order

    def steps_per_epoch(self) -> int:
        """Optimiser steps in a whole epoch at this global batch: full global batches only."""
        return self.dataset_len // self.global_batch_size

    def steps_left(self) -> int:
        """Optimiser steps from the start position to the end of the epoch (full ones only)."""
        return (self.dataset_len - self.start_sample) // self.global_batch_size

    def __len__(self) -> int:
        return max(0, self.steps_left() * self.accumulation - self.skip)

    def __iter__(self) -> Iterator[list[int]]:
        order, gbs, bs = self._order(), self.global_batch_size, self.batch_size
        for step in range(self.steps_left()):
            # this rank's slice of the step's global batch, in `accumulation` micro-batches
            mine = self.start_sample + step * gbs + self.rank * bs * self.accumulation
            for micro in range(self.skip if step == 0 else 0, self.accumulation):
                yield order[mine + micro * bs : mine + (micro + 1) * bs]

    def set_epoch(
        self, epoch: int, start_step: int = 0, start_sample: int | None = None, skip: int = 0
    ) -> None:
        """Select the epoch (reshuffles) and where to start in it: a sample, or a step of this
        global batch; `skip` micro-batches of that step were handed out already."""
        self.epoch, self.skip = epoch, skip
        self.start_sample = (
            start_step * self.global_batch_size if start_sample is None else start_sample
        )

    @property
    def start_step(self) -> int:
        """Whole steps of this global batch before the start position (the older name)."""
        return self.start_sample // self.global_batch_size


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
        #: optimizer steps done in this epoch (on whatever world sizes it has seen)
        self.step_in_epoch = 0
        #: samples of this epoch's permutation the steps done consumed: the resume position
        self.sample_in_epoch = 0
        #: the micro-batch last handed out, counted in its step from 0 (global_batch=: with
        #: ``ctx.accumulate(model, loader.micro_step, loader.accumulation)``)
        self.micro_step = 0
        self._live = False  # an iterator of this loader is between two batches
        #: set by continue_from while live: the micro-batches of the step handed out already;
        #: the iterator drops what it prefetched and goes on from the new position
        self._moved: int | None = None

    #: called with the perf_counter() time a batch was asked for, once it is handed out
    #: (the step breakdown's data time: distrain.monitor.breakdown); None: not timed
    on_data: Callable[[float], None] | None = None
    #: rank 0's progress bar (distrain.monitor.progress.EpochBar); None: no bar
    bar: Any = None

    @property
    def accumulation(self) -> int:
        """Micro-batches per optimizer step on this world size (1 but with ``global_batch=``)."""
        return self.global_sampler.accumulation

    @property
    def step_boundary(self) -> bool:
        """True when the batch last handed out completes a global batch: step the optimizer."""
        return self.micro_step == self.accumulation - 1

    def _batches(self, skip: int = 0) -> Iterator[Any]:
        # torch's iterator from the current position (persistent workers: the same one, reset,
        # its prefetched batches dropped)
        sampler = self.global_sampler
        sampler.set_epoch(self.epoch, start_sample=self.sample_in_epoch, skip=skip)
        if self.generator is not None:  # worker seeds differ per epoch, same on resume
            self.generator.manual_seed(sampler.seed * 1_000_003 + self.epoch)
        if self.bar is not None:
            self.bar.start(
                self.epoch, self.step_in_epoch, self.step_in_epoch + sampler.steps_left()
            )
        return super().__iter__()

    # batches, not torch's iterator object
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        gbs = self.global_sampler.global_batch_size
        self._moved = None
        batches, on_data, bar = self._batches(), self.on_data, self.bar
        self._live = True
        try:
            handed = 0
            while True:
                if self._moved is not None:  # a heal moved this loader: go on from there
                    handed, self._moved = self._moved, None
                    batches = self._batches(skip=handed)
                asked = perf_counter() if on_data is not None else 0.0
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                if on_data is not None:
                    on_data(asked)
                self.micro_step = handed % self.accumulation
                handed += 1
                if self.step_boundary:  # the step in flight counts as done (replicas rely on it)
                    self.step_in_epoch += 1
                    self.sample_in_epoch += gbs
                    if bar is not None:
                        bar.advance()
                yield batch
        finally:  # also when the loop is left early: the bar never outlives its epoch
            self._live = False
            if bar is not None:
                bar.stop()
        self.epoch += 1
        self.step_in_epoch = self.sample_in_epoch = 0

    def continue_from(self, state: dict[str, Any]) -> None:
        """Take `state`, a loader's position at the start of the step in flight, as this step's
        start, the micro-batches this loader handed out in the step as the step's first ones.

        A replica group healed inside a step (worker/replicas/training.py) holds its step's batch
        already: that batch stands for the source group's, and a live iterator drops what it
        prefetched, so the next batch it hands out is the one the source group draws next.
        """
        handed = self.micro_step + 1 if self._live else 0
        self.load_state_dict(state)
        if handed == self.accumulation:  # the step in flight counts as done (as in __iter__)
            self.step_in_epoch += 1
            self.sample_in_epoch += self.global_sampler.global_batch_size
            handed = 0
        self._moved = handed if self._live else None

    def epoch_ended(self) -> bool:
        """True after the last batch of the epoch was handed out (before the next one starts)."""
        sampler = self.global_sampler
        return sampler.dataset_len - self.sample_in_epoch < sampler.global_batch_size

    def state_dict(self) -> dict[str, int]:
        """Position in the global sample order: epoch, the sample and step within it, the global
        batch and world size it was taken with (data/position.py).

        The end of an epoch is stored as the start of the next one, so a resume never replays
        an empty remainder of the finished epoch.
        """
        ended = self.epoch_ended()
        return {
            "epoch": self.epoch + 1 if ended else self.epoch,
            "step_in_epoch": 0 if ended else self.step_in_epoch,
            "sample_in_epoch": 0 if ended else self.sample_in_epoch,
            "global_batch_size": self.global_sampler.global_batch_size,
            "world_size": self.global_sampler.world_size,
            "dataset_len": self.global_sampler.dataset_len,
            "seed": self.global_sampler.seed,
            "seed_samples": self.seeds_samples,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from a saved position, at its next sample whatever the world size now.

        Saved with another global batch (an elastic job's world changed under a per-process
        ``batch_size``), the epoch goes on with this global batch from the next sample of the
        same permutation; rank 0 says so in one line.  States of the older step format load too.
        A dataset of another length is refused: its epochs are other permutations.
        """
        sampler = self.global_sampler
        gbs = sampler.global_batch_size
        saved_len = int(state.get("dataset_len", sampler.dataset_len))
        if saved_len != sampler.dataset_len:
            raise ValueError(
                f"saved with a dataset of {saved_len} samples, this one has "
                f"{sampler.dataset_len}: an epoch's order is a permutation of the whole dataset, "
                "so the saved position means nothing in it"
            )
        resumed = position.continue_at(
            position.saved_position(state, gbs), sampler.dataset_len, gbs
        )
        self.epoch, self.step_in_epoch = resumed.epoch, resumed.step_in_epoch
        self.sample_in_epoch = resumed.sample_in_epoch
        line = position.change_line(state, resumed, gbs, sampler.world_size, self.accumulation)
        if line is not None and sampler.rank == 0:
            _log.info(line)
        changed = []
        if "seed" in state and int(state["seed"]) != sampler.seed:
            changed.append(
                f"seed {state['seed']} → {sampler.seed} (another sample order from here on)"
            )
        if bool(state.get("seed_samples", False)) != self.seeds_samples:
            changed.append(
                f"per-sample seeding {'on' if state.get('seed_samples') else 'off'} → "
                f"{'on' if self.seeds_samples else 'off'} "
                "(other augmentation draws from here on)"
            )
        if changed and sampler.rank == 0:  # resumable, but not the run that was saved: say so
            _log.warning(f"distrain: loader: resumed with {'; '.join(changed)}")


def dataset_length(dataset: Any) -> int:
    """len(dataset), with a clear error for iterable datasets."""
    if not isinstance(dataset, Sized):
        raise TypeError("distributed loaders need a map-style dataset with __len__")
    return len(dataset)
