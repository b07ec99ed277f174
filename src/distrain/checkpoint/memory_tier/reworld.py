"""A memory snapshot taken on another world size: an elastic job that lost or gained a node.

A replicated model (plain or DDP) is whole in every rank's snapshot, as it is in a disk
checkpoint, so the job can resume from it whatever its size now: the model, the optimizer and the
plain objects (loader position, scheduler …) come from one old rank's snapshot (rank 0's when some
node holds it, its own or a peer's copy), sent over the tier's gloo group to the ranks whose node
has none.  Each new rank that kept its old number gets back its own RNG state and buffers when its
node holds its old snapshot of that step; the others keep theirs, said in one line, as the disk
path does.  A sharded (FSDP) snapshot is not resharded here: the disk checkpoint is used, said.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

import torch.distributed as dist

from distrain.checkpoint.files import _warn
from distrain.checkpoint.memory_tier.files import listed, load_bytes, verified
from distrain.process.info import ProcessInfo

#: a snapshot on this node: (its step, the world size it was taken on) → {old rank: data path}
Found = dict[tuple[int, int], dict[int, str]]


def other_worlds(folders: list[str], world: int) -> tuple[Found, int]:
    """The replicated snapshots in `folders` (own and peer copies) taken on a world size other
    than `world`, by their records (their bytes are verified when used); and how many sharded
    ones there were."""
    found: Found = {}
    sharded = 0
    for folder in folders:
        for old_rank, steps in listed(folder).items():
            for step, path in steps.items():
                record = _record(path)
                if record is None or record.get("world_size") in (None, world):
                    continue
                if not record.get("replicated"):
                    sharded += 1
                    continue
                found.setdefault((step, int(record["world_size"])), {})[old_rank] = path
    return found, sharded


def _record(path: str) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError), open(path[:-3] + ".json", "rb") as f:
        record = json.loads(f.read())
        return record if isinstance(record, dict) else None
    return None


def newest(views: list[Found]) -> tuple[int, int] | None:
    """The newest (step, world size) any rank's node holds."""
    keys = {key for view in views for key in view}
    return max(keys, default=None)


def _read(path: str) -> bytes | None:
    record, problem = verified(path)
    if record is None:
        _warn(f"skipping memory snapshot: {problem}")
        return None
    with open(path, "rb") as f:
        return f.read()


def restore(
    process: ProcessInfo, group: dist.ProcessGroup | None, views: list[Found], key: tuple[int, int]
) -> tuple[dict[str, Any], dict[str, Any] | None, str] | None:
    """Old rank 0's snapshot of `key` (else the lowest old rank's) on every rank, and this
    rank's own old one when its node holds it (collective).  Returns (the state, this rank's own
    state or None, where it came from), or None when no node holds a good copy."""
    step, old_world = key
    holders = {r for view in views for r in view.get(key, {})}
    source = 0 if 0 in holders else min(holders)
    mine = views[process.rank].get(key, {})
    data = _read(mine[source]) if source in mine else None
    have = process.gather_object(data is not None)
    if not any(have):
        return None
    src = have.index(True)
    where = f"memory, old rank {source}'s snapshot of step {step} (saved on {old_world} ranks)"
    if not all(have):  # ranks whose node holds no copy receive it from the first that does
        box = [data if process.rank == src else None]
        if process.distributed:
            dist.broadcast_object_list(box, src=src, group=group)
        if data is None:
            data = box[0]
            where += f", from rank {src}"
    assert data is not None
    state = load_bytes(data, where)
    own = None
    if process.rank == source:  # an old rank's number: below old_world
        own = state
    elif process.rank in mine:  # `mine` holds old ranks only
        raw = _read(mine[process.rank])
        own = load_bytes(raw, mine[process.rank]) if raw is not None else None
    if own is None:
        _warn(
            f"rank {process.rank}: no memory snapshot of its own at step {step} on this node "
            f"(saved on {old_world} ranks): this rank keeps its own RNG state"
        )
    return state, own, where


def drop(folders: list[str], world: int) -> None:
    """Remove the snapshots of another world size from `folders`, records first: once the job
    holds its own on this world size (or ended well), no restart needs them, and they would
    stay beyond the tier's bound of 2 per rank."""
    for folder in folders:
        for steps in listed(folder).values():
            for path in steps.values():
                record = _record(path)
                if record is not None and record.get("world_size") in (None, world):
                    continue
                for name in (path[:-3] + ".json", path):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(name)
