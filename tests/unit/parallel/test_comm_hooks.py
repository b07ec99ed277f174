"""parallel/comm_hooks.py: parsing `comm_hook=` specs and the one-bucket size; no process group."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from distrain.parallel import comm_hooks
from distrain.parallel.comm_hooks import one_bucket_mb, parse_hook
from distrain.process import patching


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("bf16", ("bf16", {})), (" FP16 ", ("fp16", {})),
     ("powersgd", ("powersgd", {"rank": 1, "start": 10})),
     ("powersgd:rank=4", ("powersgd", {"rank": 4, "start": 10})),
     ("powersgd:start=100,rank=2", ("powersgd", {"rank": 2, "start": 100}))],
)  # fmt: skip
def test_parse_hook(spec: str, expected: tuple[str, dict[str, int]]) -> None:
    assert parse_hook(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [("int8", "comm_hook must be one of bf16, fp16, powersgd"),
     ("zip", "comm_hook must be one of bf16, fp16, powersgd"),
     ("bf16:rank=2", "comm_hook 'bf16' takes no options"),
     ("powersgd:rank=x", "powersgd options are rank=N,start=N"),
     ("powersgd:depth=2", "powersgd options are rank=N,start=N"),
     ("powersgd:rank=0", "powersgd needs rank >= 1 and start >= 2"),
     ("powersgd:start=1", "powersgd needs rank >= 1 and start >= 2")],
)  # fmt: skip
def test_parse_hook_refuses(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_hook(spec)


def test_one_bucket_holds_every_trainable_gradient_plus_a_megabyte() -> None:
    model = nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 4, bias=False))
    model[1].weight.requires_grad_(False)
    assert one_bucket_mb(model) == pytest.approx((256 * 256 + 256) * 4 / 2**20 + 1.0)


def test_powersgd_hook_computes_the_transposed_product_the_fast_way() -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    comm_hooks._use_fast_low_rank_products()
    try:
        assert powerSGD_hook.torch.bmm is not torch.bmm
        assert powerSGD_hook.torch.linalg is torch.linalg
        m, p = torch.randn(3, 300, 200), torch.randn(3, 300, 2)
        q = torch.empty(3, 200, 2)
        powerSGD_hook.torch.bmm(m.transpose(1, 2), p, out=q)  # the hook's Q = Mᵀ·P, its buffer
        torch.testing.assert_close(q, torch.bmm(m.transpose(1, 2).contiguous(), p))
        torch.testing.assert_close(
            powerSGD_hook.torch.bmm(p, q.transpose(1, 2)), torch.bmm(p, q.transpose(1, 2))
        )
    finally:
        # the hook module is torch's, shared by every later test of this process
        patching.restore("comm_hooks")
    assert powerSGD_hook.torch is torch
