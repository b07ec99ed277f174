"""Replicated data parallelism: every rank holds the whole model; DDP all-reduces gradients.

A wrapper without a named comm hook reduces its first synced step as its rebuilt buckets will
(``align_first_reduction``), so a run resumed in a fresh wrapper stays bit for bit on 4+ ranks.
"""

# no `from __future__ import annotations`: DDP checks its comm hook's annotations are classes

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def wrap_ddp(
    model: nn.Module, device: torch.device, sync_bn: bool, comm_hook: str | None, **ddp_kwargs: Any
) -> nn.Module:
    """`model` (already on `device`) in DistributedDataParallel, with SyncBN and a hook if asked.

    DDP broadcasts rank 0's parameters and buffers at construction, so every rank starts from
    identical weights.
    """
    if sync_bn:  # SyncBatchNorm's module only for the option that asks for it
        from distrain.parallel.batchnorm import convert_sync_batchnorm

        model = convert_sync_batchnorm(model, device.type).to(device)
    if comm_hook is not None:
        from distrain.parallel.comm_hooks import one_bucket_mb, parse_hook

        if (
            parse_hook(comm_hook)[0] == "powersgd"
            and dist.get_backend(ddp_kwargs.get("process_group")) == "gloo"
        ):
            # gloo needs PowerSGD's all-reduces in one bucket (see comm_hooks); a larger cap asked
            # for stays
            ddp_kwargs["bucket_cap_mb"] = max(
                ddp_kwargs.get("bucket_cap_mb") or 25.0, one_bucket_mb(model)
            )
    if device.type == "cuda":
        ddp_kwargs.setdefault("device_ids", [device.index])
        ddp_kwargs.setdefault("output_device", device.index)
    wrapped = nn.parallel.DistributedDataParallel(model, **ddp_kwargs)
    if comm_hook is not None:
        from distrain.parallel.comm_hooks import register_comm_hook

        wrapped._distrain_comm_hook_state = register_comm_hook(wrapped, comm_hook)
    else:  # a resumed run's first step then adds gradients as the uninterrupted run's did
        wrapped._distrain_comm_hook_state = align_first_reduction(wrapped)
    return wrapped


def release_ddp(model: nn.parallel.DistributedDataParallel) -> None:
    """Drop DDP's references to its reducer and group, so they die with the process group.

    Done before interpreter teardown: freeing a Reducer there while gloo's threads wait for the
    GIL deadlocks the exit or aborts it ("terminate called without an active exception").
    """
    for attr in ("reducer", "logger", "process_group"):
        with contextlib.suppress(Exception):
            setattr(model, attr, None)
    state = getattr(model, "_distrain_comm_hook_state", None)
    if isinstance(state, _First):  # the first-step hook's state holds the group too
        state.group = None


# A DDP wrapper's first reduction made to add gradients as every later one does.
#
# Why a resumed run on 4+ ranks ended 1-2 ulp off an uninterrupted one: a fresh DDP wrapper
# (``static_graph`` or ``find_unused_parameters=False``, the defaults) all-reduces its first
# synced backward as ONE bucket holding every parameter in definition order; after that first
# backward the reducer rebuilds its buckets from the order gradients became ready, capped at
# 1 MiB for the first bucket and ``bucket_cap_mb`` after.  A gradient element therefore sits at
# another offset, in a buffer of another length, on the first step than on later ones.  gloo's
# ring all-reduce (and NCCL's) splits a buffer into per-rank segments and starts each segment's
# sum at another rank, so an element's offset decides the order its ranks' values are added in.
# With 2 ranks ``a + b == b + a``; with 4, ``((a + b) + c) + d`` and ``((c + d) + a) + b`` can
# differ in the last bit.  A running wrapper reduces step S in the rebuilt buckets, a wrapper
# built after a resume in the one bucket: that is the difference.
#
# ``align_first_reduction`` registers a hook that, on the wrapper's first synced backward,
# all-reduces the gradients packed exactly as the rebuild will pack them (the same assignment
# function, fed the ready order the reducer records, rank 0's as the reducer syncs it), and on
# every later step is plain averaging.  Any wrapper (first built or built after a resume) then
# adds every element in the same order on every step.


