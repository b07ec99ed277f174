"""cluster/lsf.py: jsrun tasks (JSM_NAMESPACE_*), LSF's host lists, master address and port."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrain.cluster import LSFEnvironment
from distrain.cluster.base import ClusterError
from distrain.cluster.lsf import lsf_hosts

TASK = {"JSM_NAMESPACE_RANK": "5", "JSM_NAMESPACE_SIZE": "8", "JSM_NAMESPACE_LOCAL_RANK": "1",
        "JSM_NAMESPACE_LOCAL_SIZE": "2", "LSB_JOBID": "123456"}  # fmt: skip


def _set(monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> None:
    for k, v in values.items():
        monkeypatch.setenv(k, v)


@pytest.mark.parametrize("missing", ["JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "LSB_JOBID"])
def test_detected_only_with_rank_size_and_job(
    monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    _set(monkeypatch, {k: v for k, v in TASK.items() if k != missing})
    assert LSFEnvironment.detect() is False
    monkeypatch.setenv(missing, TASK[missing])
    assert LSFEnvironment.detect() is True


def test_not_detected_under_an_mpirun_of_another_size(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {**TASK, "OMPI_COMM_WORLD_SIZE": "8"})
    assert LSFEnvironment.detect() is True  # jsrun's own Open MPI variables agree
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert LSFEnvironment.detect() is False


def test_getters(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, TASK)
    env = LSFEnvironment()
    assert (env.rank(), env.world_size(), env.local_rank(), env.local_world_size()) == (5, 8, 1, 2)
    assert (env.node_rank(), env.num_nodes()) == (2, 4)
    env.validate()


def test_local_values_default_to_one_node(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {"JSM_NAMESPACE_RANK": "0", "JSM_NAMESPACE_SIZE": "1", "LSB_JOBID": "7"})
    env = LSFEnvironment()
    assert (env.local_rank(), env.local_world_size(), env.num_nodes()) == (0, 1, 1)


def test_hosts_from_mcpu_hosts_drop_the_launch_node(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(
        monkeypatch, {**TASK, "LSB_MCPU_HOSTS": "batch3 1 a01n01 42 a01n02 42 a01n03 42 a01n04 42"}
    )
    assert lsf_hosts() == ["batch3", "a01n01", "a01n02", "a01n03", "a01n04"]
    env = LSFEnvironment()
    assert env.compute_hosts() == ["a01n01", "a01n02", "a01n03", "a01n04"]
    assert env.master_addr() == "a01n01"
    assert env.master_port() == 15000 + 123456 % 20000


def test_hosts_without_a_launch_node_keep_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {**TASK, "LSB_MCPU_HOSTS": "n1 2 n2 2 n3 2 n4 2"})
    assert LSFEnvironment().master_addr() == "n1"


def test_the_host_file_wins_and_lists_a_host_per_slot(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("login1\n" + "".join(f"c{n}\nc{n}\n" for n in range(1, 5)))
    _set(monkeypatch, {**TASK, "LSB_DJOB_HOSTFILE": str(hostfile), "LSB_MCPU_HOSTS": "other 1 x 2"})
    assert lsf_hosts() == ["login1", "c1", "c2", "c3", "c4"]
    assert LSFEnvironment().master_addr() == "c1"


def test_an_unreadable_host_file_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _set(monkeypatch, {**TASK, "LSB_DJOB_HOSTFILE": str(tmp_path / "gone")})
    with pytest.raises(ClusterError, match="lsf: cannot read LSB_DJOB_HOSTFILE=.*gone"):
        LSFEnvironment().master_addr()


def test_master_is_loopback_on_one_node_and_environment_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _set(
        monkeypatch, {**TASK, "JSM_NAMESPACE_LOCAL_SIZE": "8", "LSB_MCPU_HOSTS": "batch1 1 solo 8"}
    )
    env = LSFEnvironment()
    assert env.master_addr() == "127.0.0.1"
    _set(monkeypatch, {"MASTER_ADDR": "10.9.9.9", "MASTER_PORT": "29999"})
    assert (env.master_addr(), env.master_port()) == ("10.9.9.9", 29999)


def test_several_nodes_without_a_host_list_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, TASK)
    with pytest.raises(
        ClusterError, match="lsf: set MASTER_ADDR; neither LSB_DJOB_HOSTFILE nor LSB_MCPU_HOSTS"
    ):
        LSFEnvironment().master_addr()


def test_export_env_gives_torch_the_env_contract(
    monkeypatch: pytest.MonkeyPatch, writes_environ: None
) -> None:
    import os

    _set(monkeypatch, {**TASK, "LSB_MCPU_HOSTS": "batch3 1 a 2 b 2 c 2 d 2"})
    LSFEnvironment().export_env()
    assert {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                       "MASTER_PORT")} == {
        "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "a",
        "MASTER_PORT": str(15000 + 123456 % 20000)}  # fmt: skip
