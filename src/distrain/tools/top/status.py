"""Read a run directory's metrics files and judge every rank: running, waiting, stalled, done.

Pure functions of the records and the current time, so `distrain top`'s live view, its
``--json`` output and the tests all see the same judgement.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from distrain.errors import DistrainError
from distrain.events.breakdown import PHASES, breakdown_fractions
from distrain.monitor.recorder import METRICS_SUBDIR

#: bytes read from the end of each rank's file: plenty for the rate window, cheap to re-read
TAIL_BYTES = 64 * 1024


class NoJobError(DistrainError):
    """The directory holds no distrain metrics."""

    one_line = False


@dataclass
class Thresholds:
    """When a rank is flagged."""

    stall_after: float = 10.0  # s without a record (frozen/dead) or without a new step (waiting)
    straggler_ratio: float = 0.5  # step rate below this fraction of the median rate
    window: float = 10.0  # s of records the step rate is measured over


@dataclass
class RankStatus:
    """One row of `distrain top`."""

    rank: int
    host: str
    pid: int
    state: str  # running | waiting | stalled | done | failed
    step: int
    epoch: Any
    loss: float | None
    steps_per_s: float | None
    samples_per_s: float | None
    step_time: float | None
    rss: int
    gpu_util: float | None
    gpu_mem: float | None
    gpu_mem_total: float | None
    age: float  # s since this rank's last record
    idle: float  # s since its step last changed
    records: int
    flags: list[str] = field(default_factory=list)
    values: dict[str, float] = field(default_factory=dict)
    #: shares of the step time over the window: data, compute, comm, optimizer, checkpoint,
    #: other (sum 1); None before a step was counted or with DISTRAIN_BREAKDOWN=0
    breakdown: dict[str, float] | None = None


def read_tail(path: Path, max_bytes: int = TAIL_BYTES) -> list[dict[str, Any]]:
    """The complete, parseable records among the last `max_bytes` of a JSON-lines file."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - max_bytes))
        data = f.read()
    lines = data.split(b"\n")
    if size > max_bytes:
        lines = lines[1:]  # the first line was cut
    records = []
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:  # a line being written right now, or a torn one
            continue
        if isinstance(record, dict) and "rank" in record and "t" in record:
            records.append(record)
    return records


def load_run(run_dir: str | Path) -> dict[int, list[dict[str, Any]]]:
    """Every rank's recent records, by rank; NoJobError when there are none."""
    root = Path(run_dir)
    if not root.is_dir():
        raise NoJobError(f"{run_dir} is not a directory")
    files = (
        sorted((root / METRICS_SUBDIR).glob("rank-*.jsonl"))
        if (root / METRICS_SUBDIR).is_dir()
        else []
    )
    if not files:
        raise NoJobError(
            f"no distrain job in {run_dir} (no {METRICS_SUBDIR}/rank-*.jsonl); start one with "
            f"'distrain run --run-dir {run_dir} script.py' and log with ctx.log(...)"
        )
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for path in files:
        # epoch summaries (for distrain bench) are not heartbeats: rates come from heartbeats
        records = [r for r in read_tail(path) if r.get("event") != "epoch"]
        if records:
            by_rank[int(records[-1]["rank"])] = _last_attempt(records)
    if not by_rank:
        raise NoJobError(f"no distrain job in {run_dir} (its metrics files hold no records yet)")
    return by_rank


