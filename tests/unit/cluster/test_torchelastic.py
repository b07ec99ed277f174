"""cluster/torchelastic.py: torchrun / distrain run workers (RANK, GROUP_RANK, TORCHELASTIC_*)."""

from __future__ import annotations

import pytest

from distrain.cluster import TorchElasticEnvironment
from distrain.cluster.base import ClusterError

FULL = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "MASTER_ADDR": "node0",
    "MASTER_PORT": "29500",
}


def _set(monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> None:
    for k, v in values.items():
        monkeypatch.setenv(k, v)


def test_detected_by_run_id_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    assert TorchElasticEnvironment.detect() is False
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "abc")
    assert TorchElasticEnvironment.detect() is True


@pytest.mark.parametrize("missing", ["RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"])
def test_detection_without_run_id_needs_every_variable(
    monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    _set(monkeypatch, {k: v for k, v in FULL.items() if k != missing})
    assert TorchElasticEnvironment.detect() is False
    monkeypatch.setenv(missing, FULL[missing])
    assert TorchElasticEnvironment.detect() is True


def test_getters_read_the_agent_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {**FULL, "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "2", "GROUP_WORLD_SIZE": "4"})
    env = TorchElasticEnvironment()
    assert (env.rank(), env.world_size(), env.local_rank(), env.local_world_size()) == (5, 8, 1, 2)
    assert (env.node_rank(), env.num_nodes()) == (2, 4)
    assert (env.master_addr(), env.master_port()) == ("node0", 29500)


def test_local_world_and_nodes_fall_back_to_one_node(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    env = TorchElasticEnvironment()
    assert (env.local_world_size(), env.node_rank(), env.num_nodes()) == (4, 0, 1)


def test_store_is_external_only_when_the_agent_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    env = TorchElasticEnvironment()
    assert env.store_is_external() is False
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    assert env.store_is_external() is True
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")
    assert env.store_is_external() is False


def test_a_missing_local_rank_is_a_cluster_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "2"})
    with pytest.raises(ClusterError, match="LOCAL_RANK is not set"):
        TorchElasticEnvironment().local_rank()
