"""train/replicas.py: what prepare_model refuses under `distrain run --replicas` (no TorchFT needed)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from distrain.errors import DistrainError
from distrain.train.replicas import Replicas
from distrain.train.strategies import DDP, HSDP, resolve


def _unstarted() -> Replicas:
    # the refusals come before the Manager is touched: an object without __init__ is enough
    return Replicas.__new__(Replicas)


@pytest.mark.parametrize(
    ("strategy", "options", "said"),
    [
        ("hsdp", {}, "supports strategy='ddp' or 'fsdp'"),
        (HSDP(replicate=2), {}, "supports strategy='ddp' or 'fsdp'"),
        ("ddp", {"sync_bn": True}, "sync_bn=True"),
        (DDP(comm_hook="bf16"), {}, "comm_hook='bf16'"),
        ("ddp", {"bucket_cap_mb": 5}, "bucket_cap_mb=5"),
        ("ddp", {"activation_checkpointing": True}, "activation_checkpointing=True"),
    ],
)
def test_an_option_the_replica_path_would_not_apply_is_refused(strategy: object, options: dict, said: str) -> None:
    spec = resolve(strategy, **options)  # type: ignore[arg-type]
    with pytest.raises(DistrainError, match="--replicas") as err:
        _unstarted().prepare_model(nn.Linear(2, 2), torch.device("cpu"), spec)
    assert said in str(err.value)
    assert "\n" not in str(err.value)
