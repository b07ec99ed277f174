"""Where a step's time went in each run of a study: the per-rank step breakdown distrain records.

Every rank's metrics records (``metrics/rank-<R>.jsonl``) carry ``breakdown_s``: cumulative
seconds per phase (data, compute, comm, optimizer, checkpoint, other) and the steps counted,
warm-up step excluded (distrain.monitor.breakdown).  The bench reads each rank's last one and
turns it into milliseconds per step per phase; the report draws them as stacked bars per
process count.  Runs whose records have no breakdown (an older distrain) simply have none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: the order the bars stack in (phases a record lacks count 0; unknown ones go last)
ORDER = ("data", "compute", "comm", "optimizer", "checkpoint", "other")


def _last_breakdown(path: Path) -> dict[str, float] | None:
    found = None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if '"breakdown_s"' not in line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec.get("breakdown_s"), dict):
            found = rec["breakdown_s"]
    return found


def read_breakdown(run_dir: Path) -> dict[str, dict[str, float]]:
    """{rank: {phase: ms per step}} from the ranks' last ``breakdown_s`` ({} when there is none)."""
    out: dict[str, dict[str, float]] = {}
    metrics = run_dir / "metrics"
    for path in sorted(metrics.glob("rank-*.jsonl")) if metrics.is_dir() else []:
        totals = _last_breakdown(path)
        steps = int((totals or {}).get("steps") or 0)
        if not totals or steps <= 0:
            continue
        rank = path.stem.removeprefix("rank-")
        out[rank] = {
            k: round(float(v) * 1000 / steps, 3)
            for k, v in totals.items()
            if k != "steps" and isinstance(v, (int, float))
        }
    return out


def per_step_ms(runs: list[dict[str, Any]]) -> dict[str, float]:
    """One configuration's ms per step per phase: the mean over its ranks, then the median round."""
    per_round = []
    for run in runs:
        ranks = list((run.get("breakdown") or {}).values())
        if ranks:
            phases = {p for r in ranks for p in r}
            per_round.append({p: sum(r.get(p, 0.0) for r in ranks) / len(ranks) for p in phases})
    if not per_round:
        return {}
    per_round.sort(key=lambda b: sum(b.values()))
    return per_round[len(per_round) // 2]


def ordered(phases: dict[str, float]) -> list[tuple[str, float]]:
    """(phase, ms) in stacking order."""
    known = [(p, phases.get(p, 0.0)) for p in ORDER]
    return known + sorted((p, v) for p, v in phases.items() if p not in ORDER)
