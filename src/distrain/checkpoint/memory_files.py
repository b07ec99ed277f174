"""The memory tier's files: snapshots written atomically with a record, verified, pruned, swept.

A snapshot of rank r at step s is ``r0000R-s0000000S.pt`` (torch.save of its state) and its
record ``….json`` (size, sha256, world size), written after it: no record, no snapshot.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
from typing import Any

import torch

from distrain.checkpoint.files import CheckpointError, _warn, atomic_write
from distrain.process import peers

#: the prefix of every job's folder under the root (what the sweep looks at, nothing else)
PREFIX = "distrain-mem-"
#: snapshots kept per rank (and per rank whose copy a peer holds)
KEEP = 2
#: the snapshot format
FORMAT = 1
_NAME = re.compile(r"^r(\d{5,})-s(\d{8,})\.pt$")


def snapshot_name(rank: int, step: int) -> str:
    """The data file of `rank`'s snapshot of `step` (its record: the same with ``.json``)."""
    return f"r{rank:05d}-s{step:08d}.pt"


def listed(folder: str) -> dict[int, dict[int, str]]:
    """{rank: {step: data path}} of the snapshots in `folder` that have a record."""
    found: dict[int, dict[int, str]] = {}
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(folder):
            m = _NAME.match(name)
            if m:
                found.setdefault(int(m.group(1)), {})[int(m.group(2))] = os.path.join(folder, name)
    return found


def write_snapshot(folder: str, rank: int, step: int, data: memoryview | bytes, meta: dict) -> str:
    """Write `data` and then its record (`meta` + size + sha256) atomically; returns the path."""
    path = os.path.join(folder, snapshot_name(rank, step))
    sha, size = atomic_write(path, lambda f: f.write(data))
    record = {**meta, "format": FORMAT, "rank": rank, "step": step, "bytes": size, "sha256": sha}
    atomic_write(path[:-3] + ".json", lambda f: f.write(json.dumps(record).encode()))
    return path


def prune(folder: str, rank: int, keep: int = KEEP) -> None:
    """Keep `rank`'s newest `keep` snapshots in `folder`, records first (never half a pair)."""
    for step in sorted(listed(folder).get(rank, {}), reverse=True)[keep:]:
        path = os.path.join(folder, snapshot_name(rank, step))
        for name in (path[:-3] + ".json", path):  # the record first: no record, no snapshot
            with contextlib.suppress(FileNotFoundError):
                os.remove(name)


def verified(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """(record, None) when the snapshot at `path` is complete and its bytes match; else why not."""
    try:
        with open(path[:-3] + ".json", "rb") as f:
            record = json.loads(f.read())
    except FileNotFoundError:
        return None, f"{path} has no record (written partly)"
    except (OSError, ValueError) as err:
        return None, f"{path[:-3]}.json is unreadable ({type(err).__name__})"
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return None, f"{path[:-3]}.json is not a snapshot record of format {FORMAT}"
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        return None, f"{path} is unreadable ({type(err).__name__})"
    if len(data) != record.get("bytes"):
        return None, f"{path} has {len(data)} bytes, expected {record.get('bytes')} (torn)"
    if hashlib.sha256(data).hexdigest() != record.get("sha256"):
        return None, f"{path} fails its sha256 checksum (torn or corrupted)"
    return record, None


def newest_valid(folder: str, rank: int, world: int | None = None) -> list[int]:
    """`rank`'s verified snapshot steps in `folder`, newest first; a bad one is said and removed,
    one of another world size (`world`) is said and left out."""
    good = []
    for step, path in sorted(listed(folder).get(rank, {}).items(), reverse=True):
        record, problem = verified(path)
        if record is not None and world is not None and record.get("world_size") != world:
            _warn(f"skipping memory snapshot {path}: saved on {record.get('world_size')} ranks")
            continue
        if problem is None:
            good.append(step)
            continue
        _warn(f"skipping memory snapshot: {problem}")
        for name in (path[:-3] + ".json", path):
            with contextlib.suppress(FileNotFoundError):
                os.remove(name)
    return good


def load_bytes(data: bytes, where: str) -> dict[str, Any]:
    """A snapshot's content, loaded with weights_only=True (no pickled objects)."""
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001  # one line, never a traceback of torch's unpickler
        raise CheckpointError(
            f"cannot read memory snapshot {where}: {type(err).__name__}"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{where}: unknown memory snapshot format")
    return state


def size_of(folder: str) -> int:
    total = 0
    for base, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(base, name))
    return total


def sweep(root: str, mine: str) -> None:
    """Remove the folders of ended jobs under the root: their launcher is gone (this machine)."""
    with contextlib.suppress(FileNotFoundError):
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if not name.startswith(PREFIX) or path == mine:
                continue
            try:
                with open(os.path.join(path, "owner")) as f:
                    owner = f.read().strip()
            except OSError:
                continue  # not one of ours, or being made right now: left alone
            if peers.gone(owner):
                _warn(f"removing {path}: the memory snapshots of an ended job")
                shutil.rmtree(path, ignore_errors=True)
