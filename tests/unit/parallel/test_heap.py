"""parallel/heap.py: glibc's mmap threshold fixed once for a sharded model, a user's value kept."""

from __future__ import annotations

import pytest

from distrain.parallel import heap


def test_threshold_is_set_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(heap.USER_SETTING, raising=False)
    monkeypatch.setattr(heap, "_applied", False)
    if heap._libc() is None:
        pytest.skip("not glibc")
    assert heap.map_large_buffers() is True
    assert heap.map_large_buffers() is False  # already set: nothing more to do


def test_user_setting_wins() -> None:
    from distrain.settings import Settings

    on = {"DISTRAIN_MAP_LARGE_BUFFERS": "1"}
    assert Settings.read(on).map_large_buffers is True
    assert Settings.read({**on, heap.USER_SETTING: "65536"}).map_large_buffers is False
    assert (
        Settings.read({heap.USER_SETTING: "65536"}, map_large_buffers=True).map_large_buffers
        is False
    )


def test_no_glibc_no_change(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(heap.USER_SETTING, raising=False)
    monkeypatch.setattr(heap, "_applied", False)
    monkeypatch.setattr(heap, "_libc", lambda: None)
    assert heap.map_large_buffers() is False


def test_the_setting_is_off_unless_set() -> None:
    from distrain.settings import Settings

    assert Settings.read({}).map_large_buffers is False
    assert Settings.read({"DISTRAIN_MAP_LARGE_BUFFERS": "1"}).map_large_buffers is True
    assert Settings.read({"DISTRAIN_MAP_LARGE_BUFFERS": "off"}).map_large_buffers is False
