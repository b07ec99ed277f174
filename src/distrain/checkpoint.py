"""Checkpoints that never lose work: atomic, checksummed, rank-aware, resumable bit for bit.

Layout of a checkpoint directory::

    DIR/step_00000120/shared.pt        rank 0: model, optimizer, scheduler, scaler, loader, extras
    DIR/step_00000120/rank_00001.pt    every rank: its RNG states (Python, NumPy, torch CPU, CUDA)
    DIR/step_00000120/manifest.json    sha256 and size of every file; written after all of them
    DIR/latest                         "step_00000120", written last (for people and tools)

Every rank writes its files into ``DIR/.tmp-step_…`` (each file: temporary name, fsync,
rename) and reports the checksums through the process group's store; rank 0 then writes the
manifest and renames the directory into place, so a ``step_…`` directory is complete or absent.
On start the newest directory whose manifest and checksums verify is used; anything else is
reported by name and skipped, never loaded.  Loading uses ``torch.load(weights_only=True)``.

Model and optimizer states are taken from rank 0 (replicated data parallelism: every rank holds
the same); sharded states (FSDP, ZeRO) are not supported here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import random
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from .signals import StopRequest

if TYPE_CHECKING:
    from .context import Context

FORMAT = 1
SHARED_FILE = "shared.pt"
MANIFEST = "manifest.json"
LATEST = "latest"
_STEP_DIR = re.compile(r"^step_(\d{8,})$")
_TMP_PREFIX = ".tmp-"
#: how long rank 0 waits for the other ranks' files of one checkpoint
STORE_WAIT_S = 300.0


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used safely (refused payload, incompatible job), one line."""


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


def _warn(message: str) -> None:
    print(f"distrain: checkpoint: {message}", file=sys.stderr, flush=True)


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


def load_file(path: str) -> Any:
    """torch.load with weights_only=True; a pickled object is refused with a one-line error."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        detail = str(err).strip().splitlines()
        hint = next((line.strip() for line in detail if "GLOBAL" in line or "Unsupported" in line), detail[0] if detail else "")
        raise CheckpointError(
            f"refusing to load {path}: it contains a pickled Python object, not only tensors and plain data "
            f"(torch.load weights_only=True: {hint})"
        ) from None


def verify(ckpt_dir: str) -> str | None:
    """None when `ckpt_dir` is complete and every checksum matches; else why not (naming the file)."""
    manifest_path = os.path.join(ckpt_dir, MANIFEST)
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
        files = manifest["files"]
        int(manifest["step"])
    except FileNotFoundError:
        return f"{manifest_path} is missing (checkpoint incomplete)"
    except (ValueError, KeyError, TypeError) as err:
        return f"{manifest_path} is unreadable ({type(err).__name__})"
    if SHARED_FILE not in files:
        return f"{manifest_path} lists no {SHARED_FILE}"
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


# -- state ---------------------------------------------------------------------------------------
def rng_state() -> dict[str, Any]:
    """This process's RNG states in weights_only-loadable form."""
    import numpy as np

    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "kind": str(np_state[0]),
            "keys": torch.from_numpy(np_state[1].astype("int64")),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "gauss": float(np_state[4]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    import numpy as np

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype("uint32"), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)


def _to_cpu_copy(obj: Any) -> Any:
    """A deep copy with every tensor cloned to CPU memory (the async snapshot)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _to_cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu_copy(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_to_cpu_copy(v) for v in obj)
    return obj


def _unwrap(obj: Any) -> Any:
    return obj.module if isinstance(obj, torch.nn.parallel.DistributedDataParallel) else obj


def _loader_state(loader: Any) -> dict[str, Any]:
    """The loader position; the end of an epoch is stored as the start of the next one."""
    state = dict(loader.state_dict())
    sampler = getattr(loader, "global_sampler", None)
    if sampler is not None and state.get("step_in_epoch", 0) >= sampler.steps_per_epoch():
        state["epoch"] = int(state["epoch"]) + 1
        state["step_in_epoch"] = 0
    return state


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
        self.stop = StopRequest(grace_s)
        self._handle_signals = handle_signals
        self._pending: threading.Thread | None = None
        self._pending_error: BaseException | None = None
        self._last_saved: int | None = None
        self._flag = torch.zeros(1)
        self.last_stall_s = 0.0  # time the training loop waited in the last save (benchmarks)
        if handle_signals:
            self.stop.install()

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
                print(f"distrain: checkpoint: no valid checkpoint in {self.directory}: starting fresh", file=sys.stderr, flush=True)
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
        return Resumed(step=int(shared["step"]), path=path, extra=dict(shared.get("extra", {})))

    # -- save --------------------------------------------------------------------------------
    def _epoch_end_due(self) -> bool:
        loader = self.objects.get("loader")
        sampler = getattr(loader, "global_sampler", None)
        if not self.every_epochs or sampler is None:
            return False
        at_end = loader.step_in_epoch >= sampler.steps_per_epoch()
        return at_end and (loader.epoch + 1) % self.every_epochs == 0

    def _stop_agreed(self) -> bool:
        """Whether any rank got a stop signal; every rank gets the same answer at the same step."""
        if not self._handle_signals:
            return False
        if not self.ctx.distributed:
            return self.stop.requested
        self._flag.fill_(1.0 if self.stop.requested else 0.0)
        return bool(self.ctx.all_reduce(self._flag, op="max").item() > 0)

    def maybe_save(self, step: int) -> bool:
        """Call after every optimizer step with the number of steps done; True when it saved.

        Saves when `step` is a multiple of ``every_steps`` or an epoch (per ``every_epochs``) just
        ended.  When any rank received SIGTERM/SIGINT, all ranks save here and exit with 128+signal.
        """
        if self._stop_agreed():
            self.save(step, wait=True)
            self.ctx.print(f"distrain: checkpoint at step {step} written; exiting on the stop signal")
            code = self.stop.exit_code
            self.ctx.shutdown()
            raise SystemExit(code)
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
            shared, mine = _to_cpu_copy(shared), _to_cpu_copy(mine)
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

    def close(self) -> None:
        """Finish any background save and restore the signal handlers."""
        self.wait()
        self.stop.uninstall()

    def _shared_state(self, step: int) -> dict[str, Any]:
        states: dict[str, Any] = {}
        for name, obj in self.objects.items():
            states[name] = _loader_state(obj) if name == "loader" else _unwrap(obj).state_dict()
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
            store.wait(keys, _timedelta(STORE_WAIT_S))
            for key in keys:
                files.update(json.loads(store.get(key)))
        self._seal(step, tmp_dir, files)

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


def _timedelta(seconds: float) -> Any:
    import datetime as dt

    return dt.timedelta(seconds=seconds)
