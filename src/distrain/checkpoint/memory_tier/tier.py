"""The node-local memory tier: a snapshot of the whole state every K steps in tmpfs.

``ctx.checkpointer(dir, every_steps=N, memory_every_steps=K)`` adds it to the disk checkpoints.
Each rank writes its own snapshot (model and optimizer as this rank holds them: the whole
replica under DDP, its shards under FSDP; its plain state, RNG states and buffers) into
``<root>/distrain-mem-<hash of the checkpoint directory>/own/`` (root: ``/dev/shm``, or
``DISTRAIN_MEMORY_DIR``): the data file first, then a small JSON record of its size and digest
(:mod:`.files`), each written under a temporary name and renamed, so a snapshot without
its record is incomplete and one whose bytes do not match is torn; either is skipped with one
line.  At most 2 snapshots per rank are kept.  With several nodes each snapshot is also copied
to a peer node's ``peer/`` folder (:mod:`.peer`).

On restart every rank lists what it holds; the job takes the newest step that every rank can get
(its own file, or a peer's copy), unless the disk holds a newer one.  The folder is removed when
the job ends well and kept when it fails; folders of jobs whose launcher is gone are swept when
a job starts on the node.  This module is imported only by a checkpointer that asks for the tier.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import shutil
import threading
import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from distrain.checkpoint.files import CheckpointError, atomic_write
from distrain.checkpoint.loading import load_plain
from distrain.checkpoint.memory_tier import reworld
from distrain.checkpoint.memory_tier.files import (
    FORMAT,
    KEEP,
    load_bytes,
    newest_valid,
    prune,
    remove_partial,
    size_of,
    snapshot_name,
    sweep,
    write_snapshot,
)
from distrain.checkpoint.memory_tier.shards import local_shards, rewrap
from distrain.checkpoint.state import _to_cpu_copy, rng_state, set_rng_state
from distrain.process import peers

if TYPE_CHECKING:
    from distrain.checkpoint.handles import JobHandles, NodePlace
    from distrain.checkpoint.state import Registered

#: "auto": the share of step time the snapshots may take without faults
AUTO_BUDGET = 0.02
#: "auto": steps between two agreements on K (every rank must snapshot the same steps)
AUTO_EVERY = 50


def auto_every(cost_s: float, step_s: float, budget: float = AUTO_BUDGET) -> int:
    """The smallest K whose snapshots (`cost_s` each) take at most `budget` of the step time."""
    return max(1, math.ceil(cost_s / (budget * max(step_s, 1e-9))))


def choice_line(every: int, cost_s: float, step_s: float) -> str:
    """``memory snapshots every 3 steps (0.9 ms each, 1.6 % of a step)``."""
    share = 100 * cost_s / (every * max(step_s, 1e-9))
    plural = "s" if every > 1 else ""
    cost = f"{cost_s * 1e3:.1f} ms each, {share:.1f} % of a step"
    return f"memory snapshots every {every} step{plural} ({cost})"


class MemoryTier:
    """One rank's memory tier: snapshots when due, the choice at restart, the end of the job."""

    def __init__(
        self, handles: JobHandles, directory: str, every: int | str, background: bool = False
    ) -> None:
        if every != "auto" and (not isinstance(every, int) or every < 1):
            raise ValueError(f"memory_every_steps must be a positive int or 'auto', got {every!r}")
        self.handles = handles
        self.process = handles.process
        self.place: NodePlace = handles.memory
        self.folder = self.place.folder(directory)
        self.own = os.path.join(self.folder, "own")
        self.auto = every == "auto"
        self.every = 1 if self.auto else int(every)
        self.background = background
        self.group: dist.ProcessGroup | None = None
        self.peer: Any = None  # a peer.Replicator with several nodes
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._cache: dict[str, torch.Tensor] = {}
        self._last_call: float | None = None
        self._step_s = 0.0  # moving average of a step without the snapshot
        self._cost_s = 0.0  # moving average of a snapshot's stall
        self._next_choice = 0
        self._chosen = False
        self._samples = 0
        self.last_step: int | None = None
        self.started = False
        self.mark: Any = None  # the checkpointer's mark(step, path), for `distrain run`'s line
        self.peer_folder = os.path.join(self.folder, "peer")
        self._replicated = True  # no sharded model: a snapshot restores on another world size
        #: snapshots until those of another world size are dropped: KEEP + 1 rounds, so that
        #: every rank of this world holds one of its own by then (a step is a collective)
        self._until_drop = KEEP + 1

    # -- start -----------------------------------------------------------------------------
    def start(self, reg: Registered) -> None:
        """Make the folder, sweep ended jobs', refuse when tmpfs cannot hold it (collective)."""
        if self.process.distributed:
            group = dist.new_group(backend="gloo")
            assert isinstance(group, dist.ProcessGroup)
            self.group = group
        failed = None  # a full tmpfs fails these small writes first: refused below in one line
        if self.process.local_rank == 0:
            try:
                sweep(self.place.root, self.folder)
                os.makedirs(self.own, exist_ok=True)
                for sub in ("own", "peer"):  # a rank killed mid-write (the node's ranks wait)
                    remove_partial(os.path.join(self.folder, sub))
                owner = f"{peers.process_identity().rsplit(':', 1)[0]}:{self.place.owner_pid}"
                atomic_write(os.path.join(self.folder, "owner"), lambda f: f.write(owner.encode()))
            except OSError as err:
                failed = f"{type(err).__name__}: {err.strerror or err}"
        # the folder (and a DISTRAIN_MEMORY_DIR not made yet) exists for every rank of the node
        # before they measure its room: a missing root measured 0 MiB free, and the job refused
        self.process.barrier()
        need = (
            _estimate(reg)
            * (KEEP + 1)
            * self.process.local_world_size
            * (2 if self.process.num_nodes > 1 else 1)
        )
        free = shutil.disk_usage(self.place.root).free if os.path.isdir(self.place.root) else 0
        existing = size_of(self.folder)  # the snapshots it holds are replaced, not added
        mine = (need > free + existing or failed is not None, failed, need, free, self.process.rank)
        views = self.process.gather_object(mine)  # all refuse, or none
        short = next((view for view in views if view[0]), None)
        if short is not None:  # the figures of the rank that is short, whichever rank prints
            _, why, need, free, rank = short
            where = f"rank {rank}'s {self.place.root}" if len(views) > 1 else self.place.root
            raise CheckpointError(
                f"memory snapshots need about {need / 2**20:.1f} MiB in {where}, which has "
                f"{free / 2**20:.1f} MiB free{f' ({why})' if why else ''}: give tmpfs "
                "more room (--shm-size), set DISTRAIN_MEMORY_DIR, or drop memory_every_steps"
            )
        os.makedirs(self.own, exist_ok=True)
        self.started = True
        self._replicated = not reg.sharded
        if self.process.num_nodes > 1 and self.group is not None:
            from distrain.checkpoint.memory_tier.peer import Replicator

            self.peer = Replicator(self.process, self.group, self.peer_folder)

    # -- restart ----------------------------------------------------------------------------
    def restore(
        self, reg: Registered, found: tuple[int, str] | None, per_node: bool
    ) -> tuple[dict[str, Any], str] | None:
        """Load the newest snapshot every rank can get, unless the disk's (`found`: this rank's
        view; per node: each node's) is newer (collective).  Returns (the plain part, where it
        came from), or None: the disk's turn."""
        self.start(reg)
        disk = [v for v in self.process.gather_object(found) if v] if per_node else [found]
        disk_step = max((v[0] for v in disk if v), default=None)
        mine = newest_valid(self.own, self.process.rank, self.process.world_size)
        held = self.peer.held() if self.peer is not None else {}
        others, sharded = reworld.other_worlds(
            [self.own, self.peer_folder], self.process.world_size
        )
        if not self._replicated:
            others = {}
        gathered = self.process.gather_object((mine, held, others, sharded))
        views = [(v[0], v[1]) for v in gathered]
        avail: list[set[int]] = [set(v[0]) for v in views]
        for _, their_held in views:
            for r, steps in their_held.items():
                if r < len(avail):  # a copy of a rank this job has is usable
                    avail[r].update(steps)
        common = set.intersection(*avail) if avail else set()
        step = max(common, default=None)
        moved = reworld.newest([v[2] for v in gathered])  # taken on another world size
        if moved is not None and (step is None or moved[0] > step):
            if disk_step is None or moved[0] >= disk_step:
                got = self._restore_moved(reg, [v[2] for v in gathered], moved)
                if got is not None:
                    return got
        elif step is None and any(v[3] for v in gathered) and self.handles.main:
            print(
                "distrain: the memory snapshots were taken on another world size with sharded "
                "(FSDP) state: resuming from disk",
                flush=True,
            )
        if step is None or (disk_step is not None and disk_step > step):
            if step is not None and self.handles.main:
                print(f"distrain: disk step {disk_step} is newer than memory step {step}")
            return None
        if step in mine:
            path = os.path.join(self.own, snapshot_name(self.process.rank, step))
            with open(path, "rb") as f:
                data, where = f.read(), f"memory {path}"
        else:
            data, where = None, ""
        if self.peer is not None:  # ranks without their own get it from the holder of a copy
            got = self.peer.fetch_missing(step, views, data)
            if got is not None:
                data, where = got
        assert data is not None
        state = load_bytes(data, where)
        reg.load_dcp_state(rewrap(state["dcp"], reg))
        load_plain(reg, state["shared"], where)
        set_rng_state(state["rng"])
        reg.load_local_buffers(state["buffers"])
        self.last_step = step
        return state["shared"], where

    def _restore_moved(
        self, reg: Registered, views: list[reworld.Found], key: tuple[int, int]
    ) -> tuple[dict[str, Any], str] | None:
        """Resume from a replicated snapshot taken on another world size (reworld.py)."""
        got = reworld.restore(self.process, self.group, views, key)
        if got is None:
            return None
        state, own, where = got
        reg.load_dcp_state(state["dcp"])
        load_plain(reg, state["shared"], where)
        reg.load_local_buffers(state["buffers"])
        if own is not None:
            set_rng_state(own["rng"])
            reg.load_local_buffers(own["buffers"])
        self.last_step = key[0]
        return state["shared"], where

    # -- snapshots --------------------------------------------------------------------------
    def maybe_snapshot(self, step: int, reg: Registered, shared: Any, saved: bool) -> None:
        """Call after every step: snapshot when due (`shared`: returns the plain part; `saved`:
        the disk checkpoint of this step was just written, so no snapshot, nor a step time)."""
        if not self.started:  # restore() was not called: nothing registered
            return
        now = time.perf_counter()
        if saved:
            self._last_call = None
            return
        if self._last_call is not None:  # a step, from the end of the last call (its snapshot)
            between = now - self._last_call
            self._step_s = between if not self._step_s else 0.8 * self._step_s + 0.2 * between
        if self.auto and step >= self._next_choice and self._cost_s:
            self._choose(step)
        if step % self.every == 0:  # "auto": every step until the first choice
            self.snapshot(step, reg, shared(step))
            cost = time.perf_counter() - now
            self._samples += 1
            if self._samples > 1:  # the first one pays one-off costs (allocations, lazy imports)
                self._cost_s = cost if not self._cost_s else 0.8 * self._cost_s + 0.2 * cost
        self._last_call = time.perf_counter()

    def _choose(self, step: int) -> None:
        """K from the measured costs, the same on every rank (the slowest rank's)."""
        self.wait()  # no background transfer on the group meanwhile
        measured = torch.tensor([self._cost_s, self._step_s], dtype=torch.float64)
        if self.group is not None:
            dist.all_reduce(measured, op=dist.ReduceOp.MAX, group=self.group)
        cost, per_step = float(measured[0]), float(measured[1])
        every = auto_every(cost, per_step)
        if (every != self.every or not self._chosen) and self.handles.main:
            print(f"distrain: {choice_line(every, cost, per_step)}", flush=True)
        self.every, self._chosen = every, True
        self._next_choice = step + AUTO_EVERY

    def snapshot(self, step: int, reg: Registered, shared: dict[str, Any]) -> None:
        """Snapshot `step` now (after the previous one finished)."""
        self.wait()
        record = {
            "format": FORMAT,
            "step": step,
            "rank": self.process.rank,
            "dcp": local_shards(reg.dcp_state()),
            "shared": shared,
            "rng": rng_state(),
            "buffers": reg.local_buffers(),
        }
        if not self.background:
            try:
                self._write(step, record)
            except (OSError, RuntimeError) as err:  # a full tmpfs: torch.save's RuntimeError
                raise self._failed(err) from err
            return
        record = _to_cpu_copy(record, self._cache, "m")  # the loop may change the live tensors now
        self._thread = threading.Thread(
            target=self._write_safely, args=(step, record), name="distrain-mem", daemon=True
        )
        self._thread.start()

    def _write(self, step: int, record: dict[str, Any]) -> None:
        meta = {"world_size": self.process.world_size, "replicated": self._replicated}
        rank = self.process.rank
        if self.peer is None:  # serialized straight into tmpfs, digested on the way: one pass
            write_snapshot(self.own, rank, step, lambda f: torch.save(record, f), meta)
        else:  # the same bytes go to the peer
            buf = io.BytesIO()
            torch.save(record, buf)
            data = buf.getbuffer()
            write_snapshot(self.own, rank, step, lambda f: f.write(data), meta)
        prune(self.own, rank)
        self.last_step = step
        self._until_drop -= 1
        if self._until_drop == 0 and self.process.local_rank == 0:  # every rank wrote 1 since
            reworld.drop([self.own, self.peer_folder], self.process.world_size)
        if self.peer is not None:
            self.peer.replicate(step, data, meta)
        if self.mark is not None:  # `distrain run`'s restart line (0.05 ms: measured)
            self.mark(step, f"memory {self.folder}")

    def _write_safely(self, step: int, record: dict[str, Any]) -> None:
        try:
            self._write(step, record)
        except BaseException as err:  # reported by the next wait()
            self._error = err

    def wait(self) -> None:
        """Block until a background snapshot is written (raises its error, if any)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise self._failed(err) from err

    def _failed(self, err: BaseException) -> CheckpointError:
        """The one line of a snapshot that failed, with the room left (a full tmpfs shows as
        torch.save's ``unexpected pos``, not as ENOSPC)."""
        free = shutil.disk_usage(self.place.root).free / 2**20
        return CheckpointError(
            f"memory snapshot failed: {type(err).__name__}: {err} ({free:.1f} MiB free in "
            f"{self.place.root})"
        )

    # -- the end ----------------------------------------------------------------------------
    def finish(self, ended_well: bool) -> None:
        """At the end: remove this rank's snapshots when the job ended well; keep them if not."""
        with contextlib.suppress(CheckpointError):
            self.wait()
        self.group = None
        if not ended_well:
            return
        rank = self.process.rank
        prune(self.own, rank, keep=0)
        remove_partial(self.own, rank)
        reworld.drop([self.own, self.peer_folder], self.process.world_size)
        if self.peer is not None:
            self.peer.forget()
        for sub in ("own", "peer"):  # the last rank of the node to leave removes the folder
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(self.folder, sub))
        if not os.path.exists(self.own) and not os.path.exists(os.path.join(self.folder, "peer")):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.folder, "owner"))
                os.rmdir(self.folder)


def _estimate(reg: Registered) -> int:
    """Bytes of one rank's snapshot, before the optimizer made its state: parameters, buffers
    and up to two optimizer moments per parameter (Adam's), plus 1 MiB of the rest."""
    params = sum(
        t.numel() * t.element_size() for m in reg.modules.values() for t in m.state_dict().values()
    )
    return 3 * params + 2**20
