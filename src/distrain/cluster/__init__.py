"""Launcher detection: who started this process, in a documented order.

The first environment whose ``detect()`` is true wins:

1. ``torch.distributed.launch`` (``--local-rank=N`` / ``--local_rank=N`` on argv, stripped)
2. ``distrain.spawn`` (torch.multiprocessing.spawn with distrain's env contract)
3. torchrun / TorchElastic / ``distrain run`` (TORCHELASTIC_RUN_ID or RANK+WORLD_SIZE+LOCAL_RANK)
4. LSF ``jsrun`` (JSM_NAMESPACE_RANK, JSM_NAMESPACE_SIZE, LSB_JOBID)
5. Open MPI (OMPI_COMM_WORLD_*), covering ``mpirun`` and ``horovodrun``
6. MPICH / Intel MPI (PMI_RANK, PMI_SIZE)
7. ``horovodrun --gloo`` (HOROVOD_RANK, HOROVOD_SIZE; in MPI mode horovodrun is mpirun: 5/6)
8. SLURM ``srun`` (SLURM_PROCID, SLURM_NTASKS)
9. a Kubeflow PyTorchJob pod without torchrun (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, no
   LOCAL_RANK, in a pod: KUBERNETES_SERVICE_HOST)
10. a single plain process

MPI and Horovod come before SLURM because ``mpirun``/``horovodrun`` inside a SLURM allocation
inherit the batch step's SLURM_PROCID=0 on every rank, while their own variables are the truth.
LSF comes before Open MPI because jsrun sets OMPI_COMM_WORLD_* too (the same values) but only its
own variables say where the master is; an ``mpirun`` inside a jsrun task (another world size) is
left to Open MPI. torchrun inside a pod or a jsrun task sets LOCAL_RANK and wins at 3. Kubeflow is
tried last: its four variables are the ones a person sets by hand, so every launcher that sets
its own comes first.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from distrain.cluster.base import ClusterEnvironment, ClusterError
from distrain.cluster.legacy_launch import (
    LegacyLaunchEnvironment,
    pop_local_rank_arg,
    strip_launcher_argv,
)
from distrain.contract import SPAWN as SPAWN_MARKER

if TYPE_CHECKING:
    from distrain.cluster.horovod import HorovodEnvironment
    from distrain.cluster.kubeflow import KubeflowEnvironment
    from distrain.cluster.lsf import LSFEnvironment
    from distrain.cluster.mpi import MPICHEnvironment, OpenMPIEnvironment
    from distrain.cluster.single import SingleProcessEnvironment
    from distrain.cluster.slurm import SLURMEnvironment, expand_nodelist
    from distrain.cluster.spawn import SpawnEnvironment
    from distrain.cluster.torchelastic import TorchElasticEnvironment

#: (module, class) in the order asked; a module is imported when its turn comes, so a process
#: that torchrun started imports two detectors (see _MARKED), not ten
_ORDER = (
    ("legacy_launch", "LegacyLaunchEnvironment"),
    ("spawn", "SpawnEnvironment"),
    ("torchelastic", "TorchElasticEnvironment"),
    ("lsf", "LSFEnvironment"),
    ("mpi", "OpenMPIEnvironment"),
    ("mpi", "MPICHEnvironment"),
    ("horovod", "HorovodEnvironment"),
    ("slurm", "SLURMEnvironment"),
    ("kubeflow", "KubeflowEnvironment"),
    ("single", "SingleProcessEnvironment"),
)
_WHERE = {name: module for module, name in _ORDER} | {"expand_nodelist": "slurm"}
#: detectors that apply only where a variable of distrain's own contract is set: elsewhere (every
#: process torchrun or `distrain run` starts) their module is not imported at all
_MARKED = {"SpawnEnvironment": SPAWN_MARKER}


def _load(name: str) -> Any:
    return getattr(importlib.import_module(f"distrain.cluster.{_WHERE[name]}"), name)


def __getattr__(name: str) -> Any:
    """A detector class (or slurm's expand_nodelist), imported on first use (PEP 562)."""
    if name == "DETECTION_ORDER":
        return tuple(_load(cls) for _, cls in _ORDER)
    if name not in _WHERE:
        raise AttributeError(f"module 'distrain.cluster' has no attribute {name!r}")
    value = _load(name)
    globals()[name] = value
    return value


def detect_environment() -> ClusterEnvironment:
    """Return the first environment in DETECTION_ORDER that applies, validated."""
    for _, name in _ORDER:
        if name in _MARKED and _MARKED[name] not in os.environ:
            continue
        cls = _load(name)
        if cls.detect():
            env: ClusterEnvironment = cls()
            env.validate()
            return env
    raise AssertionError("SingleProcessEnvironment always applies")


__all__ = [
    "DETECTION_ORDER",
    "ClusterEnvironment",
    "ClusterError",
    "HorovodEnvironment",
    "KubeflowEnvironment",
    "LSFEnvironment",
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
