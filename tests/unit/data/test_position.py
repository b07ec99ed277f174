"""data/position.py and the loader's resume: a sample position that survives a world change.

An elastic job with a per-process batch comes back on another world size with another global
batch; the loaders of every rank go on from the next sample of the epoch's permutation.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from distrain.data.position import Position, change_line, continue_at, saved_position
from distrain.data.sampler import DistributedLoader, GlobalBatchSampler


def _loaders(n: int, batch_size: int, world: int, accumulation: int = 1) -> list[DistributedLoader]:
    data = TensorDataset(torch.arange(n))
    return [
        DistributedLoader(
            data, GlobalBatchSampler(n, batch_size, r, world, seed=5, accumulation=accumulation)
        )
        for r in range(world)
    ]


def _train(loaders: list[DistributedLoader], steps: int | None) -> list[int]:
    """Every rank's samples, `steps` optimizer steps long (None: to the epoch's end)."""
    its = [iter(ld) for ld in loaders]
    seen: list[int] = []
    done = 0
    while steps is None or done < steps:
        try:
            for it, ld in zip(its, loaders, strict=True):
                while True:  # the micro-batches of one step
                    (batch,) = next(it)
                    seen += batch.tolist()
                    if ld.step_boundary:
                        break
        except StopIteration:
            break
        done += 1
    return seen


def _permutation(n: int, epoch: int) -> list[int]:
    return torch.randperm(n, generator=torch.Generator().manual_seed(5 + epoch)).tolist()


@pytest.mark.parametrize(
    ("before", "after", "steps"),
    [((16, 3), (16, 2), 4), ((16, 2), (16, 3), 3), ((4, 1), (4, 2), 5), ((5, 2), (7, 3), 2)],
)
def test_across_a_world_change_no_sample_is_skipped_or_seen_twice(
    before: tuple[int, int], after: tuple[int, int], steps: int
) -> None:
    n = 250
    first = _loaders(n, *before)
    seen = _train(first, steps)
    second = _loaders(n, *after)
    for ld in second:
        ld.load_state_dict(first[0].state_dict())
    seen += _train(second, None)
    assert len(seen) == len(set(seen))
    assert seen == _permutation(n, 0)[: len(seen)]  # the epoch's own order, from where it was
    assert 0 <= n - len(seen) < after[0] * after[1]  # only a tail short of one global batch
    assert second[0].epoch == 1  # its epoch ended with the permutation's usable part


def test_the_step_format_of_older_checkpoints_resumes_at_its_sample_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    old = {"epoch": 0, "step_in_epoch": 26, "global_batch_size": 48, "seed": 5}
    ld = _loaders(2000, 16, 2)[0]
    ld.load_state_dict(old)
    assert (ld.epoch, ld.step_in_epoch, ld.sample_in_epoch) == (0, 26, 1248)
    assert capsys.readouterr().err.splitlines() == [
        "distrain: resumed at sample 1248 of epoch 0 with global batch 32 "
        "(was 48: the world changed 3 → 2)"
    ]
    assert _train([ld], 1) == _permutation(2000, 0)[1248:1264]  # rank 0's half of the next 32


def test_a_resume_on_the_same_world_says_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    first = _loaders(100, 4, 2)
    _train(first, 3)
    ld = _loaders(100, 4, 2)[0]
    ld.load_state_dict(first[0].state_dict())
    assert capsys.readouterr().err == "" and ld.sample_in_epoch == 24


def test_only_rank_0_says_it(capsys: pytest.CaptureFixture[str]) -> None:
    state = _loaders(100, 4, 2)[0].state_dict()
    _loaders(100, 4, 3)[1].load_state_dict(state)
    assert capsys.readouterr().err == ""


def test_a_rest_too_short_for_the_new_global_batch_starts_the_next_epoch() -> None:
    assert continue_at(Position(2, 9, 90), 100, 12) == Position(3, 0, 0)
    assert continue_at(Position(2, 9, 88), 100, 12) == Position(2, 9, 88)
    first = _loaders(100, 5, 1)
    _train(first, 18)  # 90 of 100 consumed; 10 left: a world of 3 × 5 cannot use them
    ld = _loaders(100, 5, 3)[0]
    ld.load_state_dict(first[0].state_dict())
    assert (ld.epoch, ld.sample_in_epoch) == (1, 0)


def test_saved_position_reads_both_formats() -> None:
    assert saved_position({"epoch": 1, "step_in_epoch": 3, "global_batch_size": 8}, 4) == Position(
        1, 3, 24
    )
    new = {"epoch": 1, "step_in_epoch": 3, "sample_in_epoch": 20, "global_batch_size": 4}
    assert saved_position(new, 8) == Position(1, 3, 20)


def test_the_line_for_a_kept_global_batch_and_for_another_batch_size() -> None:
    at = Position(0, 4, 192)
    kept = change_line({"global_batch_size": 48, "world_size": 3}, at, 48, 2, 2)
    assert kept == (
        "distrain: resumed at sample 192 of epoch 0 with global batch 48 (kept: the world "
        "changed 3 → 2; 2 micro-batch(es) of 12 per process and step)"
    )
    other = change_line({"global_batch_size": 48, "world_size": 2}, at, 32, 2, 1)
    assert other is not None and other.endswith("(was 48: batch_size changed)")


def test_a_dataset_of_another_length_is_refused() -> None:
    state = _loaders(100, 4, 2)[0].state_dict()
    with pytest.raises(ValueError, match="saved with a dataset of 100 samples, this one has 120"):
        _loaders(120, 4, 2)[0].load_state_dict(state)
