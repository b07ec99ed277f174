"""What `distrain run` says while torch's elastic agent runs the job: one line per restart.

torch's agent reports a failed worker in its own words (``failed (exitcode: -9) local_rank: 1
(pid: 379) of fn: run_script (start_method: forkserver)``, then ``Terminating process … via
signal SIGTERM`` for each survivor) and says nothing when it restarts the workers, unless its
INFO lines are on.  distrain keeps those off the console (distrain/noise.py) and says instead (one
line, wrapped here):

    distrain run: rank 1 (pid 379) was killed by SIGKILL; restarting every rank (attempt 1 of 3),
        resuming from step 22

The cause comes from the agent's own failure record; the attempt from its "N/M attempts left;
will restart worker group" record (read through a logging filter: torch keeps the count in the
agent, no public accessor); the step from the last ``checkpoint`` event the workers' checkpointer
reported in the job's stream (distrain/events/).  After a failure the same event gives
:func:`resume_hint`.  ``DISTRAIN_LOG_LEVEL=debug`` keeps torch's lines as well.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from dataclasses import dataclass
from typing import Any

from distrain import noise
from distrain.contract import REPLICA_GROUP
from distrain.events import job_events

PROG = "distrain run"
#: torch's agent: its "attempts left; will restart worker group" record is at INFO
AGENT_LOGGER = "torch.distributed.elastic.agent.server.api"
#: torch's worker contexts: their "failed (exitcode …)" record names the failed worker
WORKERS_LOGGER = "torch.distributed.elastic.multiprocessing.api"


def cause(exitcode: int, rank: int | str, pid: int | str, who: str = "rank") -> str:
    """``rank 1 (pid 379) was killed by SIGKILL`` / ``… exited with code 1``."""
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"{who} {rank} (pid {pid}) was killed by {name}"
    return f"{who} {rank} (pid {pid}) exited with code {exitcode}"


def checkpoint_mark(folder: str | None) -> dict[str, Any] | None:
    """The last ``checkpoint`` event in the job's stream (``step``: None before the first save,
    ``path``); None when no checkpointer with a job folder ran."""
    found = job_events(folder, "checkpoint")
    return found[-1] if found else None


def resume_from(folder: str | None) -> str | None:
    """``resuming from step 22`` (or ``from the start: no checkpoint saved yet``) when the
    workers' checkpointer reported one in the job's `folder`; None when no checkpointer with a
    folder ran."""
    mark = checkpoint_mark(folder)
    if mark is None:
        return None
    step = mark.get("step")
    if step is None:
        return "from the start (no checkpoint saved yet)"
    return f"resuming from step {step}"


def resume_hint(folder: str | None, every_node: bool = False) -> str:
    """``; rerun the same command to resume from step N`` after a failure that left a
    checkpoint, else empty (appended to the verdict: the cause stays on the last line);
    `every_node`: ``… the same command on every node …`` (a multi-node job that stopped)."""
    mark = checkpoint_mark(folder)
    if mark is None or mark.get("step") is None:
        return ""
    where = " on every node" if every_node else ""
    return (
        f"; rerun the same command{where} to resume from step {mark['step']} "
        f"({mark.get('path', '?')})"
    )


@dataclass
class _Failure:
    exitcode: int
    local_rank: int
    pid: int


class RestartReporter(logging.Filter):
    """On the agent's loggers: remember the failed worker, print one line when the agent restarts"""

    def __init__(self, folder: str | None, multinode: bool) -> None:
        super().__init__()
        self.folder = folder
        self.multinode = multinode
        self.last: _Failure | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        args = record.args if isinstance(record.args, tuple) else ()
        if message.startswith("failed (exitcode") and len(args) >= 3:
            try:
                self.last = _Failure(*(int(str(a)) for a in args[:3]))
            except (TypeError, ValueError):
                self.last = None
        elif "attempts left" in message and "will restart" in message and len(args) >= 4:
            self._restarting(int(str(args[2])), int(str(args[3])))
        # the agent's INFO lines are shown only at DISTRAIN_LOG_LEVEL=debug (its level was
        # lowered to INFO for the record above); the rest of its lines pass as before
        return noise.verbose() or record.levelno >= logging.WARNING

    def _restarting(self, left: int, total: int) -> None:
        attempt = total - left + 1
        failed = self.last
        self.last = None
        who = "local rank" if self.multinode else "rank"
        what = (
            cause(failed.exitcode, failed.local_rank, failed.pid, who)
            if failed
            else "a worker failed"
        )
        scope = "this node's ranks" if self.multinode else "every rank"
        line = f"{PROG}: {what}; restarting {scope} (attempt {attempt} of {total})"
        step = resume_from(self.folder)
        if step:
            line += f", {step}"
        print(line, file=sys.stderr, flush=True)


def install(folder: str | None, multinode: bool) -> RestartReporter | None:
    """Filter torch's known noise in this launcher and report restarts (None under --replicas,
    where the top launcher's "replica group G lost … healed" lines say it)."""
    noise.install()
    if os.environ.get(REPLICA_GROUP) is not None:
        return None
    # imported now: its import sets its logger's level, which must not undo the one set below
    import torch.distributed.elastic.agent.server.api  # noqa: F401

    reporter = RestartReporter(folder, multinode)
    agent = logging.getLogger(AGENT_LOGGER)
    # below INFO the agent's restart record is never made; the filter lets only WARNING and
    # up through (all of it at debug), so the console sees no more of the agent than before
    if agent.getEffectiveLevel() > logging.INFO:
        agent.setLevel(logging.INFO)
    agent.addFilter(reporter)
    # first on the workers' logger: the known-noise filter that drops the record comes after
    workers = logging.getLogger(WORKERS_LOGGER)
    workers.filters.insert(0, reporter)
    return reporter
