"""cluster/slurm.py: srun tasks (SLURM_PROCID/NTASKS/LOCALID/NODEID), host lists, master address."""

from __future__ import annotations

import pytest

from distrain.cluster import SLURMEnvironment, expand_nodelist
from distrain.cluster.base import ClusterError

TASK = {
    "SLURM_PROCID": "5",
    "SLURM_NTASKS": "8",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "2",
    "SLURM_JOB_NAME": "train",
}


def _set(monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> None:
    for k, v in values.items():
        monkeypatch.setenv(k, v)


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
     ("a1,b[2-3],c", ["a1", "b2", "b3", "c"]),
     ("gpu[1-2]-ib[0,1]", ["gpu1-ib0", "gpu1-ib1", "gpu2-ib0", "gpu2-ib1"]),
     ("n[8-10]", ["n8", "n9", "n10"]),
     ("host", ["host"]), ("", [])],
)  # fmt: skip
def test_expand_nodelist(nodelist: str, hosts: list[str]) -> None:
    assert expand_nodelist(nodelist) == hosts


def test_detected_inside_an_srun_task(monkeypatch: pytest.MonkeyPatch) -> None:
    assert SLURMEnvironment.detect() is False
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert SLURMEnvironment.detect() is False
    monkeypatch.setenv("SLURM_NTASKS", "1")
    assert SLURMEnvironment.detect() is True


@pytest.mark.parametrize("job_name", ["bash", "interactive"])
def test_not_detected_in_an_interactive_shell(
    monkeypatch: pytest.MonkeyPatch, job_name: str
) -> None:
    _set(monkeypatch, {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_NAME": job_name})
    assert SLURMEnvironment.detect() is False


def test_getters(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {**TASK, "SLURM_NNODES": "4", "SLURM_TASKS_PER_NODE": "2(x4)"})
    env = SLURMEnvironment()
    assert (env.rank(), env.world_size(), env.local_rank(), env.local_world_size()) == (5, 8, 1, 2)
    assert (env.node_rank(), env.num_nodes()) == (2, 4)
    env.validate()


def test_local_world_size_prefers_ntasks_per_node(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {**TASK, "SLURM_NTASKS_PER_NODE": "4", "SLURM_TASKS_PER_NODE": "2(x4)"})
    assert SLURMEnvironment().local_world_size() == 4


def test_local_world_size_from_the_node_list_without_task_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _set(monkeypatch, {**TASK, "SLURM_NODELIST": "n[1-4]"})
    env = SLURMEnvironment()
    assert (env.num_nodes(), env.local_world_size()) == (4, 2)


def test_master_is_the_first_host_across_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {**TASK, "SLURM_NNODES": "4", "SLURM_NODELIST": "node[07-09,11]",
                       "SLURM_STEP_NODELIST": "node[08-09]", "SLURM_JOB_ID": "123456"})  # fmt: skip
    env = SLURMEnvironment()
    assert env.hosts() == ["node08", "node09"]  # the step's nodes win over the job's
    assert env.master_addr() == "node08"
    assert env.master_port() == 15000 + 123456 % 20000


def test_master_is_loopback_on_one_node_and_environment_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _set(monkeypatch, {**TASK, "SLURM_NNODES": "1", "SLURM_NODELIST": "solo"})
    env = SLURMEnvironment()
    assert env.master_addr() == "127.0.0.1"
    _set(monkeypatch, {"MASTER_ADDR": "10.9.9.9", "MASTER_PORT": "29999"})
    assert (env.master_addr(), env.master_port()) == ("10.9.9.9", 29999)


def test_master_without_any_node_list_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {**TASK, "SLURM_NNODES": "2"})
    with pytest.raises(ClusterError, match="neither MASTER_ADDR nor SLURM_NODELIST"):
        SLURMEnvironment().master_addr()


def test_check_devices_names_the_sbatch_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {**TASK, "SLURM_NTASKS_PER_NODE": "2"})
    env = SLURMEnvironment()
    env.check_devices(2)
    env.check_devices(0)  # CPU job: nothing to match
    with pytest.raises(ClusterError, match="2 tasks per node but 4 GPUs.*--ntasks-per-node=4"):
        env.check_devices(4)


def test_a_task_of_a_multi_node_job_is_detected_with_its_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """detect_environment() picks SLURM; tasks per node come from SLURM_TASKS_PER_NODE's ``2(x4)``,
    the master is the job's first host (no step node list) on a port derived from the job id."""
    from distrain.cluster import detect_environment

    _set(monkeypatch,
         {**TASK, "SLURM_NNODES": "4", "SLURM_NODELIST": "node[07-09,11]", "SLURM_JOB_ID": "123456",
                       "SLURM_TASKS_PER_NODE": "2(x4)"})  # fmt: skip
    detected = detect_environment()
    assert isinstance(detected, SLURMEnvironment)
    assert (
        detected.rank(),
        detected.world_size(),
        detected.local_rank(),
        detected.local_world_size(),
    ) == (5, 8, 1, 2)
    assert (detected.node_rank(), detected.num_nodes()) == (2, 4)
    assert (detected.master_addr(), detected.master_port()) == ("node07", 15000 + 123456 % 20000)
    detected.check_devices(2)
    with pytest.raises(ClusterError, match="ntasks-per-node=4"):
        detected.check_devices(4)
