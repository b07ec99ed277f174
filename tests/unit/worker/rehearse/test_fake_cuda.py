"""worker/rehearse/fake_cuda.py: N stand-in CUDA devices: indices, current device, seeds, events.

The module's functions are called directly with its state patched; torch.cuda itself is untouched.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from distrain.worker.rehearse import devices, fake_cuda


@pytest.fixture(autouse=True)
def four_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fake_cuda._State, "count", 4)
    monkeypatch.setattr(fake_cuda._State, "current", 0)
    monkeypatch.setattr(fake_cuda._State, "seeds", {})
    monkeypatch.setattr(devices, "MAPPED", Counter())
    monkeypatch.setattr(fake_cuda, "MAPPED", devices.MAPPED)


@pytest.mark.parametrize(
    ("device", "index"),
    [(None, 0), (2, 2), ("cuda:3", 3), ("cuda", 0), (torch.device("cuda", 1), 1), (-1, 0)],
)
def test_index_of_a_device(device: object, index: int) -> None:
    assert fake_cuda._index(device) == index


def test_an_index_past_the_stand_ins_fails_like_cuda() -> None:
    with pytest.raises(
        torch.AcceleratorError, match=r"invalid device ordinal \(device 4; 4 stand-in devices\)"
    ):
        fake_cuda.set_device(4)
    with pytest.raises(ValueError, match="Expected a cuda device"):
        fake_cuda._index(torch.device("cpu"))


def test_set_device_and_the_device_context() -> None:
    assert (fake_cuda.is_available(), fake_cuda.device_count()) == (True, 4)
    fake_cuda.set_device("cuda:2")
    assert fake_cuda.current_device() == 2
    with fake_cuda.device(3):
        assert fake_cuda.current_device() == 3
    assert fake_cuda.current_device() == 2
    assert fake_cuda.get_device_properties().index == 2
    assert fake_cuda.get_device_capability(1) == (8, 0)


def test_cuda_seeds_are_per_device_and_leave_the_cpu_stream_alone() -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    fake_cuda.manual_seed(123)
    assert torch.equal(torch.rand(3), expected)
    assert fake_cuda.initial_seed() == 123
    fake_cuda.set_device(1)
    assert fake_cuda.initial_seed() == 0
    fake_cuda.manual_seed_all(7)
    assert [fake_cuda._State.seeds[i] for i in range(4)] == [7, 7, 7, 7]


def test_rng_state_round_trips() -> None:
    fake_cuda.manual_seed_all(5)
    states = fake_cuda.get_rng_state_all()
    fake_cuda.manual_seed_all(9)
    fake_cuda.set_rng_state_all(states)
    assert fake_cuda._State.seeds == {0: 5, 1: 5, 2: 5, 3: 5}


def test_events_measure_wall_time_once_recorded() -> None:
    start, end = fake_cuda.Event(enable_timing=True), fake_cuda.Event(enable_timing=True)
    with pytest.raises(RuntimeError, match="Both events must be recorded"):
        start.elapsed_time(end)
    start.record()
    end.record()
    assert start.elapsed_time(end) >= 0.0
    assert fake_cuda.Stream().record_event().query() is True
