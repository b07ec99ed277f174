"""Appends a chaos campaign's table to benchmarks/chaos/RESULTS.md, with the command, the CPU,
the load before and after, and a replay command for every trial that broke the oracle."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def cpu_model() -> str:
    """lscpu's model name, or the platform's processor when lscpu is missing."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        out = ""
    line = next((ln for ln in out.splitlines() if ln.startswith("Model name")), "")
    return line.split(":", 1)[1].strip() if line else "unknown"


def record(seed: int, args: argparse.Namespace, trials: list[Any], table: str,
           load0: tuple[float, float, float], bad: list[Any]) -> None:  # fmt: skip
    """Append one section for this campaign to RESULTS.md."""
    cmd = " ".join(["python3 benchmarks/chaos/campaign.py", *sys.argv[1:]])
    if "--seed" not in sys.argv:
        cmd += f" --seed {seed}"
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"\n## Seed {seed}, {len(trials)} trials ({when})", "",
             f"Command: `{cmd.replace(' --record', '')}`. CPU: {cpu_model()}, {os.cpu_count()} cores; "
             f"load average {load0[0]:.2f} before, {os.getloadavg()[0]:.2f} after.", "", table, ""]  # fmt: skip
    if bad:
        lines.append("Trials that broke the oracle (replay each with `--seed S --only I`):\n")
        lines += [f"- trial {t.index} ({t.kind}, {t.fault}, {t.what}): {t.verdict.word}: {t.verdict.detail[:300]}"
                  for t in bad]  # fmt: skip
    if not RESULTS.exists():
        RESULTS.write_text(
            "# Chaos campaign results\n\nEach section is one run of benchmarks/chaos/campaign.py.\n"
        )
    with open(RESULTS, "a") as f:
        f.write("\n".join(lines) + "\n")
