"""Training throughput from timed steps: what `distrain bench scaling` computes its speedup from.

A step's time is the interval between the ends of two consecutive optimizer steps of the same
epoch, so the evaluation after an epoch and the loader's restart at the next one fall outside
every interval (the first step of each epoch is not timed).  The ranks' intervals are combined
step by step: the job's step takes as long as its slowest rank's (they meet at every gradient
all-reduce), and its samples are the sum over ranks.  The first intervals of a run are warm-up
(lazy imports, allocator growth, first-touch of buffers) and are dropped; the steady-state
throughput is the median over the remaining steps of samples / seconds, so a burst of load from
elsewhere on a shared machine moves it little.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

#: below the run directory: where the bench's workload writes each rank's step times
STEPS_SUBDIR = "bench"
#: warm-up: at least this many of a run's first timed steps are dropped …
WARMUP_MIN = 3
#: … or this fraction of them, whichever is more
WARMUP_FRACTION = 0.1


def rank_intervals(steps: list[list[Any]]) -> list[tuple[Any, float, float]]:
    """(epoch, seconds, samples) of each timed step of a rank: consecutive step ends in an epoch."""
    out = []
    for (ep_a, t_a, _), (ep_b, t_b, n_b) in zip(steps, steps[1:], strict=False):
        if ep_a == ep_b and t_b > t_a:
            out.append((ep_b, t_b - t_a, float(n_b)))
    return out


def combine(ranks: list[list[tuple[Any, float, float]]]) -> list[dict[str, Any]]:
    """The job's timed steps: per step index, the slowest rank's seconds and the summed samples.

    Steps beyond the shortest rank's list are left out (a rank that stopped early).
    """
    if not ranks:
        return []
    out = []
    for per_rank in zip(*ranks, strict=False):
        out.append(
            {
                "epoch": per_rank[0][0],
                "seconds": max(s for _, s, _ in per_rank),
                "samples": sum(n for _, _, n in per_rank),
            }
        )
    return out


def read_steps(run_dir: Path) -> list[dict[str, Any]]:
    """The job's timed steps from ``RUN_DIR/bench/steps-rank-*.json`` ([] when none written)."""
    ranks = []
    for path in (
        sorted((run_dir / STEPS_SUBDIR).glob("steps-rank-*.json"))
        if (run_dir / STEPS_SUBDIR).is_dir()
        else []
    ):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return []  # a rank died while writing: no step timing for this run
        ranks.append(rank_intervals(data.get("steps") or []))
    return combine(ranks)


def warmup_count(n: int) -> int:
    """How many of a run's `n` first timed steps are warm-up (always leaving at least one timed)."""
    return max(0, min(max(WARMUP_MIN, int(n * WARMUP_FRACTION)), n - 1))


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def steady_stats(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Steady-state timing of one run's timed steps (None values when there are none)."""
    stats: dict[str, Any] = {
        "timed_steps": 0,
        "warmup_steps": 0,
        "step_seconds_median": None,
        "step_seconds_p10": None,
        "step_seconds_p90": None,
        "step_samples_per_s": None,
    }
    timed = [
        s for s in steps if float(s.get("seconds") or 0) > 0 and float(s.get("samples") or 0) > 0
    ]
    if not timed:
        return stats
    skip = warmup_count(len(timed))
    steady = timed[skip:]
    secs = [float(s["seconds"]) for s in steady]
    stats.update(
        timed_steps=len(steady),
        warmup_steps=skip,
        step_seconds_median=statistics.median(secs),
        step_seconds_p10=_quantile(secs, 0.1),
        step_seconds_p90=_quantile(secs, 0.9),
        step_samples_per_s=statistics.median(
            float(s["samples"]) / float(s["seconds"]) for s in steady
        ),
    )
    return stats
