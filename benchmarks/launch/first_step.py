"""When did every rank take its first training step?  Read from what the job itself records.

Scripts that use distrain report through ``ctx.log``: with a run directory set
(``DISTRAIN_RUN_DIR``), every rank's first metrics record carries ``first_log_t``, the wall
time of its first ``ctx.log`` call (right after its first optimizer step).  The plain torchrun
scripts of this folder (plain_ddp.py, overhead_worker.py) write ``rank restart time ...`` lines
to ``BENCH_FIRST_STEP_FILE`` instead (a benchmark-only variable, not part of distrain).
"""

from __future__ import annotations

import json
from pathlib import Path


def env_for(marker: Path, run_dir: Path) -> dict[str, str]:
    """The environment variables that make both kinds of script report their first step."""
    return {"BENCH_FIRST_STEP_FILE": str(marker), "DISTRAIN_RUN_DIR": str(run_dir)}


def first_steps(marker: Path, run_dir: Path) -> list[float]:
    """Every rank's first-step wall time found so far (from the marker file or the run dir)."""
    stamps: list[float] = []
    if marker.exists():
        stamps += [
            float(line.split()[2])
            for line in marker.read_text().splitlines()
            if len(line.split()) >= 3
        ]
    for path in sorted((run_dir / "metrics").glob("rank-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "first_log_t" in rec:
                stamps.append(float(rec["first_log_t"]))
                break
    return stamps
