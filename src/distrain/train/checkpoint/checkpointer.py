"""Checkpoints that never lose work: atomic, checksummed, rank-aware, resumable bit for bit.

The files and their layout are :mod:`distrain.train.checkpoint.files`.
Every rank writes its files into ``DIR/.tmp-step_…`` (each file: temporary name, fsync,
rename) and reports the checksums through the process group's store; rank 0 then writes the
manifest and renames the directory into place, so a ``step_…`` directory is complete or absent.
On start the newest directory whose manifest and checksums verify is used; anything else is
reported by name and skipped, never loaded.  Loading uses ``torch.load(weights_only=True)``.

Model and optimizer states are taken from rank 0 (replicated data parallelism: every rank holds
the same); sharded states (FSDP, ZeRO) are not supported here.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ..data import DistributedLoader
from ..signals import Preemption
from .files import (
    _TMP_PREFIX,
    FORMAT,
    LATEST,
    MANIFEST,
    SHARED_FILE,
    CheckpointError,
    _fsync_dir,
    _warn,
    atomic_write,
    find_latest_valid,
    load_file,
    step_dirs,
)
from .state import _to_cpu_copy, _unwrap, rng_state, set_rng_state

if TYPE_CHECKING:
    from ...runtime.context import Context

#: how long rank 0 waits for the other ranks' files of one checkpoint
STORE_WAIT_S = 300.0
#: after a stop signal, how long rank 0 still waits for missing reports before assuming a dead peer
PEER_GONE_S = 5.0


@dataclass
class Resumed:
    """What restore() found: ``step`` (0 on a fresh start), the checkpoint path, user ``extra``."""

    step: int = 0
    path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def fresh(self) -> bool:
        """True when no checkpoint was loaded."""
        return self.path is None


# -- the checkpointer ----------------------------------------------------------------------------
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

    ``restore`` registers the objects (anything with state_dict/load_state_dict; a DDP model is
    unwrapped) and loads the newest valid checkpoint into them.  ``extra`` is a dict of plain data
    (numbers, strings, lists, tensors) saved with every checkpoint and returned on resume.
    With ``async_save=True`` the loop stalls only for a copy to CPU memory; a background thread
    writes it.  It is a collective API: call restore/maybe_save/save on every rank.
    """

    def __init__(
        self,
        ctx: Context,
        directory: str | os.PathLike[str],
        every_steps: int = 0,
        every_epochs: int = 0,
        keep: int = 3,
        async_save: bool = False,
        handle_signals: bool = True,
        grace_s: float = 25.0,
    ) -> None:
        if every_steps < 0 or every_epochs < 0:
            raise ValueError("every_steps and every_epochs must be >= 0")
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.ctx = ctx
        self.directory = os.fspath(directory)
        self.every_steps = every_steps
        self.every_epochs = every_epochs
        self.keep = keep
        self.async_save = async_save
        self.objects: dict[str, Any] = {}
        self.extra: dict[str, Any] = {}
        self.preemption = Preemption(ctx, grace_s, handle_signals)
        self._pending: threading.Thread | None = None
        self._pending_error: BaseException | None = None
        self._last_saved: int | None = None
        self._buffers: dict[str, torch.Tensor] = {}  # async snapshot memory, reused across saves
        self.last_stall_s = 0.0  # time the training loop waited in the last save (benchmarks)
        # runs before ctx.shutdown (atexit is last-in, first-out): a background save completes
        atexit.register(self._finish_at_exit)

    # -- restore ---------------------------------------------------------------------------
    def restore(self, **objects: Any) -> Resumed:
        """Register `objects` and load the newest valid checkpoint into them (collective).

        Stray temporary directories from an interrupted save are removed (with a warning);
        invalid checkpoints are skipped with a warning naming the bad file; with none left the
        job starts fresh, said once.
        """
        for name, obj in objects.items():
            if obj is None:
                continue
            if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
                raise TypeError(f"{name} has no state_dict()/load_state_dict()")
            self.objects[name] = obj
        if "scaler" not in self.objects and self.ctx.scaler is not None:
            self.objects["scaler"] = self.ctx.scaler
        chosen: str | None = None
        if self.ctx.is_main:
            os.makedirs(self.directory, exist_ok=True)
            self._remove_stray_temps()
            chosen = find_latest_valid(self.directory)
            if chosen is None:
                _warn(f"no valid checkpoint in {self.directory}: starting fresh")
        chosen = self.ctx.broadcast_object(chosen)
        if chosen is None:
            return Resumed()
        return self._load(chosen)

    def _remove_stray_temps(self) -> None:
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if name.startswith(_TMP_PREFIX) or name.endswith(".part"):
                _warn(f"removing stray temporary {path} (an interrupted save)")
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(path)

    def _load(self, path: str) -> Resumed:
        shared = load_file(os.path.join(path, SHARED_FILE))
        if shared.get("format") != FORMAT:
            raise CheckpointError(f"{path}: unknown checkpoint format {shared.get('format')!r}")
        states = shared["objects"]
        missing = [name for name in self.objects if name not in states]
        if missing:
            raise CheckpointError(f"{path} has no state for {', '.join(missing)} (saved: {', '.join(states)})")
        for name, obj in self.objects.items():
            try:
                _unwrap(obj).load_state_dict(states[name])
            except ValueError as err:
                raise CheckpointError(f"cannot resume {name} from {path}: {err}") from None
        rank_file = os.path.join(path, f"rank_{self.ctx.rank:05d}.pt")
        if os.path.isfile(rank_file):
            set_rng_state(load_file(rank_file)["rng"])
        else:
            _warn(f"{rank_file} absent (saved on {shared['world_size']} ranks): this rank keeps its own RNG state")
        self._last_saved = int(shared["step"])
        self.ctx.print(f"distrain: resumed from {path} (step {shared['step']}, saved on {shared['world_size']} rank(s))")
        self.extra.update(shared.get("extra", {}))
        return Resumed(step=int(shared["step"]), path=path, extra=dict(self.extra))

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
        shared = self._shared_state(step) if self.ctx.is_main else None
        mine = {"format": FORMAT, "rank": self.ctx.rank, "step": step, "rng": rng_state()}
        if not synchronous:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # memcpy is memory-bound; extra threads only contend (10x slower on a busy host)
            try:
                shared, mine = _to_cpu_copy(shared, self._buffers, "s"), _to_cpu_copy(mine, self._buffers, "r")
            finally:
                torch.set_num_threads(threads)
        self._last_saved = step
        if synchronous:
            self._write(step, shared, mine)
        else:
            self._pending = threading.Thread(target=self._write_in_background, args=(step, shared, mine), name="distrain-ckpt", daemon=True)
            self._pending.start()
        self.last_stall_s = time.perf_counter() - t0

    def wait(self) -> None:
        """Block until a background save finishes (raises its error, if any)."""
        if self._pending is not None:
            self._pending.join()
            self._pending = None
        if self._pending_error is not None:
            err, self._pending_error = self._pending_error, None
            raise CheckpointError(f"background checkpoint failed: {type(err).__name__}: {err}") from err

    def _finish_at_exit(self) -> None:
        try:
            self.wait()
        except CheckpointError as err:
            _warn(str(err))

    def close(self) -> None:
        """Finish any background save and restore the signal handlers."""
        self.wait()
        self.preemption.close()

    def _shared_state(self, step: int) -> dict[str, Any]:
        states: dict[str, Any] = {}
        for name, obj in self.objects.items():
            states[name] = _unwrap(obj).state_dict()
        return {
            "format": FORMAT,
            "step": step,
            "world_size": self.ctx.world_size,
            "objects": states,
            "extra": dict(self.extra),
        }

    def _write_in_background(self, step: int, shared: dict[str, Any] | None, mine: dict[str, Any]) -> None:
        try:
            self._write(step, shared, mine)
        except BaseException as err:  # reported by the next wait()
            self._pending_error = err

    def _store(self) -> dist.Store | None:
        if not self.ctx.distributed:
            return None
        from torch.distributed.distributed_c10d import _get_default_store

        return dist.PrefixStore("distrain/ckpt", _get_default_store())

    def _write(self, step: int, shared: dict[str, Any] | None, mine: dict[str, Any]) -> None:
        """Every rank: its files into the temp dir; rank 0 then seals the checkpoint."""
        name = f"step_{step:08d}"
        tmp_dir = os.path.join(self.directory, _TMP_PREFIX + name)
        os.makedirs(tmp_dir, exist_ok=True)
        files: dict[str, dict[str, Any]] = {}
        rank_name = f"rank_{self.ctx.rank:05d}.pt"
        sha, size = atomic_write(os.path.join(tmp_dir, rank_name), lambda f: torch.save(mine, f))
        files[rank_name] = {"sha256": sha, "bytes": size}
        if shared is not None:
            sha, size = atomic_write(os.path.join(tmp_dir, SHARED_FILE), lambda f: torch.save(shared, f))
            files[SHARED_FILE] = {"sha256": sha, "bytes": size}
        store = self._store()
        if store is not None:
            # the store, not a collective: safe from a background thread, in any order
            store.set(f"{step}/{self.ctx.rank}", json.dumps(files))
        if not self.ctx.is_main:
            return
        if store is not None:
            keys = [f"{step}/{r}" for r in range(1, self.ctx.world_size)]
            self._wait_for_ranks(store, keys, step)
            for key in keys:
                files.update(json.loads(store.get(key)))
        self._seal(step, tmp_dir, files)

    def _wait_for_ranks(self, store: dist.Store, keys: list[str], step: int) -> None:
        """Wait for the other ranks' reports, in short slices so a stop signal is seen.

        A stop signal arriving *during* the save (rather than the one that caused it), with the
        reports still missing PEER_GONE_S later, means the agent is tearing the job down because
        a peer died: the save is abandoned (its temporary directory is cleaned up at the next
        start) and the process exits.
        """
        deadline = time.monotonic() + STORE_WAIT_S
        while not store.check(keys):  # polling, not wait(): a wait timeout logs C++ warnings
            time.sleep(0.02)
            if self.preemption.peer_gone(PEER_GONE_S) and threading.current_thread() is threading.main_thread():
                _warn(f"save of step {step} abandoned: stop signal and no report from the other ranks for {PEER_GONE_S:g} s")
                raise SystemExit(self.preemption.request.exit_code)
            if time.monotonic() > deadline:
                raise CheckpointError(f"the other ranks did not report their files for step {step} within {STORE_WAIT_S:g} s")

    def _seal(self, step: int, tmp_dir: str, files: dict[str, dict[str, Any]]) -> None:
        name = f"step_{step:08d}"
        manifest = {"format": FORMAT, "step": step, "world_size": self.ctx.world_size, "time": time.time(), "files": files}
        atomic_write(os.path.join(tmp_dir, MANIFEST), lambda f: f.write(json.dumps(manifest, indent=1).encode()))
        final = os.path.join(self.directory, name)
        if os.path.exists(final):  # an invalid leftover of the same step (we resumed before it)
            trash = os.path.join(self.directory, f"{_TMP_PREFIX}old-{name}")
            os.replace(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
        os.replace(tmp_dir, final)
        _fsync_dir(self.directory)
        atomic_write(os.path.join(self.directory, LATEST), lambda f: f.write(f"{name}\n".encode()))
        for _, old in step_dirs(self.directory)[self.keep :]:
            shutil.rmtree(old, ignore_errors=True)

