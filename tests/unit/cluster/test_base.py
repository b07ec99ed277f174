"""cluster/base.py: parsing launcher variables, the validation and export of every environment."""

from __future__ import annotations

import os

import pytest

from distrain.cluster.base import ClusterEnvironment, ClusterError, env_int


class Fixed(ClusterEnvironment):
    """An environment with given numbers, to test the base class's shared logic."""

    name = "fixed"

    def __init__(self, rank: int, world: int, local_rank: int, local_world: int) -> None:
        self._values = (rank, world, local_rank, local_world)

    @classmethod
    def detect(cls) -> bool:
        return True

    def rank(self) -> int:
        return self._values[0]

    def world_size(self) -> int:
        return self._values[1]

    def local_rank(self) -> int:
        return self._values[2]

    def local_world_size(self) -> int:
        return self._values[3]


def test_env_int_reads_integers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_INT", "42")
    assert env_int("X_INT") == 42


def test_env_int_default_applies_to_unset_and_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env_int("X_UNSET_INT", 7) == 7
    monkeypatch.setenv("X_INT", "")
    assert env_int("X_INT", 3) == 3


def test_env_int_names_the_missing_variable() -> None:
    with pytest.raises(ClusterError, match="environment variable X_UNSET_INT is not set"):
        env_int("X_UNSET_INT")


def test_env_int_names_the_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_INT", "two")
    with pytest.raises(ClusterError, match=r"X_INT='two' is not an integer"):
        env_int("X_INT", 0)


def test_default_node_rank_and_count_derive_from_local_world() -> None:
    env = Fixed(rank=5, world=8, local_rank=1, local_world=2)
    assert (env.node_rank(), env.num_nodes()) == (2, 4)


@pytest.mark.parametrize(
    ("values", "message"),
    [((0, 0, 0, 1), "world size 0 < 1"), ((4, 4, 0, 4), r"rank 4 outside \[0, 4\)"),
     ((-1, 4, 0, 4), r"rank -1 outside"), ((1, 4, 2, 2), r"local rank 2 outside \[0, 2\)")],
)  # fmt: skip
def test_validate_refuses_inconsistent_numbers(
    values: tuple[int, int, int, int], message: str
) -> None:
    with pytest.raises(ClusterError, match="fixed: " + message):
        Fixed(*values).validate()


def test_validate_accepts_a_consistent_layout() -> None:
    Fixed(3, 4, 1, 2).validate()


def test_restart_count_reads_torchelastic_restart_count(monkeypatch: pytest.MonkeyPatch) -> None:
    env = Fixed(0, 1, 0, 1)
    assert env.restart_count() == 0
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert env.restart_count() == 2


def test_export_env_writes_the_torchrun_variables(
    monkeypatch: pytest.MonkeyPatch, writes_environ: None
) -> None:
    monkeypatch.setenv("MASTER_ADDR", "10.1.2.3")
    monkeypatch.setenv("MASTER_PORT", "29511")
    Fixed(3, 4, 1, 2).export_env()
    assert {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                       "MASTER_ADDR", "MASTER_PORT")} == {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29511"}  # fmt: skip


def test_describe_lists_every_number() -> None:
    assert Fixed(5, 8, 1, 2).describe() == {
        "launcher": "fixed", "rank": 5, "world_size": 8, "local_rank": 1, "local_world_size": 2,
        "node_rank": 2, "num_nodes": 4}  # fmt: skip


def test_master_addr_defaults_to_loopback_and_port_is_required() -> None:
    env = Fixed(0, 2, 0, 2)
    assert env.master_addr() == "127.0.0.1"
    with pytest.raises(ClusterError, match="MASTER_PORT is not set"):
        env.master_port()
