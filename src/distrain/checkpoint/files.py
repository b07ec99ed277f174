"""The checkpoint directory on disk: atomic files, checksums, the manifest, the newest valid one.

Layout of a checkpoint directory (format 2)::

    DIR/step_00000120/.metadata        DCP's index of the sharded state (written by rank 0)
    DIR/step_00000120/__0_0.distcp     DCP: model + optimizer tensors written by rank 0
    DIR/step_00000120/__1_0.distcp     … by rank 1 (its FSDP shard, or its part of a DDP replica)
    DIR/step_00000120/shared.pt        rank 0: scheduler, GradScaler, loaders, step, world, extras
    DIR/step_00000120/rank_00001.pt    every rank: its RNG states (Python, NumPy, torch CPU, CUDA)
    DIR/step_00000120/manifest.json    sha256 and size of EVERY file above; written after them
    DIR/latest                         "step_00000120", written last (for people and tools)

A ``step_…`` directory is complete or absent: files are written into ``DIR/.tmp-step_…`` and
the directory is renamed into place after its manifest.  A directory is valid only when its
manifest parses, every listed file has its size and sha256, and no file is there that the
manifest does not list.  Format 1 (distrain 0.1: ``shared.pt`` + ``rank_*.pt``) verifies the
same way and still loads (:mod:`.legacy`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import re
import shutil
from collections.abc import Callable
from typing import IO, Any

import torch

from distrain.errors import Abandoned, DistrainError
from distrain.log import get_logger

_log = get_logger("checkpoint")

FORMAT = 2
LEGACY_FORMAT = 1
SHARED_FILE = "shared.pt"
MANIFEST = "manifest.json"
LATEST = "latest"
_STEP_DIR = re.compile(r"^step_(\d{8,})$")
_TMP_PREFIX = ".tmp-"


class CheckpointError(DistrainError):
    """A checkpoint that cannot be used safely (refused payload, incompatible job), one line."""


class SaveAbandoned(CheckpointError, Abandoned):
    """A save the writer gave up on (a writer died, or a stop signal with no reports): the
    worker's lifecycle decides the exit (worker/lifecycle/failure.py), with :attr:`exit_code`."""

    def __init__(self, message: str, exit_code: int) -> None:
        Abandoned.__init__(self, message, exit_code, f"distrain: checkpoint: {message}")


def _warn(message: str) -> None:
    _log.warning(f"distrain: checkpoint: {message}")


def rank_file(rank: int) -> str:
    """The name of a rank's own file (its RNG states)."""
    return f"rank_{rank:05d}.pt"


# -- files --------------------------------------------------------------------------------------
class _HashingWriter:
    """A write-only file wrapper that hashes and counts what passes through (one read, not two)."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, write: Callable[[Any], None]) -> tuple[str, int]:
    """Write `path` via a temporary file, fsync and rename; returns (sha256 hex, size)."""
    tmp = f"{path}.part"
    with open(tmp, "wb") as f:
        hw = _HashingWriter(f)
        write(hw)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path) or ".")
    return hw.sha.hexdigest(), hw.size


def file_sha256(path: str) -> str:
    """sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def describe_file(path: str) -> dict[str, Any]:
    """The manifest entry of a written file: its sha256 and size."""
    return {"sha256": file_sha256(path), "bytes": os.path.getsize(path)}


