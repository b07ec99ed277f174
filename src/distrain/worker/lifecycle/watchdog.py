"""Hangs that explain themselves: deliberate collective timeouts and a progress watchdog.

Timeouts (as torchtitan does): forming the group may take long (``init(timeout=…)``, 10 min), but
once the first step has run every collective is expected to be quick, so the process group's
timeout is lowered to the training timeout (``DISTRAIN_TRAIN_TIMEOUT`` seconds, default 300)
with torch's own ``distributed_c10d._set_pg_timeout``.  With NCCL, PyTorch's flight recorder
and async error handling are switched on (``TORCH_NCCL_*``) instead of anything home-made.

The watchdog (``DISTRAIN_WATCHDOG=SECONDS`` or ``distrain run --watchdog SECONDS``): a daemon
thread in every rank publishes a heartbeat (step, seconds since its last step, where its main
thread is) in the job's c10d store every few seconds.  When a rank has seen no step for
SECONDS, it names the stuck rank — one whose heartbeat stopped, or the furthest-behind rank
that is *not* waiting inside torch (the others wait for it in a collective) — and posts a verdict
in the store.  Every rank then dumps all its threads' Python stacks with ``faulthandler`` to its
own stderr, rank 0 prints the one-line summary on the launching console, and every rank exits
with code 124, so the launcher tears the job down within about SECONDS + a few polls.
``kill -USR1 <pid>`` dumps a rank's stacks at any time, watchdog or not (lifecycle/stacks.py).

A rank whose script ended keeps watching (:meth:`Watchdog.finish`, from ``ctx.shutdown()``): it
marks its end in the store and waits until every rank marked its own.  A peer whose heartbeat
then stops for SECONDS without its end mark is frozen: the verdict names it and the ended ranks
exit 124 (why: benchmarks/chaos/RESULTS.md, seed 16 trial 8).
"""

from __future__ import annotations

import datetime as dt
import faulthandler
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from distrain.contract import WATCHDOG_EXIT_CODE
from distrain.log import get_logger
from distrain.process import patching
from distrain.settings import Settings
from distrain.worker.lifecycle.hang_diagnosis import diagnose, main_thread_where
from distrain.worker.lifecycle.stop_job import FROZEN, stop_for_frozen
from distrain.worker.start.attempt import attempt_prefix

_log = get_logger("watchdog")


