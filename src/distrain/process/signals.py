"""Preemption signals: SIGTERM/SIGINT/SIGUSR1 become "checkpoint at this step's end, then exit".

A scheduler (SLURM, Kubernetes, torchrun's agent on shutdown) sends SIGTERM and kills for good a
grace period later; SLURM sends SIGUSR1 before a time limit when asked (``sbatch --signal``).  Under
SLURM, rank 0 then requeues the job (:mod:`distrain.cluster.slurm_requeue`).  :class:`StopRequest`
turns the signal into a flag that the training loop polls at step boundaries (the checkpointer
all-reduces it so every rank stops at the *same* step).

Python runs signal handlers only in the main thread, between bytecodes: a main thread stuck in a
collective whose peer is gone would never see the flag.  So a watchdog thread, woken through
``signal.set_wakeup_fd`` the moment a signal arrives, ends the process with ``os._exit`` once the
grace period has passed without a clean exit.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

from distrain.log import get_logger
from distrain.process.info import ProcessInfo

_log = get_logger("signals")

#: the signals treated as "stop soon": preemption and Ctrl-C
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

#: set by the first stop signal any StopRequest of this process caught
_received = threading.Event()


def stop_signal_received() -> bool:
    """Whether this process caught a stop signal (a scheduler's, or the agent tearing down)."""
    return _received.is_set()


def stop_signals(under_slurm: bool) -> tuple[signal.Signals, ...]:
    """STOP_SIGNALS, plus SIGUSR1 inside a SLURM job (its time-limit warning, as in Lightning).

    Elsewhere SIGUSR1 keeps its other use: the watchdog's stack dump (worker/lifecycle/watchdog.py).
    """
    return STOP_SIGNALS + ((signal.SIGUSR1,) if under_slurm else ())


class StopRequest:
    """Records the first stop signal and enforces a grace period; install() once per process."""

    def __init__(
        self,
        grace_s: float = 25.0,
        stuck: Callable[[], bool] | None = None,
        under_slurm: bool = False,
    ) -> None:
        self.grace_s = grace_s
        #: inside a SLURM job SIGUSR1 is a stop signal too (:func:`stop_signals`)
        self.under_slurm = under_slurm
        #: True while the main thread waits on a peer that a stop makes pointless to wait for
        self.stuck = stuck
        self.signum: int | None = None
        self.received_at: float | None = None
        #: whether the stop was said (:meth:`announce`)
        self.announced = False
        self._installed = False
        self._previous: dict[int, object] = {}
        self._wake_r: int | None = None
        self._old_wakeup_fd = -1
        self.signals: tuple[signal.Signals, ...] = ()

    @property
    def requested(self) -> bool:
        """True once a stop signal arrived in this process."""
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        """The conventional 128 + signal number (what the shell reports for the signal)."""
        return 128 + (self.signum or signal.SIGTERM)

    def install(self) -> bool:
        """Install the handlers (main thread only); returns False where that is impossible."""
        if self._installed:
            return True
        if threading.current_thread() is not threading.main_thread():
            return False
        self.signals = stop_signals(self.under_slurm)
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handler)
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self._old_wakeup_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self._wake_r = read_fd
        threading.Thread(target=self._watchdog, name="distrain-stop-watchdog", daemon=True).start()
        self._installed = True
        return True

    def uninstall(self) -> None:
        """Restore the previous handlers (main thread only)."""
        if not self._installed or threading.current_thread() is not threading.main_thread():
            return
        for sig, old in self._previous.items():
            with contextlib.suppress(Exception):
                signal.signal(sig, old)  # type: ignore[arg-type]
        with contextlib.suppress(Exception):
            signal.set_wakeup_fd(self._old_wakeup_fd)
        self._installed = False

    def announce(self) -> None:
        """Say the stop once, when the job acts on it (:meth:`Preemption.agreed`), not when the
        signal arrives: torch's agent sends the same SIGTERM to the surviving ranks when one
        failed, and a survivor between steps then said ``checkpointing…`` for a stop nobody
        asked for, whose checkpoint never came (its dead peer fails the agreement instead)."""
        if self.signum is not None and not self.announced:
            self.announced = True
            _log.warning(
                f"distrain: received {signal.Signals(self.signum).name}: checkpointing at the "
                f"end of this step, then exiting (grace {self.grace_s:g} s)"
            )

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            self.received_at = time.monotonic()
            _received.set()
        elif signum == signal.SIGINT:
            # a second Ctrl-C: the user means it
            os._exit(self.exit_code)

    def _watchdog(self) -> None:
        assert self._wake_r is not None
        while True:
            readable, _, _ = select.select([self._wake_r], [], [])
            if not readable:
                continue
            data = os.read(self._wake_r, 64)
            if any(b in (int(s) for s in self.signals) for b in data):
                break
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline:
            # under --replicas, a process waiting in its group's quorum when the agent stops it
            # waits for a dead peer of its own group: no step end will come to checkpoint at
            if self.stuck is not None and self.stuck():
                _log.warning(
                    "distrain: stop signal while waiting on a replica-group peer that is "
                    "gone; exiting now"
                )
                os._exit(self.exit_code)
            time.sleep(0.1)
        name = signal.Signals(self.signum).name if self.signum else "the stop signal"
        _log.error(
            f"distrain: still running {self.grace_s:g} s after {name} (stuck in a "
            "collective?); exiting now"
        )
        os._exit(self.exit_code)


