"""Reductions across ranks for the Context: sums, means, gathers, broadcasts, barriers.

Each works with one plain process too (no process group): it returns the local value.
"""

from __future__ import annotations

from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")

#: the reductions all_reduce accepts ("mean" is a sum divided by the world size)
_OPS = {
    "sum": dist.ReduceOp.SUM,
    "mean": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
}


class Reductions:
    """The collective helpers of :class:`~distrain.worker.context.Context` (a mixin)."""

    world_size: int
    device: torch.device
    backend: str | None

    @property
    def distributed(self) -> bool:
        """True when a process group exists (any launcher, even with one process)."""
        return self.backend is not None

    def all_reduce(self, value: torch.Tensor | float | int, op: str = "sum") -> torch.Tensor:
        """Sum, mean, max or min of `value` over all ranks (a new tensor; inputs untouched)."""
        if op not in _OPS:  # checked on one process too, so a typo fails before it reaches N
            raise ValueError(f"op must be one of {', '.join(_OPS)}, got {op!r}")
        tensor = torch.as_tensor(value).detach().clone()
        if tensor.dtype in (torch.float16, torch.bfloat16):
            tensor = tensor.float()
        if not self.distributed:
            return tensor
        device = self.device if self.backend == "nccl" else torch.device("cpu")
        work = tensor.to(device)
        if op == "mean" and not work.is_floating_point():
            work = work.double()
        dist.all_reduce(work, op=_OPS[op])
        if op == "mean":
            work = work / self.world_size
        return work.to(tensor.device)

    def gather_object(self, obj: T) -> list[T]:
        """Every rank's picklable `obj`, in rank order, on every rank (trusted in-job data only)."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: T, src: int = 0) -> T:
        """Rank `src`'s `obj` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.distributed:
            dist.barrier()
