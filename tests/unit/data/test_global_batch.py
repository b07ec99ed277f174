"""data/global_batch.py: a global batch kept on any world size through accumulation."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from distrain.data.global_batch import split
from distrain.data.loaders import training_loader
from distrain.data.sampler import DistributedLoader


@pytest.mark.parametrize(
    ("world", "max_micro", "expected"),
    [(3, 16, (16, 1)), (2, 16, (12, 2)), (1, 16, (16, 3)), (4, 16, (12, 1)), (2, 5, (4, 6))],
)
def test_micro_batch_and_accumulation(
    world: int, max_micro: int, expected: tuple[int, int]
) -> None:
    micro, steps = split(48, world, max_micro)
    assert (micro, steps) == expected and micro * steps * world == 48


def test_a_world_that_does_not_divide_it_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError) as info:
        split(48, 5, 16)
    text = str(info.value)
    assert "\n" not in text
    assert "cannot be split evenly among 5 processes" in text
    assert "1, 2, 3, 4, 6, 8, 12, 16, 24, 48" in text
    assert "global_batch=240 fits every world size from 1 to 5" in text


def _loader(rank: int, world: int) -> DistributedLoader:
    return training_loader(
        TensorDataset(torch.arange(200)), 16, rank, world, torch.device("cpu"), 1,
        shuffle=True, drop_last=True, seed=2, seed_samples=None, global_batch=48,
    )  # fmt: skip


def _steps(world: int) -> list[list[int]]:
    """The global batches of one epoch, micro-batches of every rank put together."""
    per_rank = [[b.tolist() for (b,) in _loader(r, world)] for r in range(world)]
    acc = _loader(0, world).accumulation
    return [
        [i for rank in per_rank for micro in rank[k * acc : (k + 1) * acc] for i in micro]
        for k in range(len(per_rank[0]) // acc)
    ]


def test_the_global_batches_are_the_same_on_every_world_size() -> None:
    reference = _steps(1)
    assert len(reference) == 200 // 48 and all(len(b) == 48 for b in reference)
    for world in (2, 3, 4, 6):
        assert [sorted(b) for b in _steps(world)] == [sorted(b) for b in reference]


def test_a_resume_on_another_world_keeps_the_step_and_says_how(
    capsys: pytest.CaptureFixture[str],
) -> None:
    three = _loader(0, 3)
    it = iter(three)
    next(it), next(it)  # two steps of one micro-batch each on 3 processes
    two = _loader(0, 2)
    two.load_state_dict(three.state_dict())
    assert (two.step_in_epoch, two.sample_in_epoch, two.accumulation) == (2, 96, 2)
    assert capsys.readouterr().err.splitlines() == [
        "distrain: resumed at sample 96 of epoch 0 with global batch 48 (kept: the world "
        "changed 3 → 2; 2 micro-batch(es) of 12 per process and step)"
    ]
    micro = [next(iter(two)), None]
    assert two.micro_step == 0 and not two.step_boundary and micro[0] is not None