class Watchdog:
    """A rank's heartbeat thread; see the module docstring."""

    def __init__(
        self,
        store_factory: Callable[[], dist.Store],
        rank: int,
        world_size: int,
        seconds: float,
        poll: float | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.rank, self.world_size, self.seconds = rank, world_size, seconds
        #: where the job's store is, this node, a static job's stop (distrain.settings)
        self.settings = settings if settings is not None else Settings()
        self.poll = poll or max(0.2, min(2.0, seconds / 10))
        self._store_factory = store_factory
        self.step = 0  # optimizer steps of this process: the first one arms the verdicts
        #: the training step this process resumed at (a checkpoint or a heal): what the
        #: heartbeats and verdicts report is that plus this process's steps
        self.resumed = 0
        self._last_progress = time.monotonic()
        self._stop = threading.Event()
        self._wake = threading.Event()  # ends the heartbeat thread's pause early (finish)
        self._ended = False  # this rank's script ended: no more steps, its peers still watched
        self._ended_at = 0.0  # when (monotonic)
        self._all_ended = threading.Event()  # every rank marked its end (or the store is gone)
        self._thread = threading.Thread(target=self._run, name="distrain-watchdog", daemon=True)
        self._seen: dict[
            int, tuple[int, float]
        ] = {}  # rank → (beat, monotonic time it last changed)
        self._store_ok = time.monotonic()  # the last heartbeat round trip through the store
        self._guard = threading.Thread(
            target=self._guard_store, name="distrain-watchdog-store", daemon=True
        )

    def start(self) -> Watchdog:
        """Start the heartbeat thread (and the guard of its store); returns self."""
        self._thread.start()
        self._guard.start()
        return self

    def _guard_store(self) -> None:
        """Give the verdict when the store itself stopped answering.

        The job's store is served by rank 0's process (or its agent), and a store call never
        times out: with rank 0 frozen (SIGSTOP) every rank's heartbeat waited inside the store
        for good and nobody said anything (chaos campaign, seed 15 trials 7 and 22).
        """
        while not self._stop.wait(self.poll):
            now = time.monotonic()
            quiet, idle = now - self._store_ok, now - self._last_progress
            if self.step > 0 and idle > self.seconds and quiet > self.seconds:
                where = f"{self.settings.master_addr}:{self.settings.master_port}"
                self._abort(
                    f"distrain watchdog: no training progress for {self.seconds:g} s; the job's "
                    f"store ({where}, served by rank 0's process or its agent) has not answered "
                    f"for {quiet:.0f} s: rank 0 is {FROZEN}. This rank's Python stack "
                    f"follows; exiting with code {WATCHDOG_EXIT_CODE}.",
                    print_summary=True,
                    frozen={0},
                )
                return

    def stop(self) -> None:
        """Stop the threads (at shutdown)."""
        self._stop.set()
        self._wake.set()

    def finish(self, linger: bool = True) -> None:
        """This rank's script ended: mark it, and watch the peers until every rank marked its end.

        Returns when every rank ended (or the store's host went away: a process that is gone is
        its agent's to see); a peer whose heartbeat stops for the watchdog's time before its
        end mark gets the verdict (and this process exits 124 from the watchdog's thread).
        `linger` False (the script is failing) only stops: its peers may be waiting for it.
        """
        self._ended, self._ended_at = True, time.monotonic()
        if linger and self._thread.is_alive():
            self._wake.set()
            self._all_ended.wait()
        self.stop()

    def progress(self, step: int) -> None:
        """This rank finished `step` (called by Context.step)."""
        self.step = step
        self._last_progress = time.monotonic()

    def resumed_at(self, step: int) -> None:
        """This process resumed training at `step`: the steps it reports count from there."""
        self.resumed = int(step)

    @property
    def training_step(self) -> int:
        """The step this rank last finished, counted over the whole training (resumes included)."""
        return self.resumed + self.step

    def _beat(self, store: dist.Store, beat: int) -> None:
        where, in_torch = main_thread_where()
        store.set(
            f"hb/{self.rank}",
            json.dumps(
                {
                    "beat": beat,
                    "step": self.training_step,
                    "idle": round(time.monotonic() - self._last_progress, 1),
                    "where": where,
                    "in_torch": in_torch,
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "node": self.settings.group_rank or "",
                }
            ),
        )

    def _collect(self, store: dist.Store) -> tuple[dict[int, dict[str, Any]], set[int]]:
        beats: dict[int, dict[str, Any]] = {}
        keys = [f"hb/{r}" for r in range(self.world_size)]
        present = [k for k in keys if store.check([k])]
        values = store.multi_get(present) if present else []
        now = time.monotonic()
        for key, raw in zip(present, values, strict=True):
            r = int(key.split("/")[1])
            beats[r] = json.loads(bytes(raw).decode())
            beat = int(beats[r]["beat"])
            if self._seen.get(r, (None, 0.0))[0] != beat:
                self._seen[r] = (beat, now)
        silent = {r for r, (_, t) in self._seen.items() if now - t > max(3 * self.poll, 5.0)}
        return beats, silent

    def _summary(self, beats: dict[int, dict[str, Any]], silent: set[int]) -> tuple[str, set[int]]:
        stuck, why = diagnose(beats, silent, self.world_size)
        parts = []
        for r in stuck:
            b = beats.get(r, {})
            node = f"node {b['node']}, " if b.get("node") else ""
            parts.append(
                f"rank {r} ({node}host {b.get('host', '?')}, pid {b.get('pid', '?')}) at step "
                f"{b.get('step', '?')} in {b.get('where', '?')}"
            )
        waiting = sorted(r for r in beats if r not in stuck)
        text = (
            f"distrain watchdog: no training progress for {self.seconds:g} s; stuck: "
            f"{'; '.join(parts)} — {why}"
            + (
                f"; rank{'s' if len(waiting) > 1 else ''} {','.join(map(str, waiting))} "
                f"wait{'' if len(waiting) > 1 else 's'} for it"
                if waiting
                else ""
            )
            + ". Every rank's Python stack follows on its stderr; exiting with code "
            f"{WATCHDOG_EXIT_CODE}."
        )
        return text, silent | {r for r in range(self.world_size) if r not in beats}

    def _abort(self, verdict: str, print_summary: bool, frozen: set[int] | None = None) -> None:
        # from here on the job is going down: when a peer exits first and the main thread's
        # collective raises, the rank still ends with the watchdog's code, not a stray error
        exit_on_uncaught()
        if print_summary:
            _log.error(verdict)
        else:  # the reporter's verdict first: stacks written at once would cut into its line
            time.sleep(0.3)
        sys.stderr.write(
            f"distrain watchdog: rank {self.rank} (pid {os.getpid()}) at step "
            f"{self.training_step}, stack:\n"
        )
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        # let the other ranks read the verdict and dump their stacks before anyone tears down
        time.sleep(2 * self.poll + 1)
        stop_for_frozen(
            verdict, frozen, self.world_size, self.settings
        )  # a static multi-node job: every node
        os._exit(WATCHDOG_EXIT_CODE)

    def _run(self) -> None:
        try:
            store = self._store_factory()
        except Exception:
            self._all_ended.set()
            return
        beat = 0
        while True:
            # after this rank's end, look often: the last rank's end mark ends every rank's wait
            self._wake.wait(min(self.poll, 0.25) if self._ended else self.poll)
            self._wake.clear()
            if self._stop.is_set():
                return
            beat += 1
            try:
                ended = self._ended
                self._beat(store, beat)
                if ended:
                    store.set(f"end/{self.rank}", str(self.training_step))
                beats, silent = self._collect(
                    store
                )  # every poll: a beat that stops changing means frozen
                if store.check(["verdict"]):
                    reporter, _, verdict = bytes(store.get("verdict")).decode().partition("\n")
                    lost = silent | {r for r in range(self.world_size) if r not in beats}
                    self._abort(verdict, str(self.rank) == reporter, lost)
                if ended:
                    self._watch_after_end(store, beats)
                elif self.step > 0 and time.monotonic() - self._last_progress > self.seconds:
                    text, frozen = self._summary(beats, silent)
                    # rank 0 prints on the launching console unless its process is frozen
                    by = self.rank if 0 in frozen else 0
                    store.compare_set("verdict", "", f"{by}\n{text}")
                self._store_ok = time.monotonic()
            except Exception:
                if self._stop.is_set():
                    return
                if self._ended:  # the store's host (rank 0) exited after its end: nothing to watch
                    self._all_ended.set()
                    return
                time.sleep(self.poll)

    def _watch_after_end(self, store: dist.Store, beats: dict[int, dict[str, Any]]) -> None:
        """After this rank's end: done when all ranks ended; a verdict for a peer frozen earlier."""
        ended = {r for r in range(self.world_size) if store.check([f"end/{r}"])}
        if len(ended) == self.world_size:
            self._all_ended.set()
            return
        now = time.monotonic()
        # a peer's last sign of life: its heartbeat's last change, or this rank's end for a peer
        # that never sent one (frozen before its watchdog's first beat)
        since = {
            r: self._seen[r][1] if r in self._seen else self._ended_at
            for r in range(self.world_size)
        }
        frozen = sorted(r for r, t in since.items() if r not in ended and now - t > self.seconds)
        if not frozen:
            return
        parts = []
        for r in frozen:
            b = beats.get(r, {})
            heard = (
                f", last heard at step {b['step']} in {b.get('where', '?')}"
                if b
                else ", never heard from"
            )
            parts.append(f"rank {r} (host {b.get('host', '?')}, pid {b.get('pid', '?')}{heard})")
        text = (
            f"distrain watchdog: {'; '.join(parts)} stopped answering for over {self.seconds:g} s "
            f"after rank {self.rank}'s script ended, before its own end: {FROZEN}. "
            "Every rank's Python stack follows on its stderr; exiting with code "
            f"{WATCHDOG_EXIT_CODE}."
        )
        store.compare_set("verdict", "", f"{self.rank}\n{text}")


def _exit_as_watchdog(*_exc: Any) -> None:
    os._exit(WATCHDOG_EXIT_CODE)


def exit_on_uncaught() -> None:
    """From now on an uncaught exception ends this process with the watchdog's exit code."""
    patching.on_uncaught("watchdog", _exit_as_watchdog)


def start_watchdog(
    rank: int, world_size: int, seconds: float, settings: Settings, attempt: int = 0
) -> Watchdog:
    """Start this rank's watchdog on a separate client of the job's store (MASTER_ADDR/PORT).

    `attempt` is the one every rank agreed on (worker/start/attempt.py), never the agent's restart
    count: that differs between nodes, and the watchdogs would not see each other.
    """

    def factory() -> dist.Store:
        if settings.master_addr is None or settings.master_port is None:  # as os.environ[...]
            raise KeyError("MASTER_ADDR" if settings.master_addr is None else "MASTER_PORT")
        store = dist.TCPStore(
            settings.master_addr,
            int(settings.master_port),
            is_master=False,
            timeout=dt.timedelta(seconds=60),
            wait_for_workers=False,
        )
        return dist.PrefixStore(f"{attempt_prefix(attempt)}/watchdog", store)

    return Watchdog(factory, rank, world_size, seconds, settings=settings).start()


def warn_unarmed(rank: int) -> None:
    """Say once that the watchdog has nothing to watch: no optimizer step of a prepared model."""
    if rank == 0:
        _log.warning(
            "distrain: warning: the watchdog is not armed: ctx.log() is being called "
            "but no optimizer "
            "step over a model from ctx.prepare_model() was seen (step an optimizer "
            "over the prepared "
            "model's parameters, or call ctx.step(opt))"
        )


def on_step(ctx: Any, step: int) -> None:
    """Called after every optimizer step: feed the watchdog; after the first, shorten the timeout"""
    wd = ctx.services.watchdog
    if wd is not None:
        wd.progress(step)
    if step == 1 and ctx.distributed and dist.is_initialized():
        settings = ctx.settings
        timeout = dt.timedelta(seconds=settings.train_timeout_s)
        seconds = settings.watchdog_s
        if seconds is not None:
            # the watchdog must fire before a collective times out, or its explanation is lost
            timeout = max(timeout, dt.timedelta(seconds=2 * seconds + 30))
        setter = getattr(dist, "set_timeout", None) or dist.distributed_c10d._set_pg_timeout
        setter(timeout)
