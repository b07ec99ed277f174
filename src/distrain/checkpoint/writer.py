"""Writing one checkpoint: every rank's files into the temporary directory, then the seal.

Runs in the training thread (sync save) or in a background thread (async).  Ranks coordinate
through DCP's own gloo group (a collective only among checkpoint writers, never interleaved with
the training's collectives) and the process group's TCPStore (each rank reports its files'
checksums under ``<step>/<rank>``); the leader (rank 0, or each node's lowest rank with
per-node directories) writes the manifest and renames the directory into place.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.distributed as dist

from distrain.checkpoint import dcp_io
from distrain.checkpoint.files import (
    _TMP_PREFIX,
    FORMAT,
    LATEST,
    MANIFEST,
    SHARED_FILE,
    CheckpointError,
    SaveAbandoned,
    _fsync_dir,
    atomic_write,
    describe_file,
    rank_file,
    step_dirs,
)
from distrain.process import peers

if TYPE_CHECKING:
    from distrain.checkpoint.handles import JobHandles
    from distrain.checkpoint.nodes import Topology
    from distrain.process.info import ProcessInfo
    from distrain.process.signals import Preemption

#: how long the leader waits for the other ranks' files of one checkpoint
STORE_WAIT_S = 300.0
#: after a stop signal, how long the leader still waits for missing reports before assuming a dead
#: peer
PEER_GONE_S = 5.0


class Owner(Protocol):
    """What a save uses of the checkpointer that started it (checkpointer.py's Checkpointer)."""

    directory: str
    keep: int
    topology: Topology
    preemption: Preemption
    process: ProcessInfo
    handles: JobHandles

    @property
    def dcp_group(self) -> dist.ProcessGroup | None:
        """The gloo group DCP saves over."""
        ...

    def mark(self, step: int | None, path: str) -> None:
        """Tell `distrain run` which step a restart resumes from."""
        ...


class Writer:
    """One save of step `step`: DCP tensors (or None), rank 0's shared state (or None), this rank's.

    `foreground`: the training loop waits for this save (a synchronous one).  Then a save that
    cannot complete (a writer died, a stop signal with no reports) raises :class:`SaveAbandoned`,
    and the worker's lifecycle decides the exit; in the background it is a failed save.
    """

    def __init__(
        self,
        ckpt: Owner,
        step: int,
        tensors: dict[str, Any] | None,
        shared: dict[str, Any] | None,
        mine: dict[str, Any],
        key: str,
        foreground: bool = True,
    ) -> None:
        self.ckpt = ckpt
        # this save's store-key prefix: another checkpointer's save of the same step never matches
        self.key = key
        self.process = ckpt.process
        self.foreground = foreground
        self.step = step
        self.tensors = tensors
        self.shared = shared
        self.mine = mine
        self.name = f"step_{step:08d}"
        self.tmp_dir = os.path.join(ckpt.directory, _TMP_PREFIX + self.name)

    def run(self) -> None:
        """Write this rank's files and report them; the leader seals the checkpoint."""
        topo = self.ckpt.topology
        os.makedirs(self.tmp_dir, exist_ok=True)
        files: dict[str, dict[str, Any]] = {}
        get_store = self.ckpt.handles.store
        store = get_store() if get_store is not None and self.process.distributed else None
        if store is not None:  # who writes: the leader can tell a dead writer from a slow one
            store.set(
                f"{self.key}/{self.step}/{self.process.rank}/process", peers.process_identity()
            )
        if self.tensors is not None:
            group = (
                self.ckpt.dcp_group if topo.shared else None
            )  # per-node: the node's leader alone
            dcp_io.save(self.tensors, self.tmp_dir, group)
            writer_rank = dist.get_rank(group) if group is not None else 0
            for name in dcp_io.own_files(self.tmp_dir, writer_rank, coordinator=writer_rank == 0):
                files[name] = describe_file(os.path.join(self.tmp_dir, name))
        sha, size = atomic_write(
            os.path.join(self.tmp_dir, rank_file(self.process.rank)),
            lambda f: torch.save(self.mine, f),
        )
        files[rank_file(self.process.rank)] = {"sha256": sha, "bytes": size}
        if self.shared is not None:
            shared = self.shared
            sha, size = atomic_write(
                os.path.join(self.tmp_dir, SHARED_FILE), lambda f: torch.save(shared, f)
            )
            files[SHARED_FILE] = {"sha256": sha, "bytes": size}
        if store is not None:
            # the store, not a collective: safe from a background thread, in any order
            store.set(f"{self.key}/{self.step}/{self.process.rank}", json.dumps(files))
        if self.process.rank != topo.leader:
            return
        if store is not None:
            keys = [f"{self.key}/{self.step}/{r}" for r in topo.members if r != self.process.rank]
            self._wait_for_ranks(store, keys)
            for key in keys:
                files.update(json.loads(store.get(key)))
        self._seal(files)

    def _wait_for_ranks(self, store: dist.Store, keys: list[str]) -> None:
        """Wait for the other ranks' reports, in short slices so a stop signal is seen.

        A stop signal arriving *during* the save (rather than the one that caused it), with the
        reports still missing PEER_GONE_S later, means the agent is tearing the job down because
        a peer died: the save is abandoned (its temporary directory is cleaned up at the next
        start) with :class:`SaveAbandoned`, and the worker's lifecycle ends the process.
        """
        preemption = self.ckpt.preemption
        deadline = time.monotonic() + STORE_WAIT_S
        next_look = time.monotonic() + 0.2
        while not store.check(keys):  # polling, not wait(): a wait timeout logs C++ warnings
            time.sleep(0.02)
            if time.monotonic() > next_look:
                next_look = time.monotonic() + 0.2
                dead = self._dead_writer(store, [k for k in keys if not store.check([k])])
                if dead is not None:
                    message = (
                        f"save of step {self.step} abandoned: rank {dead} died while writing it"
                    )
                    if not self.foreground:
                        raise CheckpointError(message)
                    raise SaveAbandoned(message, exit_code=1)
            if self.foreground and preemption.peer_gone(PEER_GONE_S):
                raise SaveAbandoned(
                    f"save of step {self.step} abandoned: stop signal and no report from the other "
                    f"ranks for {PEER_GONE_S:g} s",
                    exit_code=preemption.request.exit_code,
                )
            if time.monotonic() > deadline:
                late = ", ".join(k.rsplit("/", 1)[-1] for k in keys if not store.check([k]))
                raise CheckpointError(
                    f"rank(s) {late} did not report their files for step {self.step} within "
                    f"{STORE_WAIT_S:g} s"
                )

    def _dead_writer(self, store: dist.Store, missing: list[str]) -> int | None:
        """A rank among the `missing` reports whose process is gone (only ranks of this machine
        and pid namespace can be seen), or None."""
        for key in missing:
            if store.check([f"{key}/process"]) and peers.gone(store.get(f"{key}/process").decode()):
                return int(key.rsplit("/", 1)[1])
        return None

    def _seal(self, files: dict[str, dict[str, Any]]) -> None:
        directory = self.ckpt.directory
        on_disk = set(os.listdir(self.tmp_dir))
        unreported = sorted(on_disk - set(files))
        if unreported:  # a file nobody vouches for must not become part of a valid checkpoint
            raise CheckpointError(
                f"{self.tmp_dir}: {', '.join(unreported)} written but not reported by any rank"
            )
        manifest = {
            "format": FORMAT,
            "step": self.step,
            "world_size": self.process.world_size,
            "time": time.time(),
            "per_node": self.ckpt.topology.per_node,
            "files": files,
        }
        atomic_write(
            os.path.join(self.tmp_dir, MANIFEST),
            lambda f: f.write(json.dumps(manifest, indent=1).encode()),
        )
        final = os.path.join(directory, self.name)
        if os.path.exists(final):  # an invalid leftover of the same step (we resumed before it)
            trash = os.path.join(directory, f"{_TMP_PREFIX}old-{self.name}")
            os.replace(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
        os.replace(self.tmp_dir, final)
        _fsync_dir(directory)
        atomic_write(os.path.join(directory, LATEST), lambda f: f.write(f"{self.name}\n".encode()))
        for _, old in step_dirs(directory)[self.ckpt.keep :]:
            shutil.rmtree(old, ignore_errors=True)
        self.ckpt.mark(self.step, final)  # what a restart resumes from, for `distrain run`
