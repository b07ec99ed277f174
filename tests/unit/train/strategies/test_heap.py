"""train/strategies/heap.py: glibc's mmap threshold fixed once for a sharded model, a user's setting left alone."""

from __future__ import annotations

import pytest

from distrain.train.strategies import heap


def test_threshold_is_set_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(heap.USER_SETTING, raising=False)
    monkeypatch.setattr(heap, "_applied", False)
    if heap._libc() is None:
        pytest.skip("not glibc")
    assert heap.map_large_buffers() is True
    assert heap.map_large_buffers() is False  # already set: nothing more to do


def test_user_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(heap.USER_SETTING, "65536")
    monkeypatch.setattr(heap, "_applied", False)
    assert heap.map_large_buffers() is False and heap._applied is False


def test_no_glibc_no_change(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(heap.USER_SETTING, raising=False)
    monkeypatch.setattr(heap, "_applied", False)
    monkeypatch.setattr(heap, "_libc", lambda: None)
    assert heap.map_large_buffers() is False


@pytest.mark.usefixtures("writes_environ")  # torch's compile cache variable, set on first use
@pytest.mark.parametrize("asked", [False, True])
def test_sharding_changes_the_allocator_only_when_asked(
    asked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opt-in (DISTRAIN_MAP_LARGE_BUFFERS): a sharded model leaves glibc alone by default.

    A real one-rank gloo group and a real fully_shard; only the mallopt call itself is recorded
    instead of made, so the test process keeps its allocator.
    """
    import torch
    import torch.distributed as dist
    from torch import nn

    from distrain.train import strategies
    from distrain.train.strategies import fsdp

    calls: list[int] = []
    monkeypatch.setattr(fsdp, "map_large_buffers", lambda: calls.append(1) or True)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
        strategies.prepare(
            model, "fsdp", device=torch.device("cpu"), precision="fp32", distributed=True,
            num_nodes=1, map_buffers=asked,
        )  # fmt: skip
        assert strategies.is_sharded(model)
    finally:
        dist.destroy_process_group()
    assert calls == ([1] if asked else [])


def test_the_setting_is_off_unless_set() -> None:
    from distrain.settings import Settings

    assert Settings.read({}).map_large_buffers is False
    assert Settings.read({"DISTRAIN_MAP_LARGE_BUFFERS": "1"}).map_large_buffers is True
    assert Settings.read({"DISTRAIN_MAP_LARGE_BUFFERS": "off"}).map_large_buffers is False
