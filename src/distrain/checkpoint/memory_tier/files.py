"""The memory tier's files: snapshots written atomically with a record, verified, pruned, swept.

A snapshot of rank r at step s is ``r0000R-s0000000S.pt`` (torch.save of its state) and its
record ``….json`` (size, digest, world size), written after it: no record, no snapshot.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import zlib
from collections.abc import Callable
from typing import IO, Any

import torch

from distrain.checkpoint.files import CheckpointError, _warn
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


def digest(data: bytes | memoryview) -> str:
    """The snapshot digest: CRC-32 (zlib), 3x cheaper than sha256 here (40 MiB: 20 vs 67 ms on
    2 loaded EPYC cores); it catches torn and bit-flipped copies, which is its job (the content
    is loaded with weights_only=True, never trusted for safety)."""
    return f"crc32:{zlib.crc32(data):08x}"


class _Counting:
    """A write-only wrapper that computes the digest and size of what passes (one pass)."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f, self.crc, self.size = f, 0, 0

    def write(self, data: bytes) -> int:
        self.crc = zlib.crc32(data, self.crc)
        self.size += len(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def _replace_with(path: str, write: Callable[[Any], None]) -> tuple[str, int]:
    """Write `path` under a temporary name and rename it (no fsync: tmpfs has no disk to reach,
    and a file a machine crash tore fails its digest)."""
    with open(path + ".part", "wb") as f:
        counting = _Counting(f)
        write(counting)
    os.replace(path + ".part", path)
    return f"crc32:{counting.crc:08x}", counting.size


def write_snapshot(
    folder: str, rank: int, step: int, write: Callable[[Any], None], meta: dict[str, Any]
) -> str:
    """Write a snapshot (`write` fills a file) and then its record (`meta`, size, digest), each
    atomically; returns the data file's path."""
    path = os.path.join(folder, snapshot_name(rank, step))
    crc, size = _replace_with(path, write)
    record = {**meta, "format": FORMAT, "rank": rank, "step": step, "bytes": size, "digest": crc}
    _replace_with(path[:-3] + ".json", lambda f: f.write(json.dumps(record).encode()))
    return path


def remove_partial(folder: str, rank: int | None = None) -> None:
    """Remove what a write cut short left in `folder` (``.part`` files; of `rank` only, if given):
    never a snapshot, and without it the folder could not be removed at the end."""
    prefix = "r" if rank is None else f"r{rank:05d}-"
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(folder):
            if name.startswith(prefix) and name.endswith(".part"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(folder, name))


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
    if digest(data) != record.get("digest"):
        return None, f"{path} fails its checksum (torn or corrupted)"
    return record, None


def newest_valid(folder: str, rank: int, world: int | None = None) -> list[int]:
    """`rank`'s verified snapshot steps in `folder`, newest first; a bad one is said and removed,
    one of another world size (`world`) left out (reworld.py's, not this rank's)."""
    good = []
    for step, path in sorted(listed(folder).get(rank, {}).items(), reverse=True):
        record, problem = verified(path)
        if record is not None and world is not None and record.get("world_size") != world:
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
