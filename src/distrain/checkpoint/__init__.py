"""Checkpoints that never lose work: atomic, checksummed, sharded through DCP, resumable exactly.

:class:`Checkpointer` (what ``ctx.checkpointer(...)`` returns) saves and restores, from the
:class:`JobHandles` it is given (the process, the store, callbacks: never the Context itself);
:mod:`.files` is the on-disk format and its verification, :mod:`.dcp_io` DCP reads and writes
without unpickling objects, :mod:`.state` what is saved (DCP and plain state, RNG), :mod:`.writer`
one save, :mod:`.nodes` shared vs per-node directories, :mod:`.legacy` the 0.1 format;
:mod:`.memory_tier` the tmpfs tier of
``memory_every_steps``, imported only by a checkpointer that asks for it.
"""

from __future__ import annotations

from distrain.checkpoint.checkpointer import Checkpointer
from distrain.checkpoint.files import (
    CheckpointError,
    SaveAbandoned,
    file_sha256,
    find_latest_valid,
    load_file,
    step_dirs,
    verify,
)
from distrain.checkpoint.handles import Healer, JobHandles, Resumed
from distrain.checkpoint.nodisk import NoDisk
from distrain.checkpoint.state import rng_state, set_rng_state

__all__ = [
    "CheckpointError",
    "Checkpointer",
    "Healer",
    "JobHandles",
    "NoDisk",
    "Resumed",
    "SaveAbandoned",
    "file_sha256",
    "find_latest_valid",
    "load_file",
    "rng_state",
    "set_rng_state",
    "step_dirs",
    "verify",
]
