"""Less gradient traffic: DDP communication hooks, chosen by name (off by default).

When the gradient all-reduce dominates a step (small models, slow links, gloo on CPU), DDP can
compress what it sends.  These are torch's own hooks; distrain only names them:

- ``"bf16"`` / ``"fp16"``: gradients are cast to 16 bits for the all-reduce and back
  (``default_hooks.bf16_compress_hook`` / ``fp16_compress_hook``): half the bytes, a rounding
  error per step.  bf16 keeps fp32's range; fp16 keeps more mantissa but can overflow.
- ``"powersgd"``: low-rank gradient compression with error feedback and warm start
  (``powerSGD_hook.PowerSGDState``); options ``"powersgd:rank=2,start=100"`` — the matrix
  approximation rank (default 1) and the step from which it compresses (default 10; plain
  all-reduce before, as torch requires > 1).  Its state (error feedback, warm-start factors) is
  not part of a checkpoint, so a resumed PowerSGD run is not bitwise equal to an uninterrupted one.

They change the numerics, so they are never on unless asked:
``ctx.prepare_model(model, comm_hook="bf16", bucket_cap_mb=5)``.

Two things distrain adds around torch's PowerSGD hook, for gloo jobs and CPU tensors:

- On gloo the hook must see the whole model in one bucket: it issues its all-reduces from
  gloo's callback threads, so with several buckets the ranks issue them in different orders and
  gloo aborts ("Received data size doesn't match expected size").  ``one_bucket_mb`` sizes the
  bucket; the DDP strategy applies it.
- The hook computes ``Q = Mᵀ·P`` as ``torch.bmm(M.transpose(1, 2), P)``.  On x86 CPUs (MKL)
  that transposed product with a narrow ``P`` runs at ~0.1 GFLOP/s: 77 ms for a 2048×2048
  gradient at rank 2, against 2.8 ms for the same product computed as ``(Pᵀ·M)ᵀ``
  (benchmarks/comm/RESULTS.md).  ``_FastLowRankProducts`` stands in for ``torch`` inside the hook's
  module and reroutes exactly that product; everything else is torch's own code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from distrain.process import patching

HOOKS = ("bf16", "fp16", "powersgd")
POWERSGD_DEFAULTS = {"rank": 1, "start": 10}


def parse_hook(spec: str) -> tuple[str, dict[str, int]]:
    """``"powersgd:rank=2,start=100"`` → ``("powersgd", {"rank": 2, "start": 100})``; ValueError."""
    name, _, opts = spec.strip().lower().partition(":")
    if name not in HOOKS:
        raise ValueError(f"comm_hook must be one of {', '.join(HOOKS)} (got {spec!r})")
    options: dict[str, int] = {}
    if opts:
        if name != "powersgd":
            raise ValueError(f"comm_hook {name!r} takes no options (got {spec!r})")
        for item in opts.split(","):
            key, _, value = item.partition("=")
            if key not in POWERSGD_DEFAULTS or not value.isdigit():
                raise ValueError(f"powersgd options are rank=N,start=N (got {item!r})")
            options[key] = int(value)
    if name == "powersgd":
        options = {**POWERSGD_DEFAULTS, **options}
        if options["rank"] < 1 or options["start"] < 2:
            raise ValueError("powersgd needs rank >= 1 and start >= 2")
    return name, options


def one_bucket_mb(model: nn.Module) -> float:
    """A DDP ``bucket_cap_mb`` that holds all of `model`'s gradients in one bucket."""
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return nbytes / 2**20 + 1.0


class _FastLowRankProducts:
    """``torch`` as PowerSGD's hook module sees it, with ``bmm(Mᵀ, P)`` computed as ``(Pᵀ·M)ᵀ``."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def bmm(
        input: torch.Tensor, mat2: torch.Tensor, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``torch.bmm``, rerouted for a transposed contiguous CPU batch `input`, narrow `mat2`."""
        transposed = (
            input.dim() == 3 and input.transpose(1, 2).is_contiguous() and not input.is_contiguous()
        )
        if not (transposed and input.device.type == "cpu" and mat2.size(2) < input.size(2)):
            return torch.bmm(input, mat2, out=out)
        product = torch.bmm(mat2.transpose(1, 2), input.transpose(1, 2)).transpose(1, 2)
        if out is None:
            return product
        return out.copy_(product)


def _use_fast_low_rank_products() -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    if (
        getattr(powerSGD_hook, "torch", None) is torch
    ):  # a torch whose hook no longer reads `torch.bmm` is left alone
        patching.replace(powerSGD_hook, "torch", _FastLowRankProducts(), feature="comm_hooks")


def register_comm_hook(model: nn.parallel.DistributedDataParallel, spec: str) -> Any:
    """Register the named hook on a DDP model; returns the hook's state (PowerSGDState or None)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    name, options = parse_hook(spec)
    if name == "powersgd":
        _use_fast_low_rank_products()
        state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=options["rank"],
            start_powerSGD_iter=options["start"],
            use_error_feedback=True,
            warm_start=True,
        )
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return state
    hook: Callable[..., Any] = (
        default_hooks.bf16_compress_hook if name == "bf16" else default_hooks.fp16_compress_hook
    )
    model.register_comm_hook(None, hook)  # state None: the default process group
    return None
