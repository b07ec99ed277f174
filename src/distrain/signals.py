"""Preemption signals: SIGTERM/SIGINT become "checkpoint at the end of this step, then exit".

A scheduler (SLURM, Kubernetes, torchrun's agent on shutdown) sends SIGTERM and kills for good a
grace period later.  :class:`StopRequest` turns the signal into a flag that the training loop
polls at step boundaries (the checkpointer all-reduces it so every rank stops at the *same* step).

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
import sys
import threading
import time
from types import FrameType

#: the signals treated as "stop soon": preemption and Ctrl-C
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    """Records the first stop signal and enforces a grace period; install() once per process."""

    def __init__(self, grace_s: float = 25.0) -> None:
        self.grace_s = grace_s
        self.signum: int | None = None
        self.received_at: float | None = None
        self._installed = False
        self._previous: dict[int, object] = {}
        self._wake_r: int | None = None
        self._old_wakeup_fd = -1

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
        for sig in STOP_SIGNALS:
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

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            self.received_at = time.monotonic()
            print(
                f"distrain: received {signal.Signals(signum).name}: checkpointing at the end of this step, "
                f"then exiting (grace {self.grace_s:g} s)",
                file=sys.stderr,
                flush=True,
            )
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
            if any(b in (int(s) for s in STOP_SIGNALS) for b in data):
                break
        time.sleep(self.grace_s)
        print(
            f"distrain: still running {self.grace_s:g} s after the stop signal (stuck in a collective?); exiting now",
            file=sys.stderr,
            flush=True,
        )
        os._exit(self.exit_code)
