"""``distrain run --watchdog`` on a script that never starts the watchdog: say so, in one line.

The watchdog runs inside the workers: ``distrain.init()`` starts it and ``ctx.step``/the optimizer
steps feed it (worker/lifecycle/).  A plain torch.distributed script has no such progress signal
the launcher could watch instead (its output and CPU use say nothing about steps), so the launcher
only makes the silence visible: every rank whose watchdog started reports a ``watchdog`` event in
the job's stream (distrain/events/), and when no rank of this node has reported one after the
watchdog's own bound (at least MIN_DELAY_S), or by the job's end, one warning goes to stderr.  From
then on the launcher watches the one fault it can see from outside: a process of the job stopped
(SIGSTOP) for longer than the watchdog's seconds is named and killed
(launch/report/stopped_procs.py).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING

from distrain.contract import WATCHDOG
from distrain.events import job_events
from distrain.launch.command_line import PROG
from distrain.launch.plan import LaunchPlan

if TYPE_CHECKING:
    from distrain.launch.report.stopped_procs import StoppedProcesses

#: the earliest the line comes during a job: a script that does call ``distrain.init()`` may take
#: this long to reach it (imports, data, rendezvous) on a loaded machine, where a shorter
#: --watchdog would name a script that is about to be watched
MIN_DELAY_S = 60.0


class WatchNotice:
    """Says once that --watchdog watches nothing; see the module docstring."""

    def __init__(
        self, folder: str, seconds: float, script: str, delay: float | None = None
    ) -> None:
        self.folder, self.seconds, self.script = folder, seconds, script
        #: when the line comes during the job: the watchdog's bound, not before MIN_DELAY_S
        self.delay = max(seconds, MIN_DELAY_S) if delay is None else delay
        self._said = False
        self._lock = threading.Lock()
        #: from the notice on: the job's processes stopped for over `seconds` are killed
        self.stopped: StoppedProcesses | None = None
        self._timer = threading.Timer(self.delay, self._check, kwargs={"ending": False})
        self._timer.daemon = True

    def start(self) -> WatchNotice:
        """Check once the watchdog's bound has passed (a daemon timer); returns self."""
        self._timer.start()
        return self

    def line(self, ending: bool) -> str:
        """The warning, during the job (`ending` False) or at its end."""
        if ending:
            did = "did not, so nothing was watched"
        else:
            did = (
                f"has not in its first {self.delay:g} s, so only a process stopped (SIGSTOP) for "
                f"over {self.seconds:g} s is watched"
            )
        head = f"{PROG}: warning: --watchdog watches scripts that call distrain.init()"
        return f"{head}; {self.script} {did}"

    def _check(self, ending: bool) -> None:
        with self._lock:
            if self._said or job_events(self.folder, "watchdog"):
                return
            self._said = True
        print(self.line(ending), file=sys.stderr, flush=True)
        if not ending:
            from distrain.launch.report.stopped_procs import StoppedProcesses

            self.stopped = StoppedProcesses(self.seconds).start()

    def finish(self) -> None:
        """At the job's end (before the job's folder goes): the line, if it is still due."""
        self._timer.cancel()
        if self.stopped is not None:
            self.stopped.stop()
        if os.path.isdir(self.folder):
            self._check(ending=True)


def start(launch: LaunchPlan, folder: str | None) -> WatchNotice | None:
    """Start watching for the marks when --watchdog is on under torchrun's agent, else None.

    Under mpirun/horovodrun the ranks of other hosts cannot leave a mark in this host's folder.
    """
    seconds = launch.env.get(WATCHDOG)
    if not folder or seconds is None or launch.args.launcher != "torchrun":
        return None
    return WatchNotice(
        folder, float(seconds), os.path.basename(launch.args.training_script)
    ).start()
