"""The end-of-job lines of `distrain run`: where a step's time went, a straggler, one advice.

:func:`start` makes the job's folder (``DISTRAIN_JOB_DIR``), whose one event stream every
process of the job reports to (distrain/events/; this side never imports the worker side:
the events are the contract).  Each worker's :class:`~distrain.monitor.breakdown.StepBreakdown`
reports a ``breakdown`` event at shutdown.  After the job the launcher prints, on stderr:

- ``distrain: step time: ...``: rank 0's breakdown and the slowest rank's (by compute);
- ``distrain: straggler: rank R (host H, pid P) computes N % slower than the median rank``
  when one rank's median compute per step exceeds the median of the other ranks' by
  :data:`STRAGGLER_SLOWER` or more;
- ``distrain: advice: ...`` when data loading, the wait for communication or checkpoint saves
  take a large share of the step (:data:`DATA_ADVICE`, :data:`COMM_ADVICE`,
  :data:`CHECKPOINT_ADVICE`), naming what to change, once the job ran
  :data:`ADVICE_MIN_STEPS` steps or more.

Under ``--replicas`` each group's launcher prints its own lines, labelled ``group G``.

A rank that raised also reports a ``failure`` event (worker/lifecycle/failure.py): :func:`cause`
reads it for the failed job's last line when the agent stopped that rank before it had exited.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
from typing import Any

from distrain.contract import JOB_DIR, REPLICA_GROUP
from distrain.events import job_events
from distrain.events.breakdown import PHASES, breakdown_fractions

#: a rank is a straggler when its median compute per step (:func:`compute_s`) is this much above
#: the median of the other ranks'.  Why 0.5: in balanced 2-rank jobs on this 2-core machine,
#: shared with other jobs (load 5-15), the two ranks' training-thread CPU-time medians were at
#: most 20 % apart, while their wall-time medians were up to 5.2x apart
#: (benchmarks/train/RESULTS.md).  0.5 leaves 2.5 times the largest CPU-time gap seen as
#: margin, and still names a rank that takes 1.5x as long, well before it halves the job's speed.
STRAGGLER_SLOWER = 0.5
#: ...and at least this many seconds slower per step: sub-millisecond steps are mostly noise
STRAGGLER_MIN_S = 0.001
#: advise on the loader when data loading is at least this share of the step (averaged over ranks)
DATA_ADVICE = 0.25
#: advise on communication when the wait for it is at least this share of the step
COMM_ADVICE = 0.30
#: advise on checkpoints when saves hold the loop for at least this share of the step
CHECKPOINT_ADVICE = 0.20
#: no advice from fewer steps than this (rank 0's count): a job that crashed after a handful of
#: steps, or a smoke test, measured mostly its first steps' one-off costs (allocations, DDP's
#: bucket rebuild, a lazy import), not the shares of a step it would keep in a long run
ADVICE_MIN_STEPS = 20


def start(env: dict[str, str]) -> str:
    """Create the job's folder (its event stream, the stop claim) and name it in `env`."""
    folder = tempfile.mkdtemp(prefix="distrain-job-")
    env[JOB_DIR] = folder
    return folder


def read(folder: str) -> list[dict[str, Any]]:
    """Every rank's step breakdown in the job's stream, by rank (the last one a rank reported)."""
    ranks: dict[int, dict[str, Any]] = {}
    for event in job_events(folder, "breakdown"):
        record = event.get("summary")
        if not isinstance(record, dict):
            continue
        try:
            ranks[int(record["rank"])] = record
        except (KeyError, TypeError, ValueError):
            continue
    return [ranks[r] for r in sorted(ranks)]


def stop_reason(folder: str | None) -> str | None:
    """Why a rank of this node stopped the launcher for good (its ``stop`` event), or None."""
    reasons = [str(e["reason"]) for e in job_events(folder, "stop") if e.get("reason")]
    return reasons[0] if reasons else None  # one rank claims the stop: one event


def cause(folder: str | None) -> str | None:
    """``rank R (pid P) failed: <cause>`` from the first rank that reported its cause, or None.

    A rank that raised reports a ``failure`` event when it writes its error file
    (worker/lifecycle/failure.py): the launcher's verdict when the agent stopped that rank before
    it exited.
    """
    found = []
    for event in job_events(folder, "failure"):
        try:
            rank = "" if event.get("rank") is None else str(event["rank"])
            found.append((float(event["time"]), rank, int(event["pid"]), str(event["message"])))
        except (KeyError, TypeError, ValueError):
            continue
    if not found:
        return None
    _, rank, pid, message = min(found)  # the first to raise
    return f"rank {rank} (pid {pid}) failed: {message}"


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.0f} %"


def _parts(record: dict[str, Any]) -> str:
    fractions = breakdown_fractions(record.get("seconds") or {})
    shown = [p for p in PHASES if p != "checkpoint" or fractions[p] > 0]
    return " · ".join(f"{phase} {_percent(fractions[phase])}" for phase in shown)


def _ms(seconds: float | None) -> str:
    return "?" if seconds is None else f"{1000 * seconds:.1f} ms"


