"""cluster/horovod.py: `horovodrun --gloo` (HOROVOD_RANK/SIZE/LOCAL_*/CROSS_*)."""

from __future__ import annotations

import sys

import pytest

from distrain.cluster import HorovodEnvironment
from distrain.cluster.base import ClusterError


def test_detected_by_rank_and_size(monkeypatch: pytest.MonkeyPatch) -> None:
    assert HorovodEnvironment.detect() is False
    monkeypatch.setenv("HOROVOD_RANK", "0")
    assert HorovodEnvironment.detect() is False
    monkeypatch.setenv("HOROVOD_SIZE", "1")
    assert HorovodEnvironment.detect() is True


def test_getters_read_horovod_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {"HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1",
                 "HOROVOD_LOCAL_SIZE": "2",
                 "HOROVOD_CROSS_RANK": "1", "HOROVOD_CROSS_SIZE": "2"}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    env = HorovodEnvironment()
    assert (env.rank(), env.world_size(), env.local_rank(), env.local_world_size()) == (3, 4, 1, 2)
    assert (env.node_rank(), env.num_nodes()) == (1, 2)


def test_defaults_describe_one_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOROVOD_RANK", "1")
    monkeypatch.setenv("HOROVOD_SIZE", "2")
    env = HorovodEnvironment()
    assert (env.local_rank(), env.local_world_size(), env.node_rank(), env.num_nodes()) == (
        0,
        2,
        0,
        1,
    )


def test_without_horovod_the_error_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOROVOD_RANK", "1")
    monkeypatch.setenv("HOROVOD_SIZE", "2")
    monkeypatch.setitem(sys.modules, "horovod.torch", None)
    with pytest.raises(ClusterError, match="set MASTER_ADDR/MASTER_PORT"):
        HorovodEnvironment().master_port()
