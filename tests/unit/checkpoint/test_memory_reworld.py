"""Which memory snapshots of another world size a rank may resume from (memory_tier/reworld.py),
and that they are dropped once the job no longer needs them."""

from __future__ import annotations

from pathlib import Path

import torch

from distrain.checkpoint.memory_tier.files import listed, write_snapshot
from distrain.checkpoint.memory_tier.reworld import drop, newest, other_worlds


def _save(folder: Path, rank: int, step: int, world: int, replicated: bool | None = True) -> str:
    folder.mkdir(exist_ok=True)
    meta: dict[str, object] = {"world_size": world}
    if replicated is not None:  # a record written before the field existed has none
        meta["replicated"] = replicated
    state = {"format": 1, "step": step}
    return write_snapshot(str(folder), rank, step, lambda f: torch.save(state, f), meta)


def test_own_and_peer_copies_of_another_world_are_found_by_step_and_world(tmp_path: Path) -> None:
    own, peer = tmp_path / "own", tmp_path / "peer"
    a = _save(own, 1, 6, world=2)
    b = _save(peer, 0, 6, world=2)
    _save(own, 0, 7, world=1)  # this world's: the ordinary path's
    c = _save(own, 1, 5, world=2)
    found, sharded = other_worlds([str(own), str(peer)], world=1)
    assert found == {(6, 2): {1: a, 0: b}, (5, 2): {1: c}} and sharded == 0
    assert newest([found, {}]) == (6, 2)
    assert newest([{}, {}]) is None


def test_sharded_and_unlabelled_snapshots_are_not_moved(tmp_path: Path) -> None:
    own = tmp_path / "own"
    _save(own, 0, 4, world=2, replicated=False)
    _save(own, 1, 4, world=2, replicated=None)
    found, sharded = other_worlds([str(own)], world=1)
    assert found == {} and sharded == 2


def test_drop_removes_other_worlds_only_records_first(tmp_path: Path) -> None:
    own, peer = tmp_path / "own", tmp_path / "peer"
    _save(own, 0, 3, world=2)
    _save(peer, 1, 3, world=2)
    kept = _save(own, 0, 9, world=1)
    drop([str(own), str(peer)], world=1)
    assert listed(str(own)) == {0: {9: kept}} and listed(str(peer)) == {}
    assert sorted(p.name for p in own.iterdir()) == ["r00000-s00000009.json", Path(kept).name]
    assert list(peer.iterdir()) == []
