"""data/sample_seeds.py and the DistributedLoader around it: each sample's random draws depend
only on (seed, epoch, index), in the main process and in DataLoader workers, and reading data
never moves the training RNG.  In-process: DataLoader workers are real processes, no group."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

from distrain.data.sample_seeds import EpochKeyedBatches, SeededSamples, sample_seed
from distrain.data.sampler import DistributedLoader, GlobalBatchSampler


class Augmented(Dataset):
    """Each read draws from torch, random and numpy, like a torchvision pipeline with extras."""

    classes = ["a", "b"]

    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(
            [float(i), torch.rand(()).item(), random.random(), float(np.random.rand())]
        )


def loader(rank: int = 0, world: int = 1, batch: int = 4, **kwargs: object) -> DistributedLoader:
    return DistributedLoader(
        Augmented(), GlobalBatchSampler(24, batch, rank=rank, world_size=world, seed=3), **kwargs
    )  # type: ignore[arg-type]


def epochs(ld: DistributedLoader, n: int = 2) -> torch.Tensor:
    return torch.cat([torch.cat(list(ld)) for _ in range(n)])


def by_index(rows: torch.Tensor) -> dict[tuple[int, int], list[float]]:
    """(epoch, sample index) -> that sample's draws, for rows of two epochs in order."""
    half = len(rows) // 2
    return {
        (e, int(r[0])): r[1:].tolist()
        for e, part in enumerate((rows[:half], rows[half:]))
        for r in part
    }


def test_seed_is_a_function_of_seed_epoch_and_index_only() -> None:
    assert sample_seed(3, 1, 7) == sample_seed(3, 1, 7)
    assert (
        len(
            {sample_seed(3, 1, 7), sample_seed(3, 2, 7), sample_seed(3, 1, 8), sample_seed(4, 1, 7)}
        )
        == 4
    )
    assert 0 <= sample_seed(0, 0, 0) < 2**64


def test_same_draws_with_0_and_2_workers_and_persistent_workers() -> None:
    reference = epochs(loader())
    assert torch.equal(epochs(loader(num_workers=2)), reference)
    assert torch.equal(epochs(loader(num_workers=2, persistent_workers=True)), reference)


def test_same_draws_for_a_sample_on_another_world_size() -> None:
    one = by_index(epochs(loader(batch=4)))
    two = {
        **by_index(epochs(loader(rank=0, world=2, batch=2))),
        **by_index(epochs(loader(rank=1, world=2, batch=2))),
    }
    assert two == one


def test_epochs_draw_differently() -> None:
    draws = by_index(epochs(loader()))
    assert draws[(0, 5)] != draws[(1, 5)]


def test_main_process_reading_leaves_the_training_rng_alone() -> None:
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    expected = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    list(loader())
    assert (
        torch.equal(torch.rand(3), expected[0])
        and random.random() == expected[1]
        and np.random.rand() == expected[2]
    )


def test_a_resumed_iterator_draws_what_the_uninterrupted_one_did() -> None:
    full = list(loader(num_workers=2))
    ld = loader(num_workers=2)
    ld.load_state_dict(
        {"epoch": 0, "step_in_epoch": 3, "global_batch_size": 4, "seed": 3, "seed_samples": True}
    )
    assert all(torch.equal(a, b) for a, b in zip(list(ld), full[3:], strict=True))


def test_without_seeding_workers_draw_differently_than_the_main_process() -> None:
    """The bug this module fixes, shown with seeding off: 0 and 2 workers disagree."""
    assert not torch.equal(
        epochs(loader(seed_samples=False)), epochs(loader(seed_samples=False, num_workers=2))
    )


def test_tensor_dataset_is_not_wrapped_and_attributes_reach_the_users_dataset() -> None:
    plain = DistributedLoader(TensorDataset(torch.arange(8.0)), GlobalBatchSampler(8, 2))
    assert not plain.seeds_samples and isinstance(plain.dataset, TensorDataset)
    wrapped = loader()
    assert (
        isinstance(wrapped.dataset, SeededSamples)
        and wrapped.dataset.classes == ["a", "b"]
        and len(wrapped.dataset) == 24
    )


def test_batched_getitems_datasets_are_seeded_per_batch() -> None:
    class Batched(Augmented):
        def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
            return [torch.tensor([float(i), torch.rand(()).item()]) for i in indices]

    ds = SeededSamples(Batched(), seed=1)
    assert [t.tolist() for t in ds.__getitems__([(0, 2), (0, 5)])] == [
        t.tolist() for t in ds.__getitems__([(0, 2), (0, 5)])
    ]


def test_keys_carry_the_sampler_epoch() -> None:
    sampler = GlobalBatchSampler(8, 2, seed=0)
    sampler.set_epoch(4)
    batches = list(EpochKeyedBatches(sampler))
    assert len(batches) == 4 and all(e == 4 for b in batches for e, _ in b)


@pytest.mark.parametrize(
    ("saved", "line"),
    [
        ({"seed": 9}, "seed 9 → 3"),
        ({"seed_samples": False}, "per-sample seeding off → on"),
    ],
)
def test_resume_with_another_seed_or_seeding_is_said_in_one_line(
    saved: dict, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ld = loader()
    ld.load_state_dict(
        {
            "epoch": 1,
            "step_in_epoch": 2,
            "global_batch_size": 4,
            "seed": 3,
            "seed_samples": True,
            **saved,
        }
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "distrain: loader: resumed with" in err and line in err
    ld.load_state_dict(ld.state_dict())
    assert capsys.readouterr().err == ""
