"""What a checkpoint holds: the registered objects split into DCP state (models, their optimizers)
and plain state (everything else), RNG states, and CPU snapshots for async saves."""

from __future__ import annotations

import random
from collections.abc import Mapping, Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor

from distrain.checkpoint.files import FORMAT


def rng_state() -> dict[str, Any]:
    """This process's RNG states in weights_only-loadable form."""
    import numpy as np

    np_state: Any = np.random.get_state()  # the legacy tuple form (legacy=True)
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "kind": str(np_state[0]),
            "keys": torch.from_numpy(np_state[1].astype("int64")),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "gauss": float(np_state[4]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    import numpy as np

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], n["keys"].numpy().astype("uint32"), n["pos"], n["has_gauss"], n["gauss"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)


def _to_cpu_copy(obj: Any, cache: dict[str, torch.Tensor] | None = None, path: str = "") -> Any:
    """A deep copy with every tensor copied to CPU memory (the async snapshot).

    With a `cache`, buffers of the previous snapshot are reused (``copy_`` into them): fresh
    allocations page-fault on first touch, which costs far more than the copy itself (10× here).
    """
    if isinstance(obj, DTensor):  # FSDP: copy this rank's shard, keep the placement
        return laid_out_as(_to_cpu_copy(obj.to_local(), cache, path), obj)
    if isinstance(obj, torch.Tensor):
        src = obj.detach()
        buf = cache.get(path) if cache is not None else None
        if buf is None or buf.shape != src.shape or buf.dtype != src.dtype:
            buf = torch.empty(src.shape, dtype=src.dtype, device="cpu")
            if cache is not None:
                cache[path] = buf
        buf.copy_(src)
        return buf
    if isinstance(obj, dict):
        return {k: _to_cpu_copy(v, cache, f"{path}/{k}") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_to_cpu_copy(v, cache, f"{path}/{i}") for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def laid_out_as(local: torch.Tensor, like: DTensor) -> DTensor:
    """This rank's shard `local` as a DTensor laid out as `like` (its mesh, placements, shape)."""
    return DTensor.from_local(
        local,
        like.device_mesh,
        like.placements,
        run_check=False,
        shape=like.shape,
        stride=like.stride(),
    )


def _unwrap(obj: Any) -> Any:
    return obj.module if isinstance(obj, torch.nn.parallel.DistributedDataParallel) else obj


def strategy_of(module: nn.Module) -> str:
    """ "fsdp" when parameters are sharded DTensors, "ddp" for a DDP wrapper, else "plain"."""
    if any(isinstance(p, DTensor) for p in module.parameters()):
        return "fsdp"
    return "ddp" if isinstance(module, nn.parallel.DistributedDataParallel) else "plain"


@dataclass
class Registered:
    """The objects given to restore(): models and optimizers go through DCP, the rest is plain."""

    modules: dict[str, nn.Module] = field(default_factory=dict)
    optimizers: dict[str, tuple[torch.optim.Optimizer, str]] = field(
        default_factory=dict
    )  # name: (opt, its model)
    plain: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def split(cls, objects: Mapping[str, Any]) -> Registered:
        """Sort `objects`: an optimizer joins the registered model that owns its parameters."""
        reg = cls()
        for name, obj in objects.items():
            if isinstance(obj, nn.Module):
                reg.modules[name] = obj
        for name, obj in objects.items():
            if isinstance(obj, nn.Module):
                continue
            owner = _owner(obj, reg.modules) if isinstance(obj, torch.optim.Optimizer) else None
            if owner is not None:
                reg.optimizers[name] = (obj, owner)
            else:
                reg.plain[name] = obj
        return reg

    @property
    def sharded(self) -> list[str]:
        """Names of the FSDP-sharded models."""
        return [name for name, m in self.modules.items() if strategy_of(m) == "fsdp"]

    def dcp_state(self, share: tuple[int, int] | None = None) -> dict[str, Any]:
        """Model and optimizer state in DCP's form: FQN keys without wrapper prefixes, DTensors.

        ``share=(rank, world)`` keeps, of a replicated (plain/DDP) model, only the tensors this
        rank saves: each parameter goes to one rank, balanced by size, so the ranks snapshot and
        write disjoint parts (DCP's metadata joins them).  Sharded (FSDP) state is kept whole.
        """
        state: dict[str, Any] = {}
        owners: dict[str, dict[str, int]] = {}
        for name, m in self.modules.items():
            msd = get_model_state_dict(m)
            if share is not None and strategy_of(m) != "fsdp":
                params = {fqn for fqn, _ in _unwrap(m).named_parameters()}
                owners[name] = _balance(msd, share[1], replicas_differ=set(msd) - params)
                msd = {k: v for k, v in msd.items() if owners[name][k] == share[0]}
            state[name] = msd
        for name, (opt, owner) in self.optimizers.items():
            osd = _optimizer_state(self.modules[owner], opt)
            if share is not None and owner in owners:
                mine = owners[owner]
                opt_state: dict[Any, Any] = osd["state"]
                osd = {
                    **osd,
                    "state": {k: v for k, v in opt_state.items() if mine.get(k, 0) == share[0]},
                }
            state[name] = osd
        return state

    def dcp_target(self, saved: AbstractSet[str]) -> dict[str, Any]:
        """The state for DCP to load into: this process's shapes, optimizer state only where saved.

        `saved` holds the checkpoint's keys (DCP's flattened names, ``optimizer.state.w.step``).
        Torch gives a fresh optimizer state for every parameter (a zero-lr step) to load into;
        a parameter whose state the checkpoint lacks (the optimizer had not stepped when it was
        saved, or had no gradient for it) keeps none: loading it made DCP fail ("Missing key").
        """
        state: dict[str, Any] = {n: get_model_state_dict(m) for n, m in self.modules.items()}
        for name, (opt, owner) in self.optimizers.items():
            osd = get_optimizer_state_dict(self.modules[owner], opt)
            per_param: dict[Any, Any] = osd["state"]  # type: ignore[assignment]  # stubs: a union
            kept = {
                fqn: value
                for fqn, value in per_param.items()
                if any(f"{name}.state.{fqn}.{key}" in saved for key in value)
            }
            state[name] = {**osd, "state": kept}
        return state

    def load_dcp_state(self, state: Mapping[str, Any]) -> None:
        """Put what :meth:`dcp_state` produced (and DCP filled in) back into the objects."""
        for name, m in self.modules.items():
            set_model_state_dict(m, state[name])
        for name, (opt, owner) in self.optimizers.items():
            # not strict: a parameter without saved state keeps none (see dcp_target)
            set_optimizer_state_dict(
                self.modules[owner], opt, state[name], options=StateDictOptions(strict=False)
            )

    def local_buffers(self) -> dict[str, dict[str, torch.Tensor]]:
        """This rank's own buffers of every model (BatchNorm statistics and the like).

        Under DDP with plain BatchNorm, and under FSDP, which never syncs buffers, each rank's
        running statistics differ: DCP keeps one copy (rank 0's), the rank file keeps each
        rank's, so a resume on the same world size gives every rank back exactly its own.
        """
        return {
            name: {fqn: b.detach() for fqn, b in _unwrap(m).named_buffers()}
            for name, m in self.modules.items()
        }

    def load_local_buffers(self, saved: Mapping[str, Mapping[str, torch.Tensor]]) -> list[str]:
        """Copy what :meth:`local_buffers` saved back in place; returns the names with no value."""
        missing: list[str] = []
        for name, m in self.modules.items():
            mine = saved.get(name, {})
            for fqn, buf in _unwrap(m).named_buffers():
                value = mine.get(fqn)
                if value is None or value.shape != buf.shape:
                    missing.append(f"{name}.{fqn}")
                    continue
                with torch.no_grad():
                    buf.copy_(value)
        return missing

    def plain_state(self) -> dict[str, Any]:
        """state_dict() of every other object (scheduler, loader, scaler, yours)."""
        return {name: obj.state_dict() for name, obj in self.plain.items()}


def shared_file(
    reg: Registered, step: int, world_size: int, objects: dict[str, Any], extra: dict[str, Any]
) -> dict[str, Any]:
    """Rank 0's shared.pt: the plain `objects`' states, what went through DCP and how, `extra`."""
    return {
        "format": FORMAT,
        "step": step,
        "world_size": world_size,
        "objects": objects,
        "dcp": [*reg.modules, *reg.optimizers],
        "strategy": {name: strategy_of(m) for name, m in reg.modules.items()},
        "extra": extra,
    }


def _optimizer_state(model: nn.Module, opt: torch.optim.Optimizer) -> Any:
    """The optimizer's state in DCP's form, leaving an optimizer that has not stepped as it was.

    Torch fills the state of such an optimizer first (a step with zero gradients and lr 0): the
    live optimizer then counted a step it never took (Adam's ``step`` 1, so its bias correction
    no longer matched an uninterrupted run).  Its state is emptied again and saved empty.
    """
    fresh = not opt.state
    osd = get_optimizer_state_dict(model, opt)
    if fresh and opt.state:
        opt.state.clear()
        osd = {**osd, "state": {}}
    return osd


def _balance(
    tensors: Mapping[str, Any], world: int, replicas_differ: AbstractSet[str] = frozenset()
) -> dict[str, int]:
    """Each key's rank: the largest tensors first, each to the rank with the fewest bytes so far.

    Keys in `replicas_differ` (buffers: plain BatchNorm's running statistics differ per rank
    between DDP's broadcasts) go to rank 0, whose copy is the one DDP broadcasts next; DDP's
    parameters and optimizer state are the same on every rank, so any rank may write them.
    """
    load = [0] * world
    owner: dict[str, int] = {}
    sizes = {
        k: v.numel() * v.element_size() if isinstance(v, torch.Tensor) else 0
        for k, v in tensors.items()
    }
    for key in sorted(k for k in tensors if k in replicas_differ):
        owner[key] = 0
        load[0] += sizes[key]
    for key in sorted(
        (k for k in tensors if k not in replicas_differ), key=lambda k: (-sizes[k], k)
    ):
        rank = min(range(world), key=lambda r: load[r])
        owner[key] = rank
        load[rank] += sizes[key]
    return owner


def _owner(opt: torch.optim.Optimizer, modules: Mapping[str, nn.Module]) -> str | None:
    """The registered model holding `opt`'s parameters, if any."""
    first = next((p for g in opt.param_groups for p in g["params"]), None)
    if first is None:
        return None
    for name, m in modules.items():
        if any(p is first for p in m.parameters()):
            return name
    return None


def register(into: dict[str, Any], objects: dict[str, Any], scaler: Any) -> None:
    """Add the restorable `objects` (None skipped) and the context's GradScaler to `into`;
    TypeError for an object without state_dict()/load_state_dict()."""
    for name, obj in objects.items():
        if obj is None:
            continue
        if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
            raise TypeError(f"{name} has no state_dict()/load_state_dict()")
        into[name] = obj
    if "scaler" not in into and scaler is not None:
        into["scaler"] = scaler