class Preemption:
    """Stop signals as a job-wide decision: every rank checkpoints at the same step, then exits.

    The checkpointer asks :meth:`agreed` after each step (one tiny all-reduce, so ranks that got
    no signal stop with the one that did), writes its checkpoint, and calls :meth:`exit`.
    """

    def __init__(
        self,
        process: ProcessInfo,
        grace_s: float = 25.0,
        handle_signals: bool = True,
        stuck: Callable[[], bool] | None = None,
        *,
        is_main: bool | None = None,
        shutdown: Callable[[], None] | None = None,
        slurm_job_id: str | None = None,
    ) -> None:
        self.process = process
        #: the SLURM job to requeue after the stop checkpoint (None: not under SLURM)
        self.slurm_job_id = slurm_job_id
        #: whether this process prints and requeues (None: rank 0)
        self.is_main = process.rank == 0 if is_main is None else is_main
        #: releases the process group before the exit (the Context's shutdown)
        self.shutdown = shutdown
        self.request = StopRequest(grace_s, stuck, under_slurm=slurm_job_id is not None)
        self.enabled = handle_signals
        #: True while the checkpoint answering the signal is written (a second signal is expected)
        self.answering = False
        if handle_signals:
            self.request.install()

    def agreed(self) -> bool:
        """Whether any rank got a stop signal; every rank gets the same answer at the same step."""
        if not self.enabled:
            return False
        if not self.process.distributed:
            agreed = self.request.requested
        else:
            mine = 1.0 if self.request.requested else 0.0
            agreed = bool(self.process.all_reduce(mine, op="max").item() > 0)
        if agreed:  # every rank is there to checkpoint: now the stop is real
            self.request.announce()
        return agreed

    def peer_gone(self, after_s: float) -> bool:
        """A signal came *during* a save that was not answering one, `after_s` ago or more.

        That is the agent tearing the job down because a peer died: waiting longer for the
        peer's part of the checkpoint is pointless.
        """
        at = self.request.received_at
        return at is not None and not self.answering and time.monotonic() - at > after_s

    def exit(self, step: int) -> NoReturn:
        """Say the checkpoint is written, release the process group, exit with 128 + signal.

        Under SLURM, rank 0 first requeues the job when the signal was the time-limit warning or
        a preemption.  It does so at once: the checkpoint is sealed (rank 0 sealed it after every
        rank's report), and another node's launcher exiting first could get this one killed
        (``srun --kill-on-bad-exit``) before a requeue placed after the shutdown.
        """
        if self.is_main:
            print(
                f"distrain: checkpoint at step {step} written; exiting on the stop signal",
                flush=True,
            )
        code = self.request.exit_code
        if self.is_main and self.request.signum is not None:
            from distrain.cluster.slurm_requeue import requeue_after_stop

            line = requeue_after_stop(self.request.signum, self.slurm_job_id)
            if line:
                _log.warning(line)
        if self.shutdown is not None:
            self.shutdown()
        raise SystemExit(code)

    def close(self) -> None:
        """Restore the previous signal handlers."""
        self.request.uninstall()
