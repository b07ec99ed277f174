"""The memory tier's copy on a peer node: each snapshot also kept in the next node's tmpfs.

The ranks form a ring over the nodes: rank r sends each snapshot to the rank with the same local
index on the next node, and keeps the previous node's in ``<job folder>/peer/``.  The bytes go
over the tier's own gloo group (torch.distributed point-to-point), with the sender's digest: a
copy that does not match it is not kept.  At restart a rank whose node lost its memory gets its
snapshot from the rank holding the copy, over the same group, verified the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

import torch
import torch.distributed as dist

from distrain.checkpoint.files import CheckpointError, _warn
from distrain.checkpoint.memory_tier.files import (
    digest,
    listed,
    newest_valid,
    prune,
    snapshot_name,
    write_snapshot,
)
from distrain.process.info import ProcessInfo


class Replicator:
    """One rank's part of the ring: what it sends, keeps for its peer and hands back."""

    def __init__(self, process: ProcessInfo, group: dist.ProcessGroup, folder: str) -> None:
        self.process = process
        self.group = group
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        step = process.local_world_size
        self.dst = (process.rank + step) % process.world_size
        self.src = (process.rank - step) % process.world_size

    def _send(self, to: int, record: dict[str, Any], data: Any) -> None:
        head = json.dumps(record).encode()
        header = torch.tensor([len(head), len(data)], dtype=torch.int64)
        dist.send(header, self._global(to), group=self.group)
        dist.send(
            torch.frombuffer(bytearray(head), dtype=torch.uint8), self._global(to), group=self.group
        )
        if len(data):
            dist.send(torch.frombuffer(data, dtype=torch.uint8), self._global(to), group=self.group)

    def _recv(self, frm: int) -> tuple[dict[str, Any], bytes]:
        header = torch.empty(2, dtype=torch.int64)
        dist.recv(header, self._global(frm), group=self.group)
        head = torch.empty(int(header[0]), dtype=torch.uint8)
        dist.recv(head, self._global(frm), group=self.group)
        data = torch.empty(int(header[1]), dtype=torch.uint8)
        if len(data):
            dist.recv(data, self._global(frm), group=self.group)
        record = json.loads(head.numpy().tobytes())
        raw = data.numpy().tobytes()
        if digest(raw) != record.get("digest"):
            raise CheckpointError(f"the copy of rank {frm}'s snapshot arrived corrupted")
        return record, raw

    def _global(self, rank: int) -> int:
        return dist.get_global_rank(self.group, rank) if self.group is not None else rank

    def replicate(self, step: int, data: memoryview, meta: dict[str, Any]) -> None:
        """Send this rank's snapshot of `step` to the peer, keep the one sent to this rank."""
        record = {**meta, "step": step, "digest": digest(data)}
        if self.process.rank < self.dst:  # one side sends first: no two blocking sends meet
            self._send(self.dst, record, data)
            got, raw = self._recv(self.src)
        else:
            got, raw = self._recv(self.src)
            self._send(self.dst, record, data)
        meta_in = {k: v for k, v in got.items() if k not in ("step", "digest", "bytes")}
        write_snapshot(self.folder, self.src, int(got["step"]), lambda f: f.write(raw), meta_in)
        prune(self.folder, self.src)

    def held(self) -> dict[int, list[int]]:
        """{rank: verified steps} of the copies this rank keeps for others, taken on this world
        size (others are reworld.py's)."""
        world = self.process.world_size
        return {
            r: steps for r in listed(self.folder) if (steps := newest_valid(self.folder, r, world))
        }

    def fetch_missing(
        self, step: int, views: list[tuple[list[int], dict[int, list[int]]]], data: bytes | None
    ) -> tuple[bytes, str] | None:
        """Ranks without their own snapshot of `step` receive it from a holder (collective)."""
        got: tuple[bytes, str] | None = None
        for r, (own, _) in enumerate(views):
            if step in own:
                continue
            holder = min(h for h, (_, held) in enumerate(views) if step in held.get(r, []))
            me = self.process.rank
            if me == holder:
                path = os.path.join(self.folder, snapshot_name(r, step))
                with open(path, "rb") as f:
                    raw = f.read()
                record = {"step": step, "digest": digest(raw)}
                self._send(r, record, raw)
            elif me == r:
                _, raw = self._recv(holder)
                got = (raw, f"the copy of step {step} on rank {holder}'s node")
                _warn(f"rank {r}: this node's memory has no step {step}: {got[1]} used")
        del data
        return got

    def forget(self) -> None:
        """Remove the copies this rank keeps (the job ended well)."""
        prune(self.folder, self.src, keep=0)
        with contextlib.suppress(OSError):
            os.rmdir(self.folder)
