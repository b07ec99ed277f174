"""What a chaos trial's fault cost: the steps the job lost and the seconds until it trained again,
read from its ranks' metrics records (``RUN_DIR/metrics/rank-<R>.jsonl``,
distrain.monitor.recorder; a two-node kind has one run folder per node, ``RUN_DIR-<i>``).

Every record carries its process's ``pid``, the wall-clock time it was written (``t``,
``time.time()``, the clock the campaign reads at the fault), the step, and the wall-clock time of
the process's first ``ctx.log()`` (``first_log_t``). The campaign runs every job with a record
every ``INTERVAL_S`` seconds (``ENV``).

- **step at the fault**: the highest step recorded by a process that had trained before the fault
  (its ``first_log_t`` earlier), at any time: the survivor of a killed peer keeps recording until
  it is stopped. A lower bound: the steps a process finished in its last interval before it died
  (at most ``INTERVAL_S`` seconds of training) are not seen.
- **lost steps**: the step at the fault minus the step the job resumed from (the oracle's
  ``distrain: resumed from`` line, the lowest of the trial's runs; step 0 when a restarted job
  resumed from no checkpoint). None lost when no process started after the fault and none
  resumed (not restarted: the job trained on in the same processes).
- **recovery seconds**: from the fault to the first ``ctx.log()`` of a process started after it,
  i.e. the first step trained after the resume (exact: ``first_log_t`` is read at that call); of
  the last restart's processes (the agent's attempt, in every record) when the fault's second
  action (double_kill) hit a restarted generation that had already logged a step.

Kinds without a figure say why (``Cost.note``) instead of a number.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinds import Job, Kind
    from oracle import RunRecord

#: seconds between two metrics records of a trial's ranks (the step at a fault lags by at most it)
INTERVAL_S = 0.1
ENV = {"DISTRAIN_METRICS_INTERVAL": str(INTERVAL_S)}


@dataclass
class Cost:
    """A trial's lost steps and recovery seconds; None with the reason in `note` where n/a."""

    lost_steps: int | None = None
    recovery_s: float | None = None
    note: str = ""


def histories(run_dir: Path) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Each process's step records (file, pid) under the run folder, or a two-node kind's
    ``run_dir-<i>`` folders; a line cut by a kill is skipped."""
    files = [*run_dir.glob("metrics/rank-*.jsonl"), *run_dir.parent.glob(
        f"{run_dir.name}-*/metrics/rank-*.jsonl")]  # fmt: skip
    out: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for path in files:
        for line in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("event") != "epoch" and isinstance(rec.get("step"), int):
                out.setdefault((str(path), int(rec["pid"])), []).append(rec)
    return out


def why_not(kind: Kind, job: Job, missed: bool, fault_t: float | None) -> str | None:
    """Why the trial has no figure (None: it may have one)."""
    if missed or fault_t is None:
        return "n/a: the fault hit nothing"
    if kind.replicas:  # the killed group copies a live group's state at the job's current step
        return "n/a: a replica group heals from a live group; the job's step never goes back"
    if job.ckpt is None:  # rehearsal (its own snapshots), selfstart, replicas_readme
        return "n/a: no distrain checkpoint to resume from (no resume line, no step records)"
    return None


def cost(kind: Kind, job: Job, runs: list[RunRecord], missed: bool,
         fault_t: float | None) -> Cost:  # fmt: skip
    """The trial's lost steps and recovery seconds, or why it has none."""
    note = why_not(kind, job, missed, fault_t)
    if note is not None:
        return Cost(note=note)
    assert fault_t is not None
    resumed = [s for r in runs for s in r.resumed_steps()]
    return measure(histories(job.run_dir), fault_t, min(resumed) if resumed else None)


def measure(procs: dict[tuple[str, int], list[dict[str, Any]]], fault_t: float,
            resumed: int | None) -> Cost:  # fmt: skip
    """Lost steps and recovery seconds from each process's records (see the module's text);
    `resumed`: the step the job resumed from (None: no resume line)."""
    started = {key: recs[-1].get("first_log_t") for key, recs in procs.items()}
    before = [key for key, t in started.items() if t is not None and t < fault_t]
    after = {key: t for key, t in started.items() if t is not None and t >= fault_t}
    if not before:
        return Cost(note="n/a: no step recorded before the fault (the script logs no steps)")
    at_fault = max(rec["step"] for key in before for rec in procs[key])
    if not after and resumed is None:
        return Cost(0, None, "not restarted: the job trained on in the same processes")
    lost = at_fault - (resumed or 0)
    if not after:  # resumed at its last step: nothing left to train, so no step was logged
        return Cost(lost, None, f"resumed from step {resumed}, trained no step after")
    return Cost(lost, round(_last_restart(procs, after) - fault_t, 2), f"step {at_fault} at the "
                f"fault (lower bound, records {INTERVAL_S} s apart), resumed from "
                f"{resumed or 0}")  # fmt: skip


def _last_restart(procs: dict[tuple[str, int], list[dict[str, Any]]],
                  after: dict[tuple[str, int], float]) -> float:  # fmt: skip
    """The first ``ctx.log()`` of the last generation started after the fault: the processes of
    the newest-started one's attempt that started after every process of another attempt, or
    with it: the nodes of a two-node job count their attempts apart, so one generation may carry
    two numbers, and its ranks share one `first_log_t` (seed 9102 trial 15: 1 and 2)."""
    attempt = lambda key: procs[key][-1].get("attempt")  # noqa: E731
    newest = attempt(max(after, key=lambda key: after[key]))
    since = max((t for key, t in after.items() if attempt(key) != newest), default=0.0)
    return min(t for key, t in after.items() if attempt(key) == newest and t >= since)


def cost_table(rows: list[tuple[str, Cost]]) -> str:
    """Markdown: per fault, the median and max of lost steps and recovery seconds over the trials
    that have them, and how many have none (n/a)."""
    cols = ["fault", "measured", "lost steps median", "max", "recovery s median", "max", "n/a"]
    lines = ["| " + " | ".join(cols) + " |", "|---" * len(cols) + "|"]
    for fault in sorted({f for f, _ in rows}):
        costs = [c for f, c in rows if f == fault]
        lost = [c.lost_steps for c in costs if c.lost_steps is not None]
        secs = [c.recovery_s for c in costs if c.recovery_s is not None]
        cells = [fault, str(len(lost)), *_median_max(lost), *_median_max(secs),
                 str(len(costs) - len(lost))]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _median_max(values: list[int] | list[float]) -> list[str]:
    if not values:
        return ["n/a", "n/a"]
    return [f"{round(statistics.median(values), 2):g}", f"{max(values):g}"]
