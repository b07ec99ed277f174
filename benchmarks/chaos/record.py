"""A chaos campaign's records: each trial's line (--json, --tsv), the kind × fault table, and the
section appended to benchmarks/chaos/RESULTS.md (command, CPU, load, replay commands)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oracle import Verdict
from recovery import Cost, cost_table

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


@dataclass
class Trial:
    """One trial's draws and outcome."""

    index: int
    kind: str
    fault: str
    moment: float
    what: str = ""
    verdict: Verdict | None = None
    seconds: float = 0.0
    missed: bool = False
    #: lost steps and recovery seconds (recovery.py), or why the trial has none
    cost: Cost = field(default_factory=Cost)


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
             f"Command: `{cmd.replace(' --record', '')}`. CPU: {cpu_model()}, "
             f"{os.cpu_count()} cores; "
             f"load average {load0[0]:.2f} before, {os.getloadavg()[0]:.2f} after.", "", table,
             ""]  # fmt: skip
    if bad:
        lines.append("Trials that broke the oracle (replay each with `--seed S --only I`):\n")
        lines += [f"- trial {t.index} ({t.kind}, {t.fault}, {t.what}): {t.verdict.word}: "
                  f"{t.verdict.detail[:300]}"
                  for t in bad]  # fmt: skip
    if not RESULTS.exists():
        RESULTS.write_text(
            "# Chaos campaign results\n\nEach section is one run of benchmarks/chaos/campaign.py.\n"
        )
    with open(RESULTS, "a") as f:
        f.write("\n".join(lines) + "\n")


def tables(trials: list[Trial]) -> str:
    """The kind × fault table, then each fault's lost steps and recovery seconds."""
    return table(trials) + "\n\n" + cost_table([(t.fault, t.cost) for t in trials])


def table(trials: list[Trial]) -> str:
    """Markdown: kind × fault with trials, healed, stopped, missed, each way to break the oracle."""
    cols = ["trials", "healed", "stopped", "hung", "diverged", "leftovers", "other bad", "missed"]
    rows: dict[tuple[str, str], dict[str, int]] = {}
    for t in trials:
        row = rows.setdefault((t.kind, t.fault), dict.fromkeys(cols, 0))
        row["trials"] += 1
        word = t.verdict.word if t.verdict else "hung"
        row[word if word in cols else "other bad"] += 1  # "missed" is a verdict of its own
    lines = ["| kind | fault | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for (kind, fault), row in sorted(rows.items()):
        lines.append(f"| {kind} | {fault} | " + " | ".join(str(row[c]) for c in cols) + " |")
    total = {c: sum(r[c] for r in rows.values()) for c in cols}
    lines.append("| **all** | | " + " | ".join(f"**{total[c]}**" for c in cols) + " |")
    return "\n".join(lines)


def load_trials(paths: list[str]) -> list[Trial]:
    """Trials recorded by --json (JSON lines) or kept as a table (benchmarks/chaos/trials/*.tsv,
    the same fields), with their verdicts (a missed fault: 'missed: …' in `what`)."""
    import csv

    trials = []
    for path in paths:
        text = Path(path).read_text()
        if path.endswith(".tsv"):
            rows: list[dict] = list(csv.DictReader(text.splitlines(), delimiter="\t"))
        else:
            rows = [json.loads(line) for line in text.splitlines()]
        for row in rows:
            t = Trial(
                int(row["index"]), row["kind"], row["fault"], float(row["moment"]), row["what"]
            )
            t.missed = row["what"].startswith("missed")
            # the old oracle called a missed trial that finished "healed"
            word = "missed" if t.missed and row["verdict"] == "healed" else row["verdict"]
            t.verdict = Verdict(word, row["detail"])
            lost, secs = row.get("lost_steps"), row.get("recovery_s")  # absent in older rows
            t.cost = Cost(None if lost in (None, "", "None") else int(lost),
                          None if secs in (None, "", "None") else float(secs),
                          row.get("cost_note") or "")  # fmt: skip
            trials.append(t)
    return trials


def _cost_words(c: Cost) -> str:
    """The trial line's end: lost steps and recovery seconds, where measured, and the note."""
    lost = f"lost {c.lost_steps} steps, " if c.lost_steps is not None else ""
    back = f"trained again {c.recovery_s} s after the fault, " if c.recovery_s is not None else ""
    return f"{lost}{back}{c.note}"


def report(t: Trial, seed: int, args: argparse.Namespace, commit: str) -> None:
    """Print the trial's line; append it to --json's lines and --tsv's table."""
    v = t.verdict
    assert v is not None
    print(f"trial {t.index:3d} {t.kind:13s} {t.fault:18s} at {t.moment:.2f}: {t.what} -> "
          f"{v.word.upper() if not v.ok else v.word} ({t.seconds:.0f} s) {v.detail[:160]}; "
          f"{_cost_words(t.cost)}",
          flush=True)  # fmt: skip
    row = {"seed": seed, "index": t.index, "commit": commit, "kind": t.kind, "fault": t.fault,
           "moment": round(t.moment, 4), "what": t.what, "verdict": v.word,
           "seconds": round(t.seconds, 1), "detail": v.detail, "lost_steps": t.cost.lost_steps,
           "recovery_s": t.cost.recovery_s, "cost_note": t.cost.note}  # fmt: skip
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(row) + "\n")
    if args.tsv:
        path = Path(args.tsv)
        clean = lambda value: str(value).replace("\t", " ").replace("\n", " ")  # noqa: E731
        with open(path, "a") as f:
            if not path.exists() or path.stat().st_size == 0:
                f.write("\t".join(row) + "\n")
            f.write("\t".join(clean(row[k]) for k in row) + "\n")
