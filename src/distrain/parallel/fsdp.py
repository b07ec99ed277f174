"""Sharded data parallelism with FSDP2 (``torch.distributed.fsdp.fully_shard``).

Each repeated block (a transformer layer and the like) becomes one FSDP unit, then the root
takes what is left: parameters, gradients and optimizer state are split across the ranks of the
shard group, and a block's full weights exist only while it computes.  ``hsdp`` uses a 2-D mesh:
replicas across nodes (gradients all-reduced), shards inside a node (reduce-scattered).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard

from distrain.errors import DistrainError
from distrain.parallel.heap import map_large_buffers
from distrain.parallel.materialise import init_order, materialise_own, post_order
from distrain.parallel.options import ShardSpec, check_shard


def build_mesh(
    device_type: str, world_size: int, hybrid: bool, replicate: int | None, num_nodes: int
) -> DeviceMesh:
    """A 1-D shard mesh, or for HSDP a (replicate, shard) mesh; replicas default to one per node.

    Ranks are laid out row-major, so a shard group is ``world_size // replicate`` consecutive
    ranks: one node's processes when there is one replica per node.
    """
    if not hybrid:
        if replicate not in (None, 1):
            raise DistrainError("replicate= needs strategy='hsdp'")
        return init_device_mesh(device_type, (world_size,), mesh_dim_names=("shard",))
    replicas = num_nodes if replicate is None else replicate
    if replicas < 1 or world_size % replicas:
        raise DistrainError(
            f"hsdp: {world_size} processes cannot form {replicas} equal replicas "
            f"(replicate={replicas})"
        )
    return init_device_mesh(
        device_type, (replicas, world_size // replicas), mesh_dim_names=("replicate", "shard")
    )


def repeated_block_classes(model: nn.Module) -> set[type]:
    """Classes with ≥ 2 parameter-holding instances side by side in one ModuleList/Sequential/…"""
    found: set[type] = set()
    for module in model.modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential, nn.ModuleDict)):
            continue
        counts: dict[type, int] = {}
        for child in module.children():
            if any(True for _ in child.parameters()):
                counts[type(child)] = counts.get(type(child), 0) + 1
        found.update(cls for cls, n in counts.items() if n >= 2)
    return found


def _predicate(shard: ShardSpec, model: nn.Module) -> Callable[[nn.Module], bool]:
    classes = check_shard(shard)
    if classes is None and shard is None:
        classes = tuple(repeated_block_classes(model))
    if classes is None:
        return shard  # type: ignore[return-value]  # check_shard found it callable
    return lambda m: isinstance(m, classes)


def find_blocks(model: nn.Module, shard: ShardSpec = None) -> list[nn.Module]:
    """The modules that become their own FSDP unit: the outermost matches of `shard` below the root.

    Modules without parameters are skipped (nothing to shard).
    """
    wanted = _predicate(shard, model)
    blocks: list[nn.Module] = []

    def visit(module: nn.Module) -> None:
        for child in module.children():
            if wanted(child) and any(True for _ in child.parameters()):
                blocks.append(child)
            else:
                visit(child)

    visit(model)
    return blocks


def mixed_precision(precision: str) -> MixedPrecisionPolicy:
    """bf16/fp16: 16-bit parameters for compute, gradients reduced in fp32; fp32: unchanged."""
    if precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if precision == "fp16":
        return MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def checkpoint_blocks(model: nn.Module, blocks: list[nn.Module]) -> list[nn.Module]:
    """Wrap each block in torch's checkpoint_wrapper in place (activations recomputed in backward).

    The wrapper's state_dict hooks hide its prefix, so parameter names do not change.
    """
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    wrapped: dict[int, nn.Module] = {id(b): checkpoint_wrapper(b) for b in blocks}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if id(child) in wrapped:
                setattr(parent, name, wrapped[id(child)])
    return [wrapped[id(b)] for b in blocks]


def _broadcast_from_rank0(module: nn.Module) -> None:
    """Rank 0's parameters and buffers everywhere (what DDP does at construction)."""
    with torch.no_grad():
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor, src=0)


