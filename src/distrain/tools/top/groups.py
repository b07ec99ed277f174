"""`distrain top` on a `distrain run --replicas R --run-dir DIR` job: each group's ranks and heals.

Under ``--replicas`` each group writes its metrics into ``DIR/group<g>/`` (its ranks are numbered
0..N-1 inside the group) and the launcher appends one JSON line per event (a group lost, healed,
rejoined, failed) to ``DIR/replicas.jsonl``.  :func:`snapshot` reads either kind of run
directory, so `distrain top` needs no flag for it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from distrain import events
from distrain.events import REPLICA_EVENTS_FILE
from distrain.monitor.recorder import METRICS_SUBDIR
from distrain.tools.top.status import NoJobError, Thresholds, job_status

#: how many of the newest events a snapshot carries
LAST_EVENTS = 10
_GROUP_DIR = re.compile(r"group(\d+)$")


def group_dirs(run_dir: str | Path) -> dict[int, Path]:
    """The replica groups' run directories under `run_dir` (empty for an ordinary job)."""
    root = Path(run_dir)
    if not root.is_dir() or (root / METRICS_SUBDIR).is_dir():
        return {}
    found = {}
    for sub in root.iterdir():
        match = _GROUP_DIR.match(sub.name)
        if match and (sub / METRICS_SUBDIR).is_dir():
            found[int(match.group(1))] = sub
    return dict(sorted(found.items()))


def read_events(run_dir: str | Path) -> list[dict[str, Any]]:
    """The launcher's replica events, oldest first (a torn last line is left out), read by
    the one reader of event streams (:func:`distrain.events.read_events`)."""
    found = events.read_events(str(Path(run_dir) / REPLICA_EVENTS_FILE), kind="replica")[0]
    return [ev for ev in found if "event" in ev]


def snapshot(
    run_dir: str | Path, now: float | None = None, th: Thresholds | None = None
) -> dict[str, Any]:
    """What `distrain top` shows: one job's ranks, or every replica group's; raises NoJobError."""
    dirs = group_dirs(run_dir)
    if not dirs:
        return job_status(run_dir, now=now, th=th)
    now = time.time() if now is None else now
    snaps = {}
    for g, d in dirs.items():
        try:
            snaps[g] = job_status(d, now=now, th=th)
        except NoJobError:  # a group whose files hold no record yet
            continue
    if not snaps:
        raise NoJobError(f"no records yet in the replica groups of {run_dir}")
    rows = [dict(r, group=g) for g, s in snaps.items() for r in s["ranks"]]
    totals = [s["totals"] for s in snaps.values()]
    rates = [t["samples_per_s"] for t in totals if t["samples_per_s"] is not None]
    replica_events = read_events(run_dir)
    groups = [
        {
            "group": g,
            "status": s["status"],
            "ranks": s["totals"]["ranks"],
            "min_step": s["totals"]["min_step"],
            "max_step": s["totals"]["max_step"],
        }
        for g, s in snaps.items()
    ]
    statuses = {s["status"] for s in snaps.values()}
    status = "running"
    if statuses <= {"finished", "failed"}:
        status = "failed" if "failed" in statuses else "finished"
    elif "stalled" in statuses:
        status = "stalled"
    return {
        "run_dir": str(run_dir),
        "time": now,
        "status": status,
        "totals": {
            "ranks": len(rows),
            "world_size": sum(t["world_size"] for t in totals),
            "missing_ranks": [
                f"{g}:{r}" for g, s in snaps.items() for r in s["totals"]["missing_ranks"]
            ],
            "hosts": sorted({h for t in totals for h in t["hosts"]}),
            "min_step": min(t["min_step"] for t in totals),
            "max_step": max(t["max_step"] for t in totals),
            "samples_per_s": sum(rates) if rates else None,
            "rss": sum(t["rss"] for t in totals),
            "stalled": [f"{g}:{r}" for g, s in snaps.items() for r in s["totals"]["stalled"]],
            "stragglers": [f"{g}:{r}" for g, s in snaps.items() for r in s["totals"]["stragglers"]],
            "elapsed": max(t["elapsed"] for t in totals),
            "groups": len(dirs),
            "heals": sum(1 for ev in replica_events if ev["event"] == "healed"),
        },
        "groups": groups,
        "events": replica_events[-LAST_EVENTS:],
        "ranks": rows,
    }
