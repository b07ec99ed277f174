"""The unit layer's one fixture: every test starts from a clean, launcher-free process state.

The shell running pytest (a SLURM allocation, an mpirun, a CI runner) may carry launcher
variables; a unit test sets exactly the ones it is about (monkeypatch.setenv), and whatever the
code under test writes into os.environ is undone after each test.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from distrain.cluster import LegacyLaunchEnvironment

#: variables a launcher (or distrain run) sets, which the code under test reads
_NAMES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
    "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "KUBERNETES_SERVICE_HOST", "container",
    "SINGULARITY_CONTAINER", "APPTAINER_CONTAINER",
)  # fmt: skip
_PREFIXES = ("TORCHELASTIC_", "OMPI_COMM_WORLD_", "PMI_", "MPI_LOCAL", "SLURM_", "HOROVOD_", "DISTRAIN_", "PET_", "JSM_NAMESPACE_",
             "LSB_")  # fmt: skip


@pytest.fixture(autouse=True)
def _clean_launcher_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # the whole environment comes back afterwards: code under test (export_env) writes RANK & co.
    saved = dict(os.environ)
    for key in list(os.environ):
        if key in _NAMES or key.startswith(_PREFIXES):
            del os.environ[key]
    # a plain script's argv (the legacy launcher's --local-rank is stripped from sys.argv), and
    # the class-level memory of a stripped --local-rank forgotten
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.setattr(LegacyLaunchEnvironment, "_argv_local_rank", None)
    yield
    os.environ.clear()
    os.environ.update(saved)
