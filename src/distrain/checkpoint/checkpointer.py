"""Checkpoints that never lose work: atomic, checksummed, sharded through DCP, resumable exactly.

The files and their layout are :mod:`distrain.checkpoint.files`.  Models and their
optimizers are saved with torch.distributed.checkpoint (DCP) from
``torch.distributed.checkpoint.state_dict.get_state_dict``: one shard file per rank for FSDP,
the replicated state spread over the ranks for DDP, and either reloads on another number of
ranks or under the other strategy.  Everything else (scheduler, GradScaler, loader position,
step, ``extra``) is rank 0's ``shared.pt``; each rank's RNG states are its ``rank_N.pt``.

Every rank writes into ``DIR/.tmp-step_…`` and reports its files' checksums through the process
group's store; rank 0 then writes the manifest and renames the directory into place, so a
``step_…`` directory is complete or absent.  On start the newest directory whose manifest and
checksums verify is used; anything else is reported by name and skipped, never loaded.

One thing: the Checkpointer, whose restore and save share one directory's state (group, writer,
marks); the layout, loading, writing and per-node paths are modules of their own already.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import threading
import time
from typing import Any

import torch
import torch.distributed as dist

from distrain.checkpoint import files, loading, nodes
from distrain.checkpoint.files import (
    FORMAT,
    CheckpointError,
    SaveAbandoned,
    _warn,
    find_latest_valid,
)
from distrain.checkpoint.handles import JobHandles, Resumed
from distrain.checkpoint.state import Registered, _to_cpu_copy, register, rng_state, shared_file
from distrain.checkpoint.writer import Writer
from distrain.data.sampler import DistributedLoader
from distrain.errors import recurring
from distrain.events import emit
from distrain.process.signals import Preemption

#: numbers Checkpointer instances in creation order (the same on every rank: creation is collective
#: in effect)
_instances = itertools.count()

#: how long DCP's collectives (and rank 0's wait for the other ranks' files) may take
COLLECTIVE_TIMEOUT = dt.timedelta(seconds=300)


class Checkpointer:
    """Save every N steps and/or epochs, resume at start, checkpoint and exit on SIGTERM/SIGINT.

    Use it as::

        ckpt = ctx.checkpointer("ckpt", every_steps=100, keep=3)
        resumed = ckpt.restore(model=model, optimizer=opt, scheduler=sched, loader=loader)
        step = resumed.step
        for epoch in range(loader.epoch, epochs):
            for batch in loader:
                ...train one step...
                step += 1
                ckpt.maybe_save(step)   # saves when due; on a stop signal saves and exits
        ckpt.save(step)                 # the final state (then a rerun has nothing left to do)

    ``restore`` registers the objects (anything with state_dict/load_state_dict; DDP and FSDP
    models and their optimizers go through DCP) and loads the newest valid checkpoint into them.
    ``extra`` is a dict of plain data (numbers, strings, lists, tensors) saved with every
    checkpoint and returned on resume.  With ``async_save=True`` the loop stalls only for a copy
    to CPU memory; a background thread writes it.  It is a collective API: call
    restore/maybe_save/save on every rank.

    What it uses of the job (the process, the store, shutdown hooks) comes
    in `handles` (:class:`~.handles.JobHandles`): the Context gives them; ``JobHandles()`` is one
    plain process.
    """

    def __init__(
        self,
        handles: JobHandles,
        directory: str | os.PathLike[str],
        every_steps: int = 0,
        every_epochs: int = 0,
        keep: int = 3,
        async_save: bool = False,
        handle_signals: bool = True,
        grace_s: float = 25.0,
        memory_every_steps: int | str = 0,
    ) -> None:
        if every_steps < 0 or every_epochs < 0:
            raise ValueError("every_steps and every_epochs must be >= 0")
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.handles = handles
        #: this process's place in the job (rank, world, node); its collectives are the job's
        self.process = handles.process
        self.directory = os.fspath(directory)
        self.every_steps = every_steps
        self.every_epochs = every_epochs
        self.keep = keep
        self.async_save = async_save
        self.objects: dict[str, Any] = {}
        self.extra: dict[str, Any] = {}
        self.preemption = Preemption(
            self.process,
            grace_s,
            handle_signals,
            handles.stuck,
            is_main=handles.main,
            shutdown=handles.shutdown,
            slurm_job_id=handles.slurm_job_id,
        )
        self.topology = nodes.Topology.single()
        self._reg = Registered()
        # DCP's own group: safe from a background thread
        self._group: dist.ProcessGroup | None = None
        self._pending: threading.Thread | None = None
        self._pending_error: BaseException | None = None
        self._last_saved: int | None = None
        # with a save counter: store keys unique to one save of one checkpointer
        self._id = next(_instances)
        self._saves = 0
        self._buffers: dict[str, torch.Tensor] = {}  # async snapshot memory, reused across saves
        self.last_stall_s = 0.0  # time the training loop waited in the last save (benchmarks)
        # in ctx.shutdown() (at exit, or called by the script), before the groups are destroyed:
        # a background save completes, then the DCP group is let go
        handles.on_close(self._release_group)
        self.memory: Any = None  # the tmpfs tier (memory_tier/), imported only when asked
        if memory_every_steps:
            from distrain.checkpoint.memory_tier.tier import MemoryTier

            self.memory = MemoryTier(handles, self.directory, memory_every_steps, async_save)
            self.memory.mark = self.mark

    @property
    def dcp_group(self) -> dist.ProcessGroup | None:
        """The gloo group DCP saves and loads over (None before restore() or without a group).

        Its own group, not the default one: a background save's collectives cannot interleave
        with the training loop's.
        """
        return self._group

    # -- restore ---------------------------------------------------------------------------
    def restore(self, **objects: Any) -> Resumed:
        """Register `objects` and load the newest valid checkpoint into them (collective).

        Stray temporary directories from an interrupted save are removed (with a warning);
        invalid checkpoints are skipped with a warning naming the bad file; with none left the
        job starts fresh, said once.  A subclass may then heal it from a live peer (healed.py).
        A refusal (a checkpoint that does not fit the job) recurs on every restart: marked so.
        """
        with self.handles.uncounted():  # loading optimizer state steps each optimizer once
            try:
                resumed = self._restore_from_disk(objects)
            except CheckpointError as err:
                if "recurs" not in vars(err):  # unless the raise site said otherwise
                    recurring(err)
                raise
            self.mark(None if resumed.fresh else resumed.step, resumed.path or self.directory)
            resumed = self._after_disk(resumed)
        return self.handles.resumed(resumed)

    def agreed_state(self) -> dict[str, Any]:
        """States saved in place of some objects' live ones (a subclass's peers'); none here."""
        return {}

    def _after_disk(self, resumed: Resumed) -> Resumed:
        return resumed  # a subclass heals from a live peer here (checkpoint/healed.py)

    def _restore_from_disk(self, objects: dict[str, Any]) -> Resumed:
        register(self.objects, objects, self.handles.scaler)
        self._reg = Registered.split(self.objects)
        if self.process.distributed and self._group is None:
            group = dist.new_group(backend="gloo", timeout=COLLECTIVE_TIMEOUT)
            assert isinstance(group, dist.ProcessGroup)  # every rank is a member
            self._group = group
        self.topology = nodes.detect(self.process, self.directory)
        nodes.refuse_sharded(self.directory, self._reg.sharded, self.topology)
        found: tuple[int, str] | None = None
        if self.process.rank == self.topology.leader:
            files.remove_stray_temps(self.directory)
            path = find_latest_valid(self.directory)
            found = (int(os.path.basename(path)[5:]), path) if path else None
        if self.topology.shared:
            found = self.process.broadcast_object(found)
        if self.memory is not None:  # memory first, unless the disk holds a newer step
            got = self.memory.restore(self._reg, found, self.topology.per_node)
            if got is not None:
                return self._resumed(*got)
        if self.topology.shared:
            if found is None:
                self._say_fresh()
                return Resumed()
            return self._load(found[1], self._group)
        return self._restore_per_node(found)

    def mark(self, step: int | None, path: str) -> None:
        """Tell `distrain run` the step a restart resumes from (node leader)."""
        if self.process.rank == self.topology.leader:
            emit("checkpoint", self.handles.job_dir, step=step, path=path)

    def _say_fresh(self) -> None:
        if self.handles.main:
            _warn(f"no valid checkpoint in {self.directory}: starting fresh")

    def _restore_per_node(self, found: tuple[int, str] | None) -> Resumed:
        """Per-node directories: the newest step any node holds; nodes without it get it sent."""
        views = self.process.gather_object(found)
        mine = views[self.topology.leader]
        best = max((v[0] for v in views if v is not None), default=None)
        if best is None:
            self._say_fresh()
            return Resumed()
        holders = [
            r
            for r in range(self.process.world_size)
            if (v := views[self.topology.leaders[r]]) and v[0] == best
        ]
        resumed = self._load(mine[1], None) if mine is not None and mine[0] == best else None
        if len(holders) < self.process.world_size:
            src = holders[0]
            payload = (
                (self._reg.dcp_state(), self._shared_state(best))
                if self.process.rank == src
                else None
            )
            payload = self.process.broadcast_object(payload, src=src)
            if resumed is None:
                assert payload is not None
                state, shared = payload
                self._reg.load_dcp_state(state)
                loading.load_plain(self._reg, shared, f"rank {src}'s copy of step {best}")
                _warn(
                    f"step {best} is not on this node's disk: received it from rank {src}; this "
                    "rank keeps its own RNG state"
                )
                resumed = self._resumed(
                    shared, f"{self.directory}/step_{best:08d} (from rank {src})"
                )
        assert resumed is not None
        return resumed

    def _load(self, path: str, group: dist.ProcessGroup | None) -> Resumed:
        """Load the verified checkpoint at `path` (DCP collectively over `group`, or alone)."""
        shared = loading.load(path, self._reg, self.process.rank, self.handles.main, group)
        return self._resumed(shared, path)

    def _resumed(self, shared: dict[str, Any], where: str) -> Resumed:
        step = int(shared["step"])
        self._last_saved = step
        if self.handles.main:
            print(
                f"distrain: resumed from {where} (step {step}, saved on "
                f"{shared['world_size']} rank(s))",
                flush=True,
            )
        self.extra.update(shared.get("extra", {}))
        return Resumed(step=step, path=where, extra=dict(self.extra))

    # -- save --------------------------------------------------------------------------------
    def _epoch_end_due(self) -> bool:
        if not self.every_epochs:
            return False
        loaders = [obj for obj in self.objects.values() if isinstance(obj, DistributedLoader)]
        return any(ld.epoch_ended() and (ld.epoch + 1) % self.every_epochs == 0 for ld in loaders)

    def maybe_save(self, step: int) -> bool:
        """Call after every optimizer step with the number of steps done; True when it saved.

        Saves when `step` is a multiple of ``every_steps`` or an epoch (per ``every_epochs``) just
        ended.  When any rank received SIGTERM/SIGINT, all ranks save here and exit with 128+signal.
        """
        if self.preemption.agreed():
            self.preemption.answering = True
            self.save(step, wait=True)
            self.preemption.exit(step)
        due = (self.every_steps and step % self.every_steps == 0) or self._epoch_end_due()
        if due:
            self.save(step)
        if self.memory is not None:  # a disk save's step needs no snapshot of its own
            self.memory.maybe_snapshot(step, self._reg, self._shared_state, saved=bool(due))
        return bool(due)

    def save(self, step: int, wait: bool | None = None) -> None:
        """Write a checkpoint of the registered objects at `step` now (collective).

        ``wait=False`` returns after the snapshot when async; ``wait=True`` writes synchronously.
        Saving the same step twice is a no-op.
        """
        if self._last_saved == step:
            return
        t0 = time.perf_counter()
        self.wait()
        synchronous = (not self.async_save) if wait is None else wait
        extra = dict(self.extra)
        if self.topology.per_node:  # every node saves rank 0's extras, not its own
            extra = self.process.broadcast_object(extra)
        leader = self.process.rank == self.topology.leader
        shared = self._shared_state(step, extra) if leader else None
        # per-node: the node's leader writes the whole (replicated) model alone; shared: all ranks
        writes_dcp = bool(self._reg.modules) and (self.topology.shared or leader)
        share = (
            (self.process.rank, self.process.world_size)
            if self.topology.shared and self.process.world_size > 1
            else None
        )
        tensors = self._reg.dcp_state(share) if writes_dcp else None
        mine = {
            "format": FORMAT,
            "rank": self.process.rank,
            "step": step,
            "rng": rng_state(),
            "buffers": self._reg.local_buffers(),
        }
        if not synchronous:
            threads = torch.get_num_threads()
            # memcpy is memory-bound; extra threads only contend (10x slower on a busy host)
            torch.set_num_threads(1)
            try:
                shared, mine = (
                    _to_cpu_copy(shared, self._buffers, "s"),
                    _to_cpu_copy(mine, self._buffers, "r"),
                )
                tensors = _to_cpu_copy(tensors, self._buffers, "t")
            finally:
                torch.set_num_threads(threads)
        self._last_saved = step
        self._saves += 1
        # the loop's own thread waits for it: a save that cannot complete is then the lifecycle's
        foreground = synchronous and threading.current_thread() is threading.main_thread()
        key = f"{self._id}.{self._saves}"
        writer = Writer(self, step, tensors, shared, mine, key=key, foreground=foreground)
        if synchronous:
            self._run_now(writer)
        else:
            self._pending = threading.Thread(
                target=self._write_in_background, args=(writer,), name="distrain-ckpt", daemon=True
            )
            self._pending.start()
        self.last_stall_s = time.perf_counter() - t0
        if self.handles.on_stall is not None:  # the step breakdown's checkpoint stall
            self.handles.on_stall(self.last_stall_s)

    def _run_now(self, writer: Writer) -> None:
        try:
            writer.run()
        except SaveAbandoned as err:  # the lifecycle decides whether this process exits
            if self.handles.on_abandoned is None:
                raise
            self.handles.on_abandoned(err)

    def wait(self) -> None:
        """Block until a background save finishes (raises its error, if any)."""
        if self._pending is not None:
            self._pending.join()
            self._pending = None
        if self._pending_error is not None:
            err, self._pending_error = self._pending_error, None
            raise CheckpointError(
                f"background checkpoint failed: {type(err).__name__}: {err}"
            ) from err

    def _finish_at_exit(self) -> None:
        try:
            self.wait()
        except CheckpointError as err:
            _warn(str(err))

    def _release_group(self) -> None:
        # the script's globals keep this object to the end; holding DCP's group would keep its
        # gloo threads alive into interpreter teardown (an exit abort), past destroy_process_group
        self._finish_at_exit()
        self._group = None
        if self.memory is not None:  # kept for the rerun after a failure, removed after a good end
            self.memory.finish(ended_well=not self.handles.failing())

    def close(self) -> None:
        """Finish any background save and restore the signal handlers."""
        self.wait()
        self.preemption.close()

    def _shared_state(self, step: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        objects = {**self._reg.plain_state(), **self.agreed_state()}
        extra = dict(self.extra) if extra is None else extra
        return shared_file(self._reg, step, self.process.world_size, objects, extra)

    def _write_in_background(self, writer: Writer) -> None:
        try:
            writer.run()
        except BaseException as err:  # reported by the next wait()
            self._pending_error = err