class _First:
    """The hook's state: the gradients' ready order until the first synced backward reduced."""

    def __init__(self, ddp: nn.parallel.DistributedDataParallel) -> None:
        self.group: Any = ddp.process_group  # None once released (release_ddp)
        self.world = dist.get_world_size(self.group)
        self.pending = True
        self.user: tuple[Callable[..., Any], object] | None = None  # the script's own hook
        self.ready: list[int] = []  # id() of each parameter as its gradient was accumulated
        config = ddp._bucket_config
        self.limits = [config.first_bucket_bytes_cap, config.bucket_bytes_cap]
        self.handles = [
            p.register_post_accumulate_grad_hook(self._accumulated)
            for p in ddp.module.parameters()
            if p.requires_grad
        ]

    def _accumulated(self, param: torch.Tensor) -> None:
        self.ready.append(id(param))

    def done(self) -> None:
        """The first synced backward is reduced: stop recording the ready order."""
        self.pending = False
        for handle in self.handles:
            handle.remove()
        self.handles, self.ready = [], []


def _average(state: _First, flat: torch.Tensor) -> torch.Tensor:
    # as DDP without a hook: scaled by 1/world while copied in, then summed
    flat.mul_(1.0 / state.world)
    dist.all_reduce(flat, group=state.group)
    return flat


def _reduce_as_rebuilt(state: _First, bucket: dist.GradBucket) -> torch.Tensor:
    params, grads = bucket.parameters(), bucket.gradients()
    position = {id(p): i for i, p in enumerate(params)}
    seen: list[int] = []
    taken: set[int] = set()
    for key in state.ready[::-1]:  # this backward's order: the last accumulation of each
        if key in position and key not in taken:
            taken.add(key)
            seen.append(position[key])
    order = torch.tensor(seen[::-1], dtype=torch.int64, device=bucket.buffer().device)
    dist.broadcast(order, group=state.group, group_src=0)  # the rebuild syncs rank 0's
    indices = [int(i) for i in order.tolist()]
    buckets, _ = dist._compute_bucket_assignment_by_size(
        [params[i] for i in indices], state.limits, [False] * len(indices), indices
    )
    for members in buckets:
        flat = _average(state, torch.cat([grads[i].reshape(-1) for i in members]))
        offset = 0
        for i in members:
            grads[i].copy_(flat[offset : offset + grads[i].numel()].view_as(grads[i]))
            offset += grads[i].numel()
    return bucket.buffer()


def _hook(state: _First, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    if state.user is not None:  # the script's hook decides every reduction, the first included
        hook, user_state = state.user
        return hook(user_state, bucket)
    if not state.pending:  # as DDP without a hook, overlapping the rest of the backward
        bucket.buffer().mul_(1.0 / state.world)
        work = dist.all_reduce(bucket.buffer(), group=state.group, async_op=True)
        assert work is not None
        return work.get_future().then(lambda fut: fut.value()[0])
    # the initial layout is one bucket per dtype/device; only the one-bucket case is the layout
    # the rebuild replaces and this mirrors, a split one reduces as it stands
    one = bucket.index() == 0 and bucket.is_last()
    complete = one and {id(p) for p in bucket.parameters()} <= set(state.ready)
    result = _reduce_as_rebuilt(state, bucket) if complete else _average(state, bucket.buffer())
    if bucket.is_last():
        state.done()
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    done.set_result(result)
    return done


def align_first_reduction(ddp: nn.parallel.DistributedDataParallel) -> Any:
    """Make `ddp`'s first synced step add gradients in the order of its rebuilt buckets.

    Registers a comm hook (so only for a wrapper without one; a hook the script registers on
    the wrapper later is run in its place, from the first step on); a wrapper whose buckets are
    never rebuilt (``find_unused_parameters`` without ``static_graph``) or whose per-bucket
    caps are the user's is left as it is.  Returns the hook's state (None when left alone).
    """
    if ddp.find_unused_parameters and not ddp.static_graph:
        return None
    if ddp._bucket_config.has_custom_per_bucket_caps:
        return None
    state = _First(ddp)
    ddp.register_comm_hook(state, _hook)

    def register_comm_hook(user_state: object, hook: Callable[..., Any]) -> None:
        # DDP takes one hook per wrapper and this one holds the slot: a script's own
        # `model.register_comm_hook` (before its first backward, as DDP asks) is run from it
        if state.user is not None or not state.pending:
            raise RuntimeError("register_comm_hook: a communication hook can be registered once")
        state.done()
        state.user = (hook, user_state)

    vars(ddp)["register_comm_hook"] = register_comm_hook  # the instance's, DDP's class untouched
    return state