def compute_s(record: dict[str, Any]) -> float | None:
    """The rank's median compute per step as the straggler rule sees it.

    On CPU, the training thread's CPU time in compute: wall time there stretches whenever other
    processes take the cores, by up to 5.2x between identical ranks on a loaded 2-core machine
    (benchmarks/train/RESULTS.md), while CPU time measures the work.  On CUDA, the events' time
    (the GPU's own, which the host's load does not stretch).
    """
    value = record.get("compute_cpu_median_s") or record.get("compute_median_s")
    return float(value) if value else None


def straggler(records: list[dict[str, Any]]) -> tuple[dict[str, Any], float] | None:
    """The rank whose compute is clearly slower than the others', and how much slower (0.38 = 38 %).

    Each rank's median compute per step is compared with the median of the *other* ranks' (with
    two ranks, the other one): the slowest rank is named when it is at least
    :data:`STRAGGLER_SLOWER` and :data:`STRAGGLER_MIN_S` slower.  None otherwise.
    """
    timed = [(r, c) for r, c in ((r, compute_s(r)) for r in records) if c]
    if len(timed) < 2:
        return None
    slowest, worst = max(timed, key=lambda rc: rc[1])
    others = statistics.median(c for r, c in timed if r is not slowest)
    if others <= 0:
        return None
    slower = worst / others - 1
    if slower >= STRAGGLER_SLOWER and worst - others >= STRAGGLER_MIN_S:
        return slowest, slower
    return None


def advice(records: list[dict[str, Any]], has_straggler: bool = False) -> str | None:
    """One piece of advice when data loading, the wait for communication or checkpoint saves
    dominate (the largest share over its threshold), else None.

    Shares are averaged over the ranks.  With a straggler, the others' comm is mostly waiting
    for it, so no comm advice is given then.
    """
    if not records or int(records[0].get("steps") or 0) < ADVICE_MIN_STEPS:
        return None
    mean = {
        p: statistics.fmean(breakdown_fractions(r.get("seconds") or {})[p] for r in records)
        for p in PHASES
    }
    due = {
        "data": mean["data"] >= DATA_ADVICE,
        "comm": mean["comm"] >= COMM_ADVICE and not has_straggler,
        "checkpoint": mean["checkpoint"] >= CHECKPOINT_ADVICE,
    }
    over = [phase for phase, yes in due.items() if yes]
    if not over:
        return None
    phase = max(over, key=lambda p: mean[p])
    share = _percent(mean[phase])
    if phase == "data":
        workers = records[0].get("num_workers")
        now = f" (now {workers})" if workers is not None else ""
        return (
            f"data loading takes {share} of a step: raise num_workers{now} in "
            f"ctx.prepare_loader(..., num_workers=N), or make the dataset's __getitem__ cheaper"
        )
    if phase == "checkpoint":
        return (
            f"checkpoint saves hold the loop for {share} of a step: save less often "
            f"(every_steps=...) or in the background (ctx.checkpointer(..., async_save=True))"
        )
    hosts = {r.get("host") for r in records}
    link = (
        "a faster link between the nodes"
        if len(hosts) > 1
        else "a faster link (distrain doctor measures it)"
    )
    return (
        f"waiting for gradient communication takes {share} of a step: try "
        f"ctx.prepare_model(model, comm_hook='bf16'), a larger bucket_cap_mb, a larger batch per "
        f"process, or {link}"
    )


def lines(records: list[dict[str, Any]], group: str | None = None) -> list[str]:
    """The end-of-job lines for these ranks' summaries (none when no rank counted a step);
    `group` names the replica group under ``--replicas`` (each group prints its own)."""
    records = [r for r in records if r.get("steps")]
    if not records:
        return []
    world = int(records[0].get("world_size", len(records)))
    first = records[0]
    # a rank that died or ran on another node left no file
    scope = "" if len(records) >= world else f"; {len(records)} of {world} ranks reported"
    where = f"group {group}, rank" if group is not None else "rank"
    text = (
        f"distrain: step time ({where} {first['rank']}, {first['steps']} steps, "
        f"{_ms(first.get('step_median_s'))}/step median{scope}): {_parts(first)}"
    )
    timed = [r for r in records if compute_s(r)]
    slowest = max(timed, key=lambda r: compute_s(r) or 0.0) if len(timed) > 1 else None
    if slowest is not None and slowest is not first:
        text += (
            f"; slowest rank {slowest['rank']} (compute "
            f"{_ms(slowest['compute_median_s'])}/step): {_parts(slowest)}"
        )
    out = [text]
    found = straggler(records)
    if found is not None:
        rank, slower = found
        out.append(
            f"distrain: straggler: rank {rank['rank']} (host {rank.get('host', '?')}, pid "
            f"{rank.get('pid', '?')}) "
            f"computes {100 * slower:.0f} % slower than the median rank"
        )
    tip = advice(records, has_straggler=found is not None)
    if tip:
        out.append(f"distrain: advice: {tip}")
    return out


def finish(folder: str | None) -> None:
    """Print the step breakdown's lines on stderr and remove the job's folder (a second call
    prints nothing)."""
    if not folder:
        return
    for line in lines(read(folder), os.environ.get(REPLICA_GROUP)):
        print(line, file=sys.stderr, flush=True)
    shutil.rmtree(folder, ignore_errors=True)
