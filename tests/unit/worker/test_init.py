"""worker/init.py: init()'s device (explicit, DISTRAIN_DEVICE, local GPU, CPU) and backend."""

from __future__ import annotations

import pytest
import torch

from distrain.cluster import ClusterError, SingleProcessEnvironment
from distrain.errors import DistrainError, UsageError
from distrain.settings import Settings
from distrain.worker import init as init_module


class LocalRank(SingleProcessEnvironment):
    """A single-process environment with a chosen local rank."""

    def __init__(self, local_rank: int) -> None:
        self._local = local_rank

    def local_rank(self) -> int:
        return self._local


def test_explicit_device_wins_and_a_bare_cuda_gets_the_local_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DISTRAIN_DEVICE", "cpu")
    assert init_module._pick_device(LocalRank(2), "cuda") == torch.device("cuda", 2)
    assert init_module._pick_device(LocalRank(2), "cuda:0") == torch.device("cuda", 0)


def test_distrain_device_overrides_the_automatic_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTRAIN_DEVICE", "cuda")
    assert init_module._pick_device(LocalRank(1), Settings.read().device) == torch.device("cuda", 1)
    monkeypatch.setenv("DISTRAIN_DEVICE", "cpu")
    assert init_module._pick_device(LocalRank(1), Settings.read().device) == torch.device("cpu")


def test_without_gpus_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert init_module._pick_device(LocalRank(0), None) == torch.device("cpu")


def test_with_gpus_the_local_ranks_or_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert init_module._pick_device(LocalRank(1), None) == torch.device("cuda", 1)
    with pytest.raises(
        DistrainError,
        match=r"local rank 2 but only 2 GPU\(s\) visible \(CUDA_VISIBLE_DEVICES=4,5\)",
    ):
        init_module._pick_device(
            LocalRank(2), None, Settings.read({"CUDA_VISIBLE_DEVICES": "4,5"}).visible_devices
        )


def test_default_backend_follows_the_device() -> None:
    assert init_module._default_backend(torch.device("cuda", 0)) == "nccl"
    assert init_module._default_backend(torch.device("cpu")) == "gloo"


@pytest.mark.parametrize(
    "err", [ClusterError("LOCAL_WORLD_SIZE is not set"), UsageError("bad value")]
)
def test_exit_on_error_leaves_cluster_and_usage_errors_raised(
    monkeypatch: pytest.MonkeyPatch, err: DistrainError, writes_environ: None
) -> None:
    """Both are DistrainErrors, but not init's set-up errors: raised, not turned into exit 1."""

    def broken(*_: object) -> int:
        raise err

    monkeypatch.setattr(
        init_module, "current", lambda: None
    )  # an earlier in-process test may have left a Context
    monkeypatch.setattr(init_module, "detect_environment", SingleProcessEnvironment)
    monkeypatch.setattr(init_module, "choose_threads", broken)
    with pytest.raises(type(err), match=str(err)):
        init_module.init(device="cpu", exit_on_error=True)
