"""data/sampler.py: GlobalBatchSampler's global-batch math and resume, ShardedEvalSampler's shards.

(DistributedLoader and its per-sample seeding: test_sample_seeds.py.)
"""

from __future__ import annotations

import pytest

from distrain.data.sampler import GlobalBatchSampler, ShardedEvalSampler, dataset_length


def _steps(sampler: GlobalBatchSampler) -> list[list[int]]:
    return list(iter(sampler))


def test_each_step_gives_each_rank_batch_size_distinct_samples() -> None:
    samplers = [GlobalBatchSampler(103, 4, rank=r, world_size=3, seed=1) for r in range(3)]
    per_rank = [_steps(s) for s in samplers]
    assert all(len(steps) == 103 // 12 == 8 for steps in per_rank)
    for step in range(8):
        batch = [i for steps in per_rank for i in steps[step]]
        assert all(len(steps[step]) == 4 for steps in per_rank)
        assert len(set(batch)) == 12
    everything = [i for steps in per_rank for b in steps for i in b]
    assert (
        len(everything) == len(set(everything)) == 96
    )  # the 7 left over are dropped, none repeated


@pytest.mark.parametrize("shuffle", [True, False])
def test_global_batches_are_the_same_on_any_world_size(shuffle: bool) -> None:
    """Step k's union over ranks is one global batch, whether 1×12, 2×6, 3×4 or 4×3 samples."""

    def global_batches(batch_size: int, world: int) -> list[list[int]]:
        ranks = [
            _steps(GlobalBatchSampler(50, batch_size, r, world, shuffle=shuffle, seed=7))
            for r in range(world)
        ]
        return [[i for r in range(world) for i in ranks[r][k]] for k in range(len(ranks[0]))]

    reference = global_batches(12, 1)
    assert len(reference) == 4
    for batch_size, world in ((6, 2), (4, 3), (3, 4)):
        assert global_batches(batch_size, world) == reference


def test_without_shuffle_the_order_is_the_dataset_order() -> None:
    assert _steps(GlobalBatchSampler(10, 2, rank=1, world_size=2, shuffle=False)) == [
        [2, 3],
        [6, 7],
    ]


def test_rank_takes_the_rth_contiguous_slice_of_each_global_batch() -> None:
    order = [i for b in _steps(GlobalBatchSampler(24, 8, shuffle=True, seed=3)) for i in b]
    for rank in range(4):
        mine = _steps(GlobalBatchSampler(24, 2, rank=rank, world_size=4, seed=3))
        assert mine == [order[k * 8 + rank * 2 : k * 8 + rank * 2 + 2] for k in range(3)]


def test_epochs_reshuffle_deterministically_by_seed_plus_epoch() -> None:
    a, b = GlobalBatchSampler(64, 8, seed=10), GlobalBatchSampler(64, 8, seed=9)
    first = _steps(a)
    a.set_epoch(1)
    second = _steps(a)
    assert first != second
    b.set_epoch(2)
    assert _steps(b) == second  # seed 9 + epoch 2 == seed 10 + epoch 1
    a.set_epoch(0)
    assert _steps(a) == first


def test_the_short_last_global_batch_is_dropped() -> None:
    """10 samples, global batch 4 over 2 ranks: two steps, samples 8 and 9 never drawn."""
    steps = [
        _steps(GlobalBatchSampler(10, 2, rank=r, world_size=2, shuffle=False)) for r in range(2)
    ]
    assert [len(s) for s in steps] == [2, 2]
    assert sorted(i for s in steps for b in s for i in b) == list(range(8))


def test_resume_mid_epoch_continues_at_the_same_step() -> None:
    full = GlobalBatchSampler(100, 5, rank=1, world_size=2, seed=4)
    full.set_epoch(3)
    whole = _steps(full)
    resumed = GlobalBatchSampler(100, 5, rank=1, world_size=2, seed=4)
    resumed.set_epoch(3, start_step=6)
    assert len(resumed) == 10 - 6
    assert _steps(resumed) == whole[6:]


def test_resume_on_another_world_size_sees_the_same_remaining_samples() -> None:
    one = GlobalBatchSampler(60, 12, seed=2)
    one.set_epoch(1, start_step=2)
    remaining = {i for b in _steps(one) for i in b}
    three = [GlobalBatchSampler(60, 4, rank=r, world_size=3, seed=2) for r in range(3)]
    for s in three:
        s.set_epoch(1, start_step=2)
    assert {i for s in three for b in _steps(s) for i in b} == remaining


def test_lengths_and_global_batch_size() -> None:
    sampler = GlobalBatchSampler(1000, 16, rank=0, world_size=4)
    assert (sampler.global_batch_size, sampler.steps_per_epoch(), len(sampler)) == (64, 15, 15)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"dataset_len": 10, "batch_size": 0}, "batch_size must be >= 1"),
     ({"dataset_len": 0, "batch_size": 1}, "the dataset is empty"),
     ({"dataset_len": 10, "batch_size": 2, "drop_last": False}, "drop_last=False is not supported"),
     ({"dataset_len": 10, "batch_size": 4, "world_size": 3}, "fewer than one global batch of 12")],
)  # fmt: skip
def test_refused_configurations(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GlobalBatchSampler(**kwargs)


@pytest.mark.parametrize(("n", "world"), [(10, 3), (7, 7), (3, 5), (100, 8), (1, 1)])
def test_eval_shards_cover_every_sample_exactly_once(n: int, world: int) -> None:
    shards = [list(ShardedEvalSampler(n, r, world)) for r in range(world)]
    assert [i for shard in shards for i in shard] == list(
        range(n)
    )  # contiguous, in order, no padding
    sizes = [len(ShardedEvalSampler(n, r, world)) for r in range(world)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == n


def test_dataset_length_needs_a_sized_dataset() -> None:
    assert dataset_length([1, 2, 3]) == 3
    with pytest.raises(TypeError, match="map-style dataset with __len__"):
        dataset_length(iter([1, 2]))
