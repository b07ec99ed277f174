"""The memory snapshot's form of sharded (FSDP) state: plain local shards, made DTensors again.

A DTensor does not pickle safely, so a snapshot holds each rank's shard as a plain tensor and
the restore lays it out again as the live model's parameter is (its mesh and placements).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.tensor import DTensor

from distrain.checkpoint.state import laid_out_as

if TYPE_CHECKING:
    from distrain.checkpoint.state import Registered


def local_shards(obj: Any) -> Any:
    """`obj` with every DTensor replaced by this rank's shard (a DTensor does not pickle safely)."""
    if isinstance(obj, DTensor):
        return obj.to_local()
    if isinstance(obj, dict):
        return {k: local_shards(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [local_shards(v) for v in obj]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def rewrap(saved: dict[str, Any], reg: Registered) -> dict[str, Any]:
    """Saved shards back into DTensors laid out as the live model's (FSDP); else unchanged."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    out = dict(saved)
    for name, m in reg.modules.items():
        live = get_model_state_dict(m)

        def wrap(fqn: str, value: Any, live: dict[str, Any] = live) -> Any:
            t = live.get(fqn)
            if isinstance(t, DTensor) and isinstance(value, torch.Tensor) and value.dim() > 0:
                return laid_out_as(value, t)
            return value

        out[name] = {k: wrap(k, v) for k, v in saved[name].items()}
        for opt_name, (_, owner) in reg.optimizers.items():
            if owner == name:
                osd = saved[opt_name]
                state = {p: {k: wrap(p, v) for k, v in s.items()} for p, s in osd["state"].items()}
                out[opt_name] = {**osd, "state": state}
    return out
