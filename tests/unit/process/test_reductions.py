"""process/reductions.py: the Context's collectives without a process group: local values back."""

from __future__ import annotations

import pytest
import torch

from distrain.process.reductions import Reductions


class Plain(Reductions):
    """A Context stand-in without a process group."""

    world_size = 1
    device = torch.device("cpu")
    backend = None


def test_without_a_group_values_come_back_unchanged_as_new_tensors() -> None:
    ctx = Plain()
    x = torch.tensor([1.0, 2.0])
    out = ctx.all_reduce(x, op="mean")
    assert torch.equal(out, x) and out is not x
    assert ctx.all_reduce(3).item() == 3
    assert ctx.all_reduce(torch.ones(2, dtype=torch.bfloat16)).dtype == torch.float32
    assert ctx.gather_object({"a": 1}) == [{"a": 1}]
    assert ctx.broadcast_object("x") == "x"
    assert ctx.distributed is False
    ctx.barrier()


def test_an_unknown_op_is_refused_on_one_process_too() -> None:
    with pytest.raises(ValueError, match="op must be one of"):
        Plain().all_reduce(1.0, op="avg")
