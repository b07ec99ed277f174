"""Random augmentation that resumes exactly: each sample's draws are seeded by (seed, epoch, index).

A ``RandomResizedCrop`` in ``__getitem__`` draws from the global RNGs of whichever process reads
the sample: a DataLoader worker, seeded once when it starts.  What a sample gets then depends on
which worker read it and how many samples that worker read before, so a resumed iterator, whose
workers start afresh mid-epoch, augments the rest of the epoch differently from an uninterrupted
run.  :class:`SeededSamples` seeds torch's CPU generator, ``random`` and numpy before every
sample from the loader's seed, the epoch and the sample's index in the dataset.  The same sample
in the same epoch is then augmented identically with any ``num_workers`` (0 included,
``persistent_workers`` too), on any number of processes, after any resume.

In the main process (``num_workers=0``) the training RNG states are saved before a batch and put
back after it, so reading data never changes the dropout or initialisation stream.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler, TensorDataset, get_worker_info

#: what :class:`SeededSamples` is indexed with: (epoch, index in the dataset)
SampleKey = tuple[int, int]


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A 64-bit seed for one sample of one epoch (a hash: nearby keys get unrelated streams)."""
    digest = hashlib.blake2b(f"{seed}/{epoch}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def seed_everything_for(value: int) -> None:
    """Seed torch's CPU generator, ``random`` and numpy's global RNG with `value`."""
    torch.default_generator.manual_seed(value)
    random.seed(value)
    np.random.seed(value & 0xFFFF_FFFF)


def draws_nothing(dataset: Any) -> bool:
    """True for datasets whose samples are plain lookups (TensorDataset): no seeding needed."""
    return type(dataset) is TensorDataset


class SeededSamples(Dataset):
    """`dataset` indexed by (epoch, index), with every sample's RNG seeded before it is read."""

    def __init__(self, dataset: Any, seed: int) -> None:
        self.dataset = dataset
        self.seed = seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: SampleKey) -> Any:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: Sequence[SampleKey]) -> list[Any]:
        """One batch (DataLoader's batched fetch): each sample read right after its seeding."""
        saved = (
            _rng_states() if get_worker_info() is None else None
        )  # main process: keep its stream
        try:
            batched = getattr(self.dataset, "__getitems__", None)
            if (
                batched
            ):  # the dataset reads a batch at once: one seed for the batch, from its first sample
                seed_everything_for(sample_seed(self.seed, *keys[0]))
                return list(batched([index for _, index in keys]))
            out = []
            for epoch, index in keys:
                seed_everything_for(sample_seed(self.seed, epoch, index))
                out.append(self.dataset[index])
            return out
        finally:
            if saved is not None:
                _set_rng_states(saved)

    def __getattr__(self, name: str) -> Any:
        # loader.dataset.classes and friends still reach the user's dataset
        if name == "dataset" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


class EpochKeyedBatches(Sampler[list[SampleKey]]):
    """The batches of `batch_sampler`, each index paired with the sampler's current epoch."""

    def __init__(self, batch_sampler: Any) -> None:
        self.batch_sampler = batch_sampler

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[list[SampleKey]]:
        epoch = self.batch_sampler.epoch
        for batch in self.batch_sampler:
            yield [(epoch, index) for index in batch]


def _rng_states() -> tuple[torch.Tensor, Any, Any]:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def _set_rng_states(states: tuple[torch.Tensor, Any, Any]) -> None:
    torch.set_rng_state(states[0])
    random.setstate(states[1])
    np.random.set_state(states[2])
