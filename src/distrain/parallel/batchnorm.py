"""Cross-process batch norm: torch's SyncBatchNorm on CUDA, a gloo-capable one on CPU.

torch.nn.SyncBatchNorm refuses CPU tensors ("SyncBatchNorm expected input tensor to be on
GPU"), so CPU/gloo jobs get :class:`CPUSyncBatchNorm`, which computes the batch statistics over
every rank's samples (two all-reduces in forward, one in backward) with the same gradients as
one BatchNorm over the concatenated batch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm


def _channel_view(t: torch.Tensor, ndim: int) -> torch.Tensor:
    return t.reshape([1, -1] + [1] * (ndim - 2))


class _CrossProcessBatchNorm(torch.autograd.Function):
    """Batch norm whose statistics are reduced over every rank of `group`."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        running_mean: torch.Tensor | None,
        running_var: torch.Tensor | None,
        eps: float,
        momentum: float,
        group: Any,
    ) -> torch.Tensor:
        dims = [0] + list(range(2, x.dim()))
        channels = x.shape[1]
        count = torch.tensor([x.numel() // channels], dtype=x.dtype)
        # Two passes (mean first, then centred squares) keep float32 variance accurate.
        sums = torch.cat([x.sum(dims), count])
        dist.all_reduce(sums, group=group)
        total = sums[-1]
        mean = sums[:-1] / total
        centred = x - _channel_view(mean, x.dim())
        sq = (centred * centred).sum(dims)
        dist.all_reduce(sq, group=group)
        var = sq / total
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None and running_var is not None:
            n = float(total.item())
            unbiased = var * (n / max(n - 1.0, 1.0))
            running_mean.mul_(1 - momentum).add_(mean.detach(), alpha=momentum)
            running_var.mul_(1 - momentum).add_(unbiased.detach(), alpha=momentum)
        xhat = centred * _channel_view(invstd, x.dim())
        out = xhat
        if weight is not None:
            out = out * _channel_view(weight, x.dim())
        if bias is not None:
            out = out + _channel_view(bias, x.dim())
        ctx.save_for_backward(xhat, weight, invstd, total)
        ctx.group = group
        ctx.has_bias = bias is not None
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        xhat, weight, invstd, total = ctx.saved_tensors
        dims = [0] + list(range(2, grad_out.dim()))
        local_dy = grad_out.sum(dims)
        local_dy_xhat = (grad_out * xhat).sum(dims)
        both = torch.cat([local_dy, local_dy_xhat])
        dist.all_reduce(both, group=ctx.group)
        channels = local_dy.numel()
        mean_dy = both[:channels] / total
        mean_dy_xhat = both[channels:] / total
        scale = invstd if weight is None else invstd * weight
        nd = grad_out.dim()
        grad_in = _channel_view(scale, nd) * (
            grad_out - _channel_view(mean_dy, nd) - xhat * _channel_view(mean_dy_xhat, nd)
        )
        # Parameter gradients stay local: DDP averages them across ranks like any other.
        grad_w = local_dy_xhat if weight is not None else None
        grad_b = local_dy if ctx.has_bias else None
        return grad_in, grad_w, grad_b, None, None, None, None, None


class CPUSyncBatchNorm(_BatchNorm):
    """BatchNorm over the whole global batch on any device and backend (gloo included)."""

    def __init__(self, *args: Any, process_group: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Normalise with global batch statistics in training, running statistics in eval."""
        self._check_input_dim(input)
        distributed = (
            dist.is_available()
            and dist.is_initialized()
            and dist.get_world_size(self.process_group) > 1
        )
        if not (self.training and distributed):
            return _BatchNorm.forward(
                self, input
            )  # not super(): torch's SyncBatchNorm borrows this method under distrain run --cpu
        if self.momentum is None:
            raise ValueError("CPUSyncBatchNorm needs a numeric momentum")
        if self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
        return _CrossProcessBatchNorm.apply(
            input,
            self.weight,
            self.bias,
            self.running_mean if self.track_running_stats else None,
            self.running_var if self.track_running_stats else None,
            self.eps,
            self.momentum,
            self.process_group,
        )


def _convert(module: nn.Module, factory: Any) -> nn.Module:
    out = module
    if isinstance(module, _BatchNorm) and not isinstance(
        module, (nn.SyncBatchNorm, CPUSyncBatchNorm)
    ):
        out = factory(module)
        if module.affine:
            with torch.no_grad():
                out.weight = module.weight
                out.bias = module.bias
        out.running_mean = module.running_mean
        out.running_var = module.running_var
        out.num_batches_tracked = module.num_batches_tracked
        out.training = module.training
        if hasattr(module, "qconfig"):
            out.qconfig = module.qconfig
    for name, child in module.named_children():
        out.add_module(name, _convert(child, factory))
    return out


def convert_sync_batchnorm(
    module: nn.Module, device_type: str, process_group: Any = None
) -> nn.Module:
    """Replace every BatchNorm*d with a cross-process one suited to `device_type`.

    CUDA uses torch.nn.SyncBatchNorm (fast NCCL kernels); anything else uses CPUSyncBatchNorm.
    """
    if device_type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)

    def factory(bn: _BatchNorm) -> CPUSyncBatchNorm:
        return CPUSyncBatchNorm(
            bn.num_features,
            bn.eps,
            bn.momentum,
            bn.affine,
            bn.track_running_stats,
            process_group=process_group,
        )

    return _convert(module, factory)