def shard_model(
    model: nn.Module,
    blocks: list[nn.Module],
    mesh: DeviceMesh,
    device: torch.device,
    precision: str,
    cpu_offload: bool = False,
    on_meta: bool = False,
    map_buffers: bool = False,
    **fsdp_kwargs: Any,
) -> nn.Module:
    """Apply fully_shard to each of `blocks`, then to the root; materialise a meta model on the way.

    `map_buffers` (``DISTRAIN_MAP_LARGE_BUFFERS=1``): glibc gives large buffers mappings of their
    own first, so freed ones go back to the system (:mod:`.heap`: lower peak memory, slower steps).

    A meta model is materialised block by block (children first, see
    :mod:`~distrain.parallel.materialise`) and each block is sharded as soon as it is
    complete, so a rank holds at most one full block beyond its shards.  Otherwise the model is
    moved to `device` and rank 0's weights are broadcast first (fully_shard keeps each rank's
    slice of its own copy, so different copies would mix).
    """
    if cpu_offload and device.type != "cuda":
        raise DistrainError(
            "cpu_offload=True needs a GPU: on the CPU the parameters already live in host memory"
        )
    if map_buffers:  # freed unit and all-gather buffers go back to the system, not to glibc's heap
        map_large_buffers()
    options: dict[str, Any] = {"mesh": mesh, "mp_policy": mixed_precision(precision)}
    if cpu_offload:
        options["offload_policy"] = CPUOffloadPolicy()
    options.update(fsdp_kwargs)
    if not on_meta:
        model.to(device)
        _broadcast_from_rank0(model)
        for block in blocks:
            fully_shard(block, **options)
        fully_shard(model, **options)
        return model
    block_ids = {id(b) for b in blocks}
    memo: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for module in init_order(model):
            if module is model:
                break
            materialise_own(module, memo)
            if id(module) in block_ids:
                module.to(device)
                fully_shard(module, **options)
        materialise_own(model, memo)
        for module in post_order(model):  # what no block holds: moved in place, keeping ties
            for tensor in list(module._parameters.values()) + list(module._buffers.values()):
                if tensor is not None and not is_sharded_tensor(tensor) and tensor.device != device:
                    tensor.data = tensor.data.to(device)
    fully_shard(model, **options)
    return model


def is_sharded_tensor(tensor: torch.Tensor) -> bool:
    """True for a DTensor (a parameter FSDP already sharded)."""
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def release_fsdp(model: nn.Module) -> None:
    """Drop FSDP's references to its process groups, so they die with destroy_process_group().

    Otherwise the groups live until the model is garbage-collected at interpreter teardown, the
    same place where freeing gloo's threads can deadlock the exit (see ``release_ddp``).  The
    device mesh keeps them too (torch >= 2.10: ``_pg_registry``), and the script's optimizer keeps
    the mesh (each sharded parameter names it), so the mesh lets go of them as well.
    """
    sharded = [p for p in model.parameters() if is_sharded_tensor(p)]
    meshes = {id(mesh): mesh for mesh in (cast(Any, p).device_mesh for p in sharded)}
    for mesh in meshes.values():
        for owner in (mesh, getattr(mesh, "_root_mesh", None)):
            registry = getattr(owner, "_pg_registry", None)
            if isinstance(registry, dict):
                registry.clear()
    for module in model.modules():
        if not isinstance(module, FSDPModule):
            continue
        group = module._get_fsdp_state()._fsdp_param_group
        if group is None:
            continue
        for info in (group.mesh_info, group.post_forward_mesh_info):
            for attr in (
                "shard_process_group",
                "replicate_process_group",
                "reduce_scatter_process_group",
            ):
                if info is not None and hasattr(info, attr):
                    setattr(info, attr, None)
