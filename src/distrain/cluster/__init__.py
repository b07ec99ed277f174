"""Launcher detection: who started this process, in a documented order.

The first environment whose ``detect()`` is true wins:

1. ``torch.distributed.launch`` (``--local-rank=N`` / ``--local_rank=N`` on argv, stripped)
2. ``distrain.spawn`` (torch.multiprocessing.spawn with distrain's env contract)
3. torchrun / TorchElastic / ``distrain run`` (TORCHELASTIC_RUN_ID or RANK+WORLD_SIZE+LOCAL_RANK)
4. Open MPI (OMPI_COMM_WORLD_*), covering ``mpirun`` and ``horovodrun``
5. MPICH / Intel MPI (PMI_RANK, PMI_SIZE)
6. ``horovodrun --gloo`` (HOROVOD_RANK, HOROVOD_SIZE; in MPI mode horovodrun is mpirun: 4/5)
7. SLURM ``srun`` (SLURM_PROCID, SLURM_NTASKS)
8. a single plain process

MPI and Horovod come before SLURM because ``mpirun``/``horovodrun`` inside a SLURM allocation
inherit the batch step's SLURM_PROCID=0 on every rank, while their own variables are the truth.
"""

from __future__ import annotations

from .base import ClusterEnvironment, ClusterError
from .horovod import HorovodEnvironment
from .legacy_launch import LegacyLaunchEnvironment, pop_local_rank_arg, strip_launcher_argv
from .mpi import MPICHEnvironment, OpenMPIEnvironment
from .single import SingleProcessEnvironment
from .slurm import SLURMEnvironment, expand_nodelist
from .spawn import SpawnEnvironment
from .torchelastic import TorchElasticEnvironment

DETECTION_ORDER: tuple[type[ClusterEnvironment], ...] = (
    LegacyLaunchEnvironment,
    SpawnEnvironment,
    TorchElasticEnvironment,
    OpenMPIEnvironment,
    MPICHEnvironment,
    HorovodEnvironment,
    SLURMEnvironment,
    SingleProcessEnvironment,
)


def detect_environment() -> ClusterEnvironment:
    """Return the first environment in DETECTION_ORDER that applies, validated."""
    for cls in DETECTION_ORDER:
        if cls.detect():
            env = cls()
            env.validate()
            return env
    raise AssertionError("SingleProcessEnvironment always applies")


__all__ = [
    "DETECTION_ORDER",
    "ClusterEnvironment",
    "ClusterError",
    "HorovodEnvironment",
    "LegacyLaunchEnvironment",
    "MPICHEnvironment",
    "OpenMPIEnvironment",
    "SLURMEnvironment",
    "SingleProcessEnvironment",
    "SpawnEnvironment",
    "TorchElasticEnvironment",
    "detect_environment",
    "expand_nodelist",
    "pop_local_rank_arg",
    "strip_launcher_argv",
]
