"""torch.distributed.checkpoint (DCP) reads and writes, without unpickling arbitrary objects.

DCP's ``FileSystemReader`` loads the ``.metadata`` index with plain ``pickle.load`` and its
default load planner reads non-tensor values with ``torch.load(weights_only=False)``: a crafted
checkpoint could run code.  distrain loads through :class:`SafeReader` (``.metadata`` through an
unpickler that admits only DCP's metadata classes, ``torch.Size``, dtypes and layouts) and
:class:`WeightsOnlyPlanner` (``weights_only=True`` for every value); DCP already reads tensors
with ``weights_only=True``.  Checksums are verified before either runs (:func:`.files.verify`).
"""

from __future__ import annotations

import io
import os
import pickle
import re
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import CheckpointException, FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem

from distrain.checkpoint.files import CheckpointError
from distrain.noise import quiet_warnings

METADATA_FILE = ".metadata"

# one process, or one node writing its full replica alone, is what no_dist=True is for: its
# warning is in distrain's one list of known noise
quiet_warnings()

#: the globals a DCP ``.metadata`` pickle may name (what torch 2.x writes); nothing else loads
_METADATA_CLASSES = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata",
        "MetadataIndex",
        "StorageMeta",
        "TensorProperties",
        "TensorStorageMetadata",
        "ChunkStorageMetadata",
        "BytesStorageMetadata",
        "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath"},
    "collections": {"OrderedDict"},
}


class _MetadataUnpickler(pickle.Unpickler):
    """Admits DCP metadata classes and torch dtypes; refuses every other global."""

    def find_class(self, module: str, name: str) -> Any:
        if name in _METADATA_CLASSES.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"global '{module}.{name}' is not a DCP metadata type")


def load_metadata(path: str) -> Metadata:
    """Unpickle a DCP ``.metadata`` file with the restricted unpickler (one line if refused)."""
    try:
        with open(path, "rb") as f:
            metadata = _MetadataUnpickler(f).load()
    except (pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError) as err:
        raise CheckpointError(f"refusing to load {path}: not plain DCP metadata ({err})") from None
    if not isinstance(metadata, Metadata):
        raise CheckpointError(
            f"refusing to load {path}: it holds a {type(metadata).__name__}, not DCP Metadata"
        )
    return metadata


def saved_keys(path: str) -> set[str]:
    """The names of everything the DCP checkpoint in `path` holds (``optimizer.state.w.step``)."""
    return set(load_metadata(os.path.join(path, METADATA_FILE)).state_dict_metadata)


class SafeReader(FileSystemReader):
    """DCP's file reader with ``.metadata`` loaded by the restricted unpickler (before DCP runs,
    so a refusal is one line, not DCP's per-rank tracebacks)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._metadata = load_metadata(os.path.join(path, METADATA_FILE))

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """The checkpoint's DCP index, unpickled with only DCP metadata types allowed."""
        metadata = self._metadata
        storage_meta = getattr(metadata, "storage_meta", None) or StorageMeta()
        storage_meta.load_id = self.load_id
        metadata.storage_meta = storage_meta
        return metadata


class WeightsOnlyPlanner(DefaultLoadPlanner):
    """DCP's default load planner; non-tensor values load with ``torch.load(weights_only=True)``."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        """Load one non-tensor value (an lr, a step count) without unpickling objects."""
        try:
            obj = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise CheckpointError(
                f"refusing to load {read_item.dest_index.fqn}: a pickled Python object ({first})"
            ) from None
        if self.flatten_state_dict:
            from torch.distributed.checkpoint._traverse import (
                set_element,  # what the base class uses
            )

            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj


def _one_line(err: CheckpointException, what: str) -> CheckpointError:
    """DCP's exception (a BaseException carrying every rank's traceback) as one line."""
    for exc, _trace in err.failures.values():
        if isinstance(exc, CheckpointError):
            return exc
    ranks = ", ".join(str(r) for r in sorted(err.failures))
    exc = next(iter(err.failures.values()))[0] if err.failures else err
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return CheckpointError(f"{what} failed on rank(s) {ranks}: {type(exc).__name__}: {first}")


def save(state: dict[str, Any], directory: str, group: dist.ProcessGroup | None) -> None:
    """Write `state` (tensors, DTensors, plain values) as a DCP checkpoint into `directory`.

    ``group=None`` writes alone (no collective: a single process, or one node's full replica).
    """
    writer = FileSystemWriter(
        directory, single_file_per_rank=True, sync_files=True, thread_count=1, overwrite=True
    )
    try:
        dcp.save(
            state,
            storage_writer=writer,
            planner=_lowest_rank_planner(),
            process_group=group,
            no_dist=group is None,
        )
    except CheckpointException as err:
        raise _one_line(err, f"DCP save into {directory}") from None


def _lowest_rank_planner() -> DefaultSavePlanner:
    """DCP's planner, writing each replicated tensor from the lowest rank holding it.

    Its default lets whichever rank has written least so far write a replicated tensor; with
    plain BatchNorm under FSDP/HSDP the ranks' buffers differ, and the checkpoint must hold
    rank 0's copy (each rank's own is in its rank file).
    """
    try:
        return DefaultSavePlanner(dedup_save_to_lowest_rank=True)
    except TypeError:  # torch < 2.5: no choice, DCP's default dedup
        return DefaultSavePlanner()


def load(state: dict[str, Any], directory: str, group: dist.ProcessGroup | None) -> None:
    """Read the DCP checkpoint in `directory` into `state` in place (resharding as needed)."""
    try:
        dcp.load(
            state,
            storage_reader=SafeReader(directory),
            planner=WeightsOnlyPlanner(),
            process_group=group,
            no_dist=group is None,
        )
    except CheckpointException as err:
        raise _one_line(err, f"DCP load from {directory}") from None


def own_files(directory: str, rank: int, coordinator: bool) -> list[str]:
    """The DCP files this process wrote into `directory`: its ``__<rank>_<n>.distcp`` (rank in
    the saving group), and ``.metadata`` on the coordinator."""
    pattern = re.compile(rf"^__{rank}_\d+\.distcp$")
    names = [n for n in os.listdir(directory) if pattern.match(n)]
    if coordinator and os.path.exists(os.path.join(directory, METADATA_FILE)):
        names.append(METADATA_FILE)
    return sorted(names)
