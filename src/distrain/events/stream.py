"""The one channel from the workers back to `distrain run`: typed events in one JSONL stream.

The launcher makes one folder per job and names it in ``DISTRAIN_JOB_DIR``
(:data:`distrain.contract.JOB_DIR`); every process of the job (ranks, a self-starting script's
children, a rank's fresh-interpreter fallback) appends its reports to ``events.jsonl`` there
with :func:`emit`, and the launcher reads them back with :func:`read_events`, from the start or
from where it stopped reading.  The end-of-job lines (step breakdown, ``--cpu`` counts, a
rank's cause) and the restart lines are all made from this stream; the fast start's fallback is
said live by its worker and kept here as a record.

Each line is one JSON object: ``kind`` (one of :data:`KINDS`) and the writer's identity
(``rank``, ``node``, ``group``, ``pid``, ``time``), then the kind's own fields.  A line is
written with a single ``write`` on a descriptor opened with ``O_APPEND``: the kernel places each
write at the end of the file whole, so lines of concurrent writers (ranks of one node, all
sharing the file) never interleave.  A write cut short (a full disk) leaves a partial line,
which the reader skips; the event written after it, glued to it, is still read.  This module
imports no torch: both sides use it.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from distrain.settings import for_report

#: the stream's file name in the job's folder
FILE = "events.jsonl"
#: `distrain run --replicas --run-dir DIR`: the launcher's replica events, for `distrain top DIR`
REPLICA_EVENTS_FILE = "replicas.jsonl"

#: every kind of event and what it carries besides the writer's identity
KINDS = {
    # a rank's step breakdown at its exit (monitor/breakdown.py): ``summary``
    "breakdown": "summary",
    # a rank raised: ``message`` (lifecycle/failure.py), the verdict when its exit was not seen
    "failure": "message",
    # a rank's watchdog started (worker/init.py): the --watchdog notice stays quiet
    "watchdog": "",
    # the node's checkpoint leader saved: ``step``, ``path`` (the restart and resume lines)
    "checkpoint": "step, path",
    # a --cpu rehearsal process at exit: ``counts`` of the GPU calls it mapped
    "rehearsal": "counts",
    # a rank of a static job stopped its node's launcher for good (worker/lifecycle/): ``reason``
    "stop": "reason",
    # the fast start's fallback to fresh interpreters, by the first worker needing it: ``reason``
    "fallback": "reason",
    # a self-starting script's child (worker/self_start/members.py): ``state`` join (``rank``,
    # ``world_size``, ``watched``), formed, or error (``message``), read by the script's watch
    "group": "state, ...",
    # --replicas, in the groups' shared folder (DISTRAIN_FT_EVENTS): ``event`` "lost" (a group's
    # agent saw a worker die), "joined" (a worker passed its first quorum, healed or not),
    # "final" (a process's last step and state digest, for the end check) or "refused" (a
    # process the groups cannot replicate: ``reason``, the job's last line), and their fields
    "replica": "event, ...",
}


def stream(folder: str) -> str:
    """The events file in the job's `folder`."""
    return os.path.join(folder, FILE)


def identity() -> dict[str, Any]:
    """Who writes: rank (None outside a rank), node, replica group, pid and the time."""
    settings = for_report()
    rank = settings.agent_rank
    node = settings.group_rank
    return {
        "rank": int(rank) if rank and rank.isdigit() else None,
        "node": int(node) if node and node.isdigit() else None,
        "group": settings.replica_group,
        "pid": os.getpid(),
        "time": time.time(),
    }


def emit(kind: str, folder: str | None = None, **fields: Any) -> bool:
    """Append one event of `kind` to the job's stream; False when there is none to write to.

    `folder`: the job's folder (default: ``DISTRAIN_JOB_DIR``; unset outside `distrain run`, and
    then nothing is written).  `fields` may override the identity (a breakdown names its rank).
    Never raises for a folder that is gone: the launcher is exiting and no one would read it.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r} (known: {', '.join(sorted(KINDS))})")
    folder = folder or for_report().job_dir
    if not folder:
        return False
    line = json.dumps({"kind": kind, **identity(), **fields}, default=str) + "\n"
    try:
        fd = os.open(stream(folder), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        return False
    try:
        os.write(fd, line.encode())  # one write: whole at the end of the file (module docstring)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def read_events(
    path: str, since: int = 0, kind: str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The events in the stream `path` from byte offset `since`, and the offset to read on from.

    Only whole lines are read (a line still being written waits for the next call); lines that
    are not a JSON object with a ``kind`` are skipped.  `kind`: only events of that kind.  A
    missing file is an empty stream.
    """
    try:
        with open(path, "rb") as f:
            f.seek(since)
            data = f.read()
    except OSError:
        return [], since
    end = data.rfind(b"\n") + 1
    events = []
    for raw in data[:end].splitlines():
        event = _parse(raw)
        if isinstance(event, dict) and "kind" in event and (kind is None or event["kind"] == kind):
            events.append(event)
    return events, since + end


def _parse(raw: bytes) -> Any:
    """One line's event; after a write cut short (a full disk) the next writer's event is glued
    to the partial one, and is found where its own ``{"kind"`` starts."""
    start = 0
    while start >= 0:
        try:
            return json.loads(raw[start:])
        except ValueError:
            start = raw.find(b'{"kind"', start + 1)
    return None


def job_events(folder: str | None, kind: str | None = None) -> list[dict[str, Any]]:
    """Every event in the job's `folder` (of `kind`, if given); none without a folder."""
    return read_events(stream(folder), kind=kind)[0] if folder else []
