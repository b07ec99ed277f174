"""A Kubeflow PyTorchJob pod that runs the script itself, without torchrun: one process per pod."""

from __future__ import annotations

import os

from distrain.cluster.base import ClusterEnvironment, ClusterError, env_int

#: what the training operator sets in every pod of a PyTorchJob
_OPERATOR_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")


class KubeflowEnvironment(ClusterEnvironment):
    """`python train.py` as a PyTorchJob replica: RANK is the pod's index, WORLD_SIZE the pods'.

    torchrun (or `distrain run`) inside the pod sets LOCAL_RANK and TORCHELASTIC_RUN_ID, and is
    detected before this class; a shell that exports MASTER_ADDR/RANK/WORLD_SIZE by hand outside
    Kubernetes is not a pod (no KUBERNETES_SERVICE_HOST, which the kubelet sets in every pod).
    """

    name = "kubeflow"

    @classmethod
    def detect(cls) -> bool:
        """True in a Kubernetes pod with the operator's four variables and no torchrun ones."""
        if not all(k in os.environ for k in _OPERATOR_VARS):
            return False
        if "LOCAL_RANK" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ:
            return False
        return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))

    def rank(self) -> int:
        """RANK: the pod's index (Master 0, then the Workers)."""
        return env_int("RANK")

    def world_size(self) -> int:
        """WORLD_SIZE: the number of pods."""
        return env_int("WORLD_SIZE")

    def local_rank(self) -> int:
        """0: one process per pod."""
        return 0

    def local_world_size(self) -> int:
        """1: one process per pod."""
        return 1

    def master_addr(self) -> str:
        """MASTER_ADDR: the Master pod's service name."""
        return os.environ["MASTER_ADDR"]

    def validate(self) -> None:
        """Also refuse nprocPerNode > 1: the operator then counts processes this pod never starts"""
        super().validate()
        per_pod = os.environ.get("PET_NPROC_PER_NODE", "")
        if per_pod.isdigit() and int(per_pod) > 1:
            raise ClusterError(
                f"kubeflow: the PyTorchJob asks for {per_pod} processes per pod "
                "(nprocPerNode) but this pod "
                "started one; run `distrain run train.py` (or torchrun) as the container command, "
                "or set nprocPerNode: 1"
            )
