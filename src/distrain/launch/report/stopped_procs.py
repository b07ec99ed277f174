"""``distrain run --watchdog`` for a job no rank's watchdog watches: processes stopped for good.

A script that never calls ``distrain.init()`` (a plain torch.distributed script, or the children
of a script that starts its own workers) has no progress signal the launcher could watch
(launch/report/watch_notice.py).  One fault is still visible from outside: a process of the job
in the stopped state (SIGSTOP, a ``kill -STOP``; not a debugger's tracing stop) makes every peer
wait in its collectives for torch's 30 min, while the agent sees it alive.  Such a process, stopped
for longer than the watchdog's seconds, is named and SIGKILLed: its rank (or the script that
started it) then fails and the agent restarts the job, as for any other lost rank.  Found by the
chaos campaign (a self-started child SIGSTOPped for good: the job hung).
"""

from __future__ import annotations

import os
import sys
import threading
import time

import psutil

from distrain.launch.command_line import PROG

#: how often the job's processes are looked at (seconds)
POLL_S = 1.0


def describe(proc: psutil.Process) -> str:
    """``pid P (rank R, cmd)`` for the line that names a stopped process."""
    try:
        rank = proc.environ().get("RANK")
        cmd = " ".join(proc.cmdline())[:80]
    except psutil.Error:
        rank, cmd = None, "?"
    where = f"rank {rank}, " if rank is not None else ""
    return f"pid {proc.pid} ({where}{cmd})"


class StoppedProcesses:
    """Kills the launcher's descendants that stay stopped for `seconds`; see the module docstring"""

    def __init__(self, seconds: float, root: int | None = None, poll: float = POLL_S) -> None:
        self.seconds, self.poll = seconds, poll
        self.root = os.getpid() if root is None else root
        self.killed: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="distrain-stopped", daemon=True)

    def start(self) -> StoppedProcesses:
        """Look every POLL_S seconds from a daemon thread; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop looking (the job ended); the thread is gone when this returns."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5 + self.poll)

    def _run(self) -> None:
        since: dict[int, float] = {}
        while not self._stop.wait(self.poll):
            try:
                procs = psutil.Process(self.root).children(recursive=True)
            except psutil.Error:
                return
            now, stopped = time.monotonic(), set()
            for proc in procs:
                try:
                    if proc.status() != psutil.STATUS_STOPPED:
                        continue
                except psutil.Error:
                    continue
                stopped.add(proc.pid)
                first = since.setdefault(proc.pid, now)
                if now - first >= self.seconds and proc.pid not in self.killed:
                    self._kill(proc, now - first)
            for pid in [pid for pid in since if pid not in stopped]:
                del since[pid]

    def _kill(self, proc: psutil.Process, seconds: float) -> None:
        line = (
            f"{PROG}: watchdog: {describe(proc)} was stopped (SIGSTOP) for {seconds:.0f} s "
            f"(--watchdog {self.seconds:g}): killed, so the job restarts or ends"
        )
        print(line, file=sys.stderr, flush=True)
        self.killed.append(proc.pid)
        try:
            proc.kill()  # a stopped process takes SIGKILL at once
        except psutil.Error:
            pass
