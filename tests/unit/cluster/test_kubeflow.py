"""cluster/kubeflow.py: a PyTorchJob pod running the script without torchrun (1 per pod)."""

from __future__ import annotations

import pytest

from distrain.cluster import KubeflowEnvironment
from distrain.cluster.base import ClusterError

POD = {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "RANK": "2", "WORLD_SIZE": "4",
       "KUBERNETES_SERVICE_HOST": "10.96.0.1"}  # fmt: skip


def _set(monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> None:
    for k, v in values.items():
        monkeypatch.setenv(k, v)


@pytest.mark.parametrize(
    "missing", ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "KUBERNETES_SERVICE_HOST"]
)
def test_detection_needs_the_operator_variables_in_a_pod(
    monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    _set(monkeypatch, {k: v for k, v in POD.items() if k != missing})
    assert KubeflowEnvironment.detect() is False
    monkeypatch.setenv(missing, POD[missing])
    assert KubeflowEnvironment.detect() is True


@pytest.mark.parametrize("torchrun_var", ["LOCAL_RANK", "TORCHELASTIC_RUN_ID"])
def test_not_detected_under_torchrun_in_the_pod(
    monkeypatch: pytest.MonkeyPatch, torchrun_var: str
) -> None:
    _set(monkeypatch, {**POD, torchrun_var: "0"})
    assert KubeflowEnvironment.detect() is False


def test_getters_one_process_per_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, POD)
    env = KubeflowEnvironment()
    assert (env.rank(), env.world_size(), env.local_rank(), env.local_world_size()) == (2, 4, 0, 1)
    assert (env.node_rank(), env.num_nodes()) == (2, 4)
    assert (env.master_addr(), env.master_port()) == ("job-master-0", 23456)
    env.validate()


def test_a_rank_outside_the_world_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {**POD, "RANK": "4"})
    with pytest.raises(ClusterError, match=r"kubeflow: rank 4 outside \[0, 4\)"):
        KubeflowEnvironment().validate()


@pytest.mark.parametrize(("per_pod", "refused"), [("1", False), ("auto", False), ("4", True)])
def test_nproc_per_node_above_one_needs_a_launcher(
    monkeypatch: pytest.MonkeyPatch, per_pod: str, refused: bool
) -> None:
    _set(monkeypatch, {**POD, "PET_NPROC_PER_NODE": per_pod})
    env = KubeflowEnvironment()
    if not refused:
        env.validate()
        return
    with pytest.raises(
        ClusterError, match="asks for 4 processes per pod .* run `distrain run train.py`"
    ):
        env.validate()
