"""What a ``breakdown`` event holds: a rank's step time split into phases, and their shares.

The worker's recorder (monitor/breakdown.py) fills it, the launcher's end-of-job line
(launch/report/job_summary.py) and `distrain top` show it; both sides import this, so no torch.
"""

from __future__ import annotations

#: the parts a training step's wall time is split into, in the order they are shown
PHASES = ("data", "compute", "comm", "optimizer", "checkpoint", "other")


def breakdown_fractions(seconds: dict[str, float]) -> dict[str, float]:
    """Each phase's share of the total of `seconds` (missing phases count 0); all 0 for no time.

    Negative inputs (a clock that stepped back) count as 0, so the shares always sum to 1.
    """
    parts = {phase: max(0.0, float(seconds.get(phase, 0.0) or 0.0)) for phase in PHASES}
    total = sum(parts.values())
    return {phase: (value / total if total > 0 else 0.0) for phase, value in parts.items()}
