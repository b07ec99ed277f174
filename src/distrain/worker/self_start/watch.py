"""In a self-starting script's own process: watch the children it starts form their group.

torchrun's agent watches the script's process only; its children are nobody's business, and
torch waits for a missing member at the rendezvous for its default timeout (10–30 minutes).
This thread reads the children's ``group`` events (members.py) and their exit status, without
reaping them (``waitid(WNOWAIT)``: the script's own ``join`` still gets the status), and ends
the job when

- a child exits with an error while another is still running (it would wait for the dead one),
- or members have joined, and ``DISTRAIN_FORM_TIMEOUT`` seconds later not all of the world
  size has formed the group (a rank never joined, or is stuck before its rendezvous).

Ending the job: the other children are terminated, the cause is written to the agent's error
file (so `distrain run`'s last line carries it) and logged, and this process exits with 1.
Once the children are gone the script's own ``join`` returns and its end races the watcher's
exit: :meth:`Watcher.script_ended` (run at the script's end) makes the script wait for that exit,
and keeps a watcher from ending a job whose script already finished.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from distrain.events import read_events, stream
from distrain.log import get_logger

_log = get_logger("runtime")

#: a child that died without a note: give the script's own handling (mp.spawn raises with the
#: child's traceback) this long to end the job with the cause before the watcher does
_NO_NOTE_GRACE_S = 3.0
_POLL_S = 0.25
#: at the script's end while the watcher ends the job: its own exit comes within ~3 s (SIGTERM
#: grace) — this bound only guards against a watcher that never gets there
_END_WAIT_S = 30.0


@dataclass
class Watcher:
    """The children of this process and the ``group`` events they wrote in the job's `folder`."""

    folder: str | None
    timeout_s: float
    #: the agent's error file (TORCHELASTIC_ERROR_FILE, from distrain.settings); None: none
    error_file: str | None = None
    procs: dict[int, Any] = field(default_factory=dict)  # pid → multiprocessing.Process
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    _first_join: float | None = None
    _dead_since: dict[int, float] = field(default_factory=dict)
    _ending: bool = False
    _script_done: bool = False
    #: the children's notes so far, by state and pid, and where the stream was read up to
    _seen: dict[str, dict[int, dict]] = field(default_factory=dict)
    _read_to: int = 0

    def add(self, proc: Any) -> None:
        """Watch a child the script started (a multiprocessing process); starts the thread once."""
        with self._lock:
            self.procs[proc.pid] = proc
            if self._ending:  # a Pool replaces the workers the end killed: these go too
                _signal(proc.pid, signal.SIGKILL)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="distrain-form-watch", daemon=True
                )
                self._thread.start()

    def _notes(self, kind: str) -> dict[int, dict]:
        """The children's notes of state `kind` (join, formed, error), by pid."""
        if self.folder:
            events, self._read_to = read_events(stream(self.folder), self._read_to, "group")
            for event in events:
                pid = event.get("pid")
                if isinstance(pid, int):
                    self._seen.setdefault(str(event.get("state")), {})[pid] = event
        return dict(self._seen.get(kind, {}))

    def script_ended(self, wait_s: float = _END_WAIT_S) -> None:
        """At the end of the script (its atexit): wait for an ending watcher; else stop watching.

        Why: the watcher's SIGTERM ends the children, so the script's ``join`` returns and the
        script runs to its end.  Returning from it would hand the elastic agent a result while
        the watcher is about to ``os._exit``: in a forked worker, torch's ``_wrap`` then waits on
        a multiprocessing Event and dies inside it, and the agent's ``Event.set()`` waits forever
        for that dead sleeper (the job hangs); in a lucky order the job even exits 0.  Children
        still running are waited for first, as multiprocessing's own exit would (daemons
        excepted: it terminates those), with the watcher still on guard.  A script that ended
        with every child done keeps its own exit status.
        """
        while True:
            with self._lock:
                ending = self._ending
                running = not ending and any(
                    not getattr(proc, "daemon", False) and exit_status(pid, proc) is None
                    for pid, proc in self.procs.items()
                )
                if not ending and not running:
                    self._script_done = True
                    return
            if ending:
                threading.Event().wait(wait_s)  # the watcher's os._exit(1) ends this process first
                os._exit(1)
            time.sleep(_POLL_S / 5)

    def _loop(self) -> None:
        while True:
            time.sleep(_POLL_S)
            try:
                verdict = self.check(time.monotonic())
            except Exception as err:  # a watch is no reason to print a traceback in the job
                _log.warning(
                    "distrain: stopped watching the script's children "
                    f"({type(err).__name__}: {err})"
                )
                return
            if verdict:
                self._end(verdict)
                return

    def check(self, now: float) -> str | None:
        """The reason to end the job now, or None while the children may still form their group."""
        with self._lock:
            procs = dict(self.procs)
        status = {pid: exit_status(pid, proc) for pid, proc in procs.items()}
        alive = [pid for pid, code in status.items() if code is None]
        joins, formed, errors = self._notes("join"), self._notes("formed"), self._notes("error")
        ranks = {pid: int(n.get("rank", -1)) for pid, n in joins.items()}
        failed = {pid: code for pid, code in status.items() if code is not None and code != 0}
        for pid in failed:
            self._dead_since.setdefault(pid, now)
        if failed and alive:
            pid = min(failed, key=lambda p: (p not in errors, self._dead_since[p]))
            if pid in errors or now - self._dead_since[pid] >= _NO_NOTE_GRACE_S:
                return self._death_line(pid, failed[pid], joins, errors, alive, formed)
        if joins and self._first_join is None:
            self._first_join = now
        if self._first_join is None or now - self._first_join < self.timeout_s or not joins:
            return None
        sizes = {int(n.get("world_size", -1)) for n in joins.values()}
        size = max(sizes)
        watched = all(n.get("watched") for n in joins.values())
        if size < 1 or not watched or len({ranks[p] for p in formed if p in ranks}) >= size:
            return None
        missing = sorted(set(range(size)) - set(ranks.values()))
        waiting = sorted(ranks[p] for p in joins if p not in formed and p in alive)
        who = (
            f"rank {_ranks(missing)} never joined"
            if missing
            else f"rank {_ranks(waiting)} did not finish joining"
        )
        return (
            f"{_script()}: the group of {size} did not form within {self.timeout_s:g} s "
            f"({who}; {len(set(ranks.values()))} of {size} joined) — set "
            "DISTRAIN_FORM_TIMEOUT to wait longer"
        )

    def _death_line(
        self,
        pid: int,
        code: int,
        joins: dict[int, dict],
        errors: dict[int, dict],
        alive: list[int],
        formed: dict[int, dict],
    ) -> str:
        ranks = {p: int(n.get("rank", -1)) for p, n in joins.items()}
        rank = ranks.get(pid, -1)
        with self._lock:
            nth, started = list(self.procs).index(pid) + 1, len(self.procs)
        child = f"child {nth} of {started} (pid {pid})"
        who = f"rank {rank}, {child}" if rank >= 0 else child
        how = (
            f"was killed by {signal.Signals(-code).name}"
            if code < 0
            else f"exited with code {code}"
        )
        when = "after the group formed" if pid in formed else "before the group formed"
        waiting = sorted(ranks[p] for p in alive if p in ranks)
        size = max((int(n.get("world_size", -1)) for n in joins.values()), default=-1)
        missing = sorted(set(range(size)) - set(ranks.values()) - {rank}) if size > 0 else []
        others = (
            f"; rank {_ranks(waiting)} of {size} waited for it"
            if waiting
            else f"; {len(alive)} other worker(s) stopped"
        )
        others += f" (rank {_ranks(missing)} never joined)" if missing else ""
        cause = (
            f": {errors[pid]['message']}" if pid in errors and errors[pid].get("message") else ""
        )
        return f"{_script()}: its {who} {how} {when}{others}{cause}"

    def _end(self, verdict: str) -> None:
        with self._lock:
            if self._script_done:  # the script ended on its own: its exit status stands
                return
            self._ending = True
            procs = dict(self.procs)
        for pid in procs:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and any(
            exit_status(p, q) is None for p, q in procs.items()
        ):
            time.sleep(0.05)
        for pid, proc in procs.items():
            if exit_status(pid, proc) is None:
                _signal(pid, signal.SIGKILL)
        _log.error("distrain: %s", verdict)
        if self.error_file:
            from distrain.worker.lifecycle.failure import write_cause

            write_cause(self.error_file, verdict, verdict)
        os._exit(1)


def exit_status(pid: int, proc: Any = None) -> int | None:
    """A child's exit code (-N: killed by signal N), None while it runs; never reaps it."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already (the script's join, multiprocessing's clean-up)
        code = getattr(proc, "exitcode", 0)  # multiprocessing kept the status it reaped
        return 0 if code is None else int(code)
    if info is None:
        return None
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status


def _script() -> str:
    """The script's name (read late: the fast start sets sys.argv after the watch is installed)."""
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "the script"


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks) if ranks else "?"
