"""train/failure.py: which errors only say "a peer went away" (so they are not reported as the cause)."""

from __future__ import annotations

import pytest

from distrain.train.failure import is_peer_failure


@pytest.mark.parametrize(
    "text", ["[gloo] Connection reset by peer", "Broken pipe", "Connection closed by peer", "Socket Timeout", "Connection refused"]
)
def test_runtime_errors_about_lost_peers(text: str) -> None:
    assert is_peer_failure(RuntimeError(text)) is True


def test_other_errors_are_the_scripts_own() -> None:
    assert is_peer_failure(RuntimeError("CUDA out of memory")) is False
    assert is_peer_failure(ValueError("Connection reset by peer")) is False  # only RuntimeErrors count


def test_torch_distributed_network_errors_are_peer_failures() -> None:
    import torch.distributed as dist

    assert is_peer_failure(dist.DistNetworkError("anything")) is True