def load_file(path: str) -> Any:
    """torch.load with weights_only=True; a pickled object is refused with a one-line error."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        detail = str(err).strip().splitlines()
        hint = next(
            (line.strip() for line in detail if "GLOBAL" in line or "Unsupported" in line),
            detail[0] if detail else "",
        )
        raise CheckpointError(
            f"refusing to load {path}: it contains a pickled Python object, not only "
            "tensors and plain data "
            f"(torch.load weights_only=True: {hint})"
        ) from None


# -- the manifest -------------------------------------------------------------------------------
def read_manifest(ckpt_dir: str) -> tuple[dict[str, Any] | None, str | None]:
    """(manifest, None) when `ckpt_dir`'s manifest is well formed, else (None, why not).

    Well formed: a JSON object with an integer ``step``, a known ``format`` and ``files`` mapping
    plain file names to ``{"sha256": hex string, "bytes": int}``.  Anything else (also valid
    JSON of another shape) is a reason naming the file, never an exception.
    """
    path = os.path.join(ckpt_dir, MANIFEST)
    try:
        with open(path, "rb") as f:
            manifest = json.loads(f.read())
    except FileNotFoundError:
        return None, f"{path} is missing (checkpoint incomplete)"
    except (OSError, ValueError) as err:
        return None, f"{path} is unreadable ({type(err).__name__})"
    if not isinstance(manifest, dict):
        return None, f"{path} is malformed (not a JSON object)"
    if manifest.get("format") not in (FORMAT, LEGACY_FORMAT):
        return (
            None,
            f"{path} has an unknown format {manifest.get('format')!r} (this distrain reads "
            f"{LEGACY_FORMAT} and {FORMAT})",
        )
    if type(manifest.get("step")) is not int or type(manifest.get("world_size", 1)) is not int:
        return None, f"{path} is malformed (step/world_size not integers)"
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return None, f"{path} is malformed (no 'files' table)"
    for name, meta in files.items():
        if (
            not isinstance(name, str)
            or name in ("", ".", "..", MANIFEST)
            or "/" in name
            or "\\" in name
        ):
            return None, f"{path} is malformed (bad file name {name!r})"
        if (
            not isinstance(meta, dict)
            or type(meta.get("bytes")) is not int
            or not isinstance(meta.get("sha256"), str)
        ):
            return None, f"{path} is malformed (entry of {name!r} lacks sha256/bytes)"
    if SHARED_FILE not in files:
        return None, f"{path} lists no {SHARED_FILE}"
    return manifest, None


def verify(ckpt_dir: str) -> str | None:
    """None when `ckpt_dir` is complete and every checksum matches; else why not (naming the file).

    Every file in the directory must be listed: a file the manifest does not know (an added
    ``rank_00002.pt``, say) would otherwise be loaded unchecked, so it makes the checkpoint invalid.
    """
    manifest, problem = read_manifest(ckpt_dir)
    if manifest is None:
        return problem
    files: dict[str, dict[str, Any]] = manifest["files"]
    for name in sorted(os.listdir(ckpt_dir)):
        if name != MANIFEST and name not in files:
            return (
                f"{os.path.join(ckpt_dir, name)} is not listed in {MANIFEST} (added "
                "after the save?)"
            )
    for name, meta in files.items():
        path = os.path.join(ckpt_dir, name)
        if not os.path.isfile(path):
            return f"{path} is missing"
        size = os.path.getsize(path)
        if size != meta["bytes"]:
            return f"{path} has {size} bytes, expected {meta['bytes']} (truncated?)"
        if file_sha256(path) != meta["sha256"]:
            return f"{path} fails its sha256 checksum (corrupted)"
    return None


def step_dirs(root: str) -> list[tuple[int, str]]:
    """(step, path) of every ``step_…`` directory under `root`, newest first."""
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        m = _STEP_DIR.match(name)
        if m and os.path.isdir(os.path.join(root, name)):
            found.append((int(m.group(1)), os.path.join(root, name)))
    return sorted(found, reverse=True)


def find_latest_valid(root: str, warn: Callable[[str], None] = _warn) -> str | None:
    """The newest checkpoint under `root` that verifies; each bad one is reported via `warn`."""
    for _, path in step_dirs(root):
        problem = verify(path)
        if problem is None:
            return path
        warn(f"skipping invalid checkpoint: {problem}")
    return None


def remove_stray_temps(directory: str) -> None:
    """Delete what an interrupted save left in `directory` (temporary step folders, .part files)."""
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.startswith(_TMP_PREFIX) or name.endswith(".part"):
            _warn(f"removing stray temporary {path} (an interrupted save)")
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