def _last_attempt(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records since this rank's last start (an earlier run or restart may share the file)."""
    for i in range(len(records) - 1, -1, -1):
        if records[i].get("event") == "start":
            return records[i:]
    return records


def _window_rate(
    records: list[dict[str, Any]], key: str, recorded: str, window: float
) -> float | None:
    """Increase of `key` per second over the last `window` seconds of records."""
    last = records[-1]
    first = last
    for record in reversed(records):
        if last["t"] - record["t"] > window:
            break
        first = record
    dt = last["t"] - first["t"]
    if dt <= 0:
        return last.get(recorded)  # one record: the writer's own rate since the previous one
    return (last.get(key, 0) - first.get(key, 0)) / dt


def window_breakdown(records: list[dict[str, Any]], window: float) -> dict[str, float] | None:
    """Each phase's share of the step time over the last `window` seconds of records.

    From the cumulative ``breakdown_s`` of the newest record and of the oldest one inside the
    window; when no step finished inside the window, the whole run so far.
    """
    timed = [r for r in records if isinstance(r.get("breakdown_s"), dict)]
    if not timed:
        return None
    last = timed[-1]["breakdown_s"]
    first: dict[str, Any] = {}
    for record in reversed(timed):
        if timed[-1]["t"] - record["t"] > window:
            break
        first = record["breakdown_s"]
    if last.get("steps", 0) - first.get("steps", 0) <= 0:
        first = {}
    if not last.get("steps", 0) - first.get("steps", 0):
        return None
    delta = {phase: float(last.get(phase, 0.0)) - float(first.get(phase, 0.0)) for phase in PHASES}
    return {phase: round(share, 4) for phase, share in breakdown_fractions(delta).items()}


def rank_status(records: list[dict[str, Any]], now: float, th: Thresholds) -> RankStatus:
    """Judge one rank from its records (oldest first)."""
    last = records[-1]
    age = max(0.0, now - last["t"])
    idle = max(0.0, now - last.get("progress_t", last["t"]))
    steps_rate = _window_rate(records, "step", "steps_per_s", th.window)
    samples_rate = _window_rate(records, "samples", "samples_per_s", th.window)
    if last.get("event") == "end":
        state = "failed" if last.get("error") else "done"
        idle = 0.0
    elif age > th.stall_after:
        state = "stalled"
    elif idle > th.stall_after:
        state = "waiting"
    else:
        state = "running"
    values = last.get("values") or {}
    return RankStatus(
        rank=int(last["rank"]),
        host=str(last.get("host", "?")),
        pid=int(last.get("pid", 0)),
        state=state,
        step=int(last.get("step", 0)),
        epoch=last.get("epoch"),
        loss=values.get("loss"),
        steps_per_s=steps_rate,
        samples_per_s=samples_rate,
        step_time=(1.0 / steps_rate) if steps_rate else None,
        rss=int(last.get("rss", 0)),
        gpu_util=last.get("gpu_util"),
        gpu_mem=last.get("gpu_mem"),
        gpu_mem_total=last.get("gpu_mem_total"),
        age=age,
        idle=idle,
        records=len(records),
        values=dict(values),
        breakdown=window_breakdown(records, th.window),
    )


def job_status(
    run_dir: str | Path, now: float | None = None, th: Thresholds | None = None
) -> dict[str, Any]:
    """The whole job: rows per rank with flags, and totals; raises NoJobError."""
    th = th or Thresholds()
    now = time.time() if now is None else now
    by_rank = load_run(run_dir)
    # the newest start tells the current world size; files of ranks beyond it are left over
    # from a larger earlier incarnation (elastic shrink, or a reused run directory)
    newest = max(by_rank.values(), key=lambda records: records[0]["t"])
    world_size = int(newest[0].get("world_size", 1))
    by_rank = {rank: records for rank, records in by_rank.items() if rank < world_size}
    rows = [rank_status(records, now, th) for _, records in sorted(by_rank.items())]
    _flag(rows, th)
    finished = all(r.state in ("done", "failed") for r in rows) and len(rows) >= world_size
    rates = [
        r.samples_per_s
        for r in rows
        if r.samples_per_s is not None and r.state in ("running", "waiting")
    ]
    totals = {
        "ranks": len(rows),
        "world_size": world_size,
        "missing_ranks": sorted(set(range(world_size)) - {r.rank for r in rows}),
        "hosts": sorted({r.host for r in rows}),
        "min_step": min(r.step for r in rows),
        "max_step": max(r.step for r in rows),
        "samples_per_s": sum(rates) if rates else None,
        "rss": sum(r.rss for r in rows),
        "stalled": [r.rank for r in rows if "stalled" in r.flags],
        "stragglers": [r.rank for r in rows if "straggler" in r.flags],
        "elapsed": max(rec[-1]["t"] for rec in by_rank.values())
        - min(rec[0]["t"] for rec in by_rank.values()),
    }
    status = "finished" if finished else ("stalled" if totals["stalled"] else "running")
    if finished and any(r.state == "failed" for r in rows):
        status = "failed"
    return {
        "run_dir": str(run_dir),
        "time": now,
        "status": status,
        "totals": totals,
        "ranks": [asdict(r) for r in rows],
    }


def _flag(rows: list[RankStatus], th: Thresholds) -> None:
    """Stalled: no record for `stall_after` s.  Straggler: step rate far below the median."""
    for row in rows:
        if row.state == "stalled":
            row.flags.append("stalled")
        elif row.state == "waiting":
            row.flags.append("waiting")
    live = [r for r in rows if r.state == "running" and r.steps_per_s is not None]
    if len(live) >= 2:
        median = statistics.median(r.steps_per_s or 0.0 for r in live)
        for row in live:
            if median > 0 and (row.steps_per_s or 0.0) < th.straggler_ratio * median:
                row.flags.append("straggler")
