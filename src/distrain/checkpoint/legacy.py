"""Checkpoints written by distrain 0.1 (format 1: rank 0's ``shared.pt`` holds every state whole).

They load into DDP, plain and FSDP models alike: model state as a full state dict, optimizer
state converted from torch's parameter-index keys to the parameter names DCP uses.
"""

from __future__ import annotations

import os
from typing import Any

from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from distrain.checkpoint.files import SHARED_FILE, CheckpointError, load_file
from distrain.checkpoint.state import Registered, _unwrap

_FULL = StateDictOptions(full_state_dict=True)


def load(path: str, reg: Registered) -> dict[str, Any]:
    """Load the 0.1 checkpoint at `path` into `reg`'s objects; returns its shared.pt contents."""
    shared = load_file(os.path.join(path, SHARED_FILE))
    states = shared.get("objects") if isinstance(shared, dict) else None
    if not isinstance(states, dict):
        raise CheckpointError(
            f"{path}: not a distrain 0.1 checkpoint (no 'objects' in {SHARED_FILE}); start with "
            "an empty directory"
        )
    wanted = [*reg.modules, *reg.optimizers, *reg.plain]
    missing = [name for name in wanted if name not in states]
    if missing:
        raise CheckpointError(
            f"{path} has no state for {', '.join(missing)} (saved: {', '.join(states)})"
        )
    try:
        for name, module in reg.modules.items():
            set_model_state_dict(module, states[name], options=_FULL)
        for name, (opt, owner) in reg.optimizers.items():
            set_optimizer_state_dict(
                reg.modules[owner],
                opt,
                _by_name(states[name], opt, reg.modules[owner]),
                options=_FULL,
            )
        for name, obj in reg.plain.items():
            obj.load_state_dict(states[name])
    except (ValueError, KeyError, RuntimeError) as err:
        raise CheckpointError(
            f"cannot resume from the 0.1 checkpoint {path}: {type(err).__name__}: {err}"
        ) from None
    return shared


def _by_name(saved: dict[str, Any], opt: Any, model: nn.Module) -> dict[str, Any]:
    """torch's ``optimizer.state_dict()`` (parameters numbered in group order) keyed by name."""
    names = {id(p): name for name, p in _unwrap(model).named_parameters()}
    state: dict[str, Any] = {}
    groups = []
    for group, old in zip(opt.param_groups, saved["param_groups"], strict=True):
        fqns = [names[id(p)] for p in group["params"]]
        for fqn, index in zip(fqns, old["params"], strict=True):
            if index in saved["state"]:
                state[fqn] = saved["state"][index]
        groups.append({**old, "params": fqns})
    return {"state": state, "param_groups": groups}
