"""cluster/__init__.py: the documented detection order and detect_environment()'s validation."""

from __future__ import annotations

import sys

import pytest

from distrain.cluster import (
    DETECTION_ORDER,
    HorovodEnvironment,
    LegacyLaunchEnvironment,
    MPICHEnvironment,
    OpenMPIEnvironment,
    SingleProcessEnvironment,
    SLURMEnvironment,
    SpawnEnvironment,
    TorchElasticEnvironment,
    detect_environment,
)
from distrain.cluster.base import ClusterError

SLURM = {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NNODES": "1",
         "SLURM_NTASKS_PER_NODE": "4", "SLURM_JOB_NAME": "job"}  # fmt: skip
OMPI = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
PMI = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}
HOROVOD = {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"}
ELASTIC = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def _set(monkeypatch: pytest.MonkeyPatch, *groups: dict[str, str]) -> None:
    for group in groups:
        for k, v in group.items():
            monkeypatch.setenv(k, v)


def test_detection_order_is_the_documented_one() -> None:
    assert DETECTION_ORDER == (
        LegacyLaunchEnvironment, SpawnEnvironment, TorchElasticEnvironment, OpenMPIEnvironment,
        MPICHEnvironment, HorovodEnvironment, SLURMEnvironment, SingleProcessEnvironment)  # fmt: skip
    assert len({cls.name for cls in DETECTION_ORDER}) == 8


def test_nothing_set_is_a_single_process() -> None:
    assert isinstance(detect_environment(), SingleProcessEnvironment)


@pytest.mark.parametrize(
    ("groups", "expected"),
    [((SLURM,), SLURMEnvironment),
     ((SLURM, HOROVOD), HorovodEnvironment),  # horovodrun --gloo inside an allocation
     ((SLURM, PMI), MPICHEnvironment),
     ((SLURM, OMPI), OpenMPIEnvironment),  # mpirun inside sbatch: SLURM_PROCID=0 on every rank
     ((SLURM, OMPI, ELASTIC), TorchElasticEnvironment),
     ((ELASTIC, {"DISTRAIN_SPAWN": "1"}), SpawnEnvironment)],
)  # fmt: skip
def test_earlier_environments_win(monkeypatch: pytest.MonkeyPatch, groups: tuple[dict[str, str], ...], expected: type) -> None:
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
