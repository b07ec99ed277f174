"""train/checkpoint/state.py: who writes which replicated tensor, and each rank's own buffers."""

from __future__ import annotations

import torch
from torch import nn

from distrain.train.checkpoint.state import Registered, _balance


def test_buffers_are_written_by_rank_0_parameters_are_spread() -> None:
    tensors = {
        "w1": torch.zeros(100),
        "w2": torch.zeros(90),
        "bn.running_mean": torch.zeros(50),
        "bn.running_var": torch.zeros(50),
    }
    owner = _balance(tensors, 2, replicas_differ={"bn.running_mean", "bn.running_var"})
    assert owner["bn.running_mean"] == owner["bn.running_var"] == 0
    assert {owner["w1"], owner["w2"]} == {0, 1}  # both ranks write a share


def test_without_the_rule_a_buffer_may_land_on_rank_1() -> None:
    """The plain-BatchNorm bug: balanced like a parameter, a buffer is written by another rank."""
    tensors = {"w1": torch.zeros(100), "bn.running_mean": torch.zeros(50)}
    assert _balance(tensors, 2)["bn.running_mean"] == 1


def test_local_buffers_round_trip_in_place() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    reg = Registered.split({"model": model})
    model(torch.randn(8, 3))  # running statistics move
    saved = {k: {n: t.clone() for n, t in v.items()} for k, v in reg.local_buffers().items()}
    assert set(saved["model"]) == {"1.running_mean", "1.running_var", "1.num_batches_tracked"}
    model(torch.randn(8, 3))
    assert reg.load_local_buffers(saved) == []
    assert torch.equal(model[1].running_mean, saved["model"]["1.running_mean"])


def test_missing_own_buffers_are_named() -> None:
    reg = Registered.split({"model": nn.BatchNorm1d(2)})
    assert reg.load_local_buffers({"model": {}}) == [
        "model.running_mean",
        "model.running_var",
        "model.num_batches_tracked",
    ]
