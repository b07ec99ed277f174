"""cluster/__init__.py: the documented detection order and detect_environment()'s validation."""

from __future__ import annotations

import sys

import pytest

from distrain.cluster import (
    DETECTION_ORDER,
    HorovodEnvironment,
    KubeflowEnvironment,
    LegacyLaunchEnvironment,
    LSFEnvironment,
    MPICHEnvironment,
    OpenMPIEnvironment,
    SingleProcessEnvironment,
    SLURMEnvironment,
    SpawnEnvironment,
    TorchElasticEnvironment,
    detect_environment,
)
from distrain.cluster.base import ClusterError

SLURM = {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
         "SLURM_NNODES": "1", "SLURM_NTASKS_PER_NODE": "4", "SLURM_JOB_NAME": "job"}  # fmt: skip
OMPI = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
PMI = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}
HOROVOD = {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"}
ELASTIC = {
    "RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "1",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}
JSRUN = {
    "JSM_NAMESPACE_RANK": "1",
    "JSM_NAMESPACE_SIZE": "2",
    "JSM_NAMESPACE_LOCAL_RANK": "1",
    "LSB_JOBID": "42",
}
POD = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456",
       "KUBERNETES_SERVICE_HOST": "10.96.0.1"}  # fmt: skip


def _set(monkeypatch: pytest.MonkeyPatch, *groups: dict[str, str]) -> None:
    for group in groups:
        for k, v in group.items():
            monkeypatch.setenv(k, v)


def test_detection_order_is_the_documented_one() -> None:
    assert DETECTION_ORDER == (
        LegacyLaunchEnvironment, SpawnEnvironment, TorchElasticEnvironment, LSFEnvironment,
                               OpenMPIEnvironment,
        MPICHEnvironment, HorovodEnvironment, SLURMEnvironment, KubeflowEnvironment,
        SingleProcessEnvironment)  # fmt: skip
    assert len({cls.name for cls in DETECTION_ORDER}) == 10


def test_nothing_set_is_a_single_process() -> None:
    assert isinstance(detect_environment(), SingleProcessEnvironment)


@pytest.mark.parametrize(
    ("groups", "expected"),
    [((SLURM,), SLURMEnvironment),
     ((SLURM, HOROVOD), HorovodEnvironment),  # horovodrun --gloo inside an allocation
     ((SLURM, PMI), MPICHEnvironment),
     ((SLURM, OMPI), OpenMPIEnvironment),  # mpirun inside sbatch: SLURM_PROCID=0 on every rank
     ((SLURM, OMPI, ELASTIC), TorchElasticEnvironment),
     ((ELASTIC, {"DISTRAIN_SPAWN": "1"}), SpawnEnvironment),
     ((JSRUN,), LSFEnvironment),
     ((JSRUN, OMPI), LSFEnvironment),  # jsrun sets OMPI_COMM_WORLD_* too, with its own values
     ((JSRUN, {**OMPI, "OMPI_COMM_WORLD_SIZE": "4"}),
      OpenMPIEnvironment),  # mpirun inside a jsrun task
     ((JSRUN, ELASTIC), TorchElasticEnvironment),  # torchrun inside a jsrun task
     ((POD,), KubeflowEnvironment),
     ((POD, {"LOCAL_RANK": "1"}), TorchElasticEnvironment),  # torchrun / distrain run in the pod
     ((POD, OMPI), OpenMPIEnvironment),
     ((POD, SLURM), SLURMEnvironment),
     ((POD, {"DISTRAIN_SPAWN": "1"}), SpawnEnvironment)],
)  # fmt: skip
def test_earlier_environments_win(
    monkeypatch: pytest.MonkeyPatch, groups: tuple[dict[str, str], ...], expected: type
) -> None:
    _set(monkeypatch, *groups)
    env = detect_environment()
    assert type(env) is expected


def test_the_legacy_launcher_wins_over_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, ELASTIC, {"DISTRAIN_SPAWN": "1"})
    sys.argv[:] = ["train.py", "--local-rank=1"]
    assert type(detect_environment()) is LegacyLaunchEnvironment
    assert sys.argv == ["train.py"]


def test_detected_values_are_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {**ELASTIC, "RANK": "2"})
    with pytest.raises(ClusterError, match=r"torchelastic: rank 2 outside \[0, 2\)"):
        detect_environment()


def test_torchrun_variables_outside_a_pod_are_not_kubeflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torchrun worker (LOCAL_RANK set) is torchelastic; the same four variables by hand outside
    Kubernetes stay a plain process, as before."""
    _set(monkeypatch, ELASTIC)
    assert type(detect_environment()) is TorchElasticEnvironment
    monkeypatch.delenv("LOCAL_RANK")
    assert type(detect_environment()) is SingleProcessEnvironment
