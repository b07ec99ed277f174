"""cluster/spawn.py: workers of distrain.spawn (DISTRAIN_SPAWN=1 plus RANK/WORLD_SIZE), one node."""

from __future__ import annotations

import pytest

from distrain.cluster import SpawnEnvironment


def test_detected_only_with_the_marker_set_to_1(monkeypatch: pytest.MonkeyPatch) -> None:
    assert SpawnEnvironment.detect() is False
    monkeypatch.setenv("DISTRAIN_SPAWN", "0")
    assert SpawnEnvironment.detect() is False
    monkeypatch.setenv("DISTRAIN_SPAWN", "1")
    assert SpawnEnvironment.detect() is True


def test_getters_read_rank_and_world_and_stay_on_one_node(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {
        "DISTRAIN_SPAWN": "1",
        "RANK": "2",
        "WORLD_SIZE": "3",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "40001",
    }.items():
        monkeypatch.setenv(k, v)
    env = SpawnEnvironment()
    # LOCAL_RANK unset: the rank is the local rank (spawn is single-node)
    assert (env.rank(), env.world_size(), env.local_rank(), env.local_world_size()) == (2, 3, 2, 3)
    assert (env.node_rank(), env.num_nodes()) == (0, 1)
    assert (env.master_addr(), env.master_port()) == ("127.0.0.1", 40001)
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert env.local_rank() == 0
