"""The Markdown report of a scaling study: what ran, where, the table, the charts, what they say."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

#: table columns: header → (result key, format); the test parses the table back with these
COLUMNS: list[tuple[str, str, str]] = [
    ("run", "name", "s"),
    ("processes", "nproc", "d"),
    ("threads", "threads", "d"),
    ("SyncBN", "sync_bn", "yesno"),
    ("status", "status", "s"),
    ("rounds", "rounds", "d"),
    ("time/epoch (s)", "time_per_epoch_mean", ".3f"),
    ("± std (s)", "time_per_epoch_std", ".3f"),
    ("step (ms)", "step_seconds_median", "ms"),
    ("samples/s", "samples_per_s", ".1f"),
    ("speedup", "speedup", ".2f"),
    ("efficiency", "efficiency", "pct"),
    ("test acc", "final_test_acc", ".4f"),
    ("test loss", "final_test_loss", ".4f"),
    ("peak RSS/process (MiB)", "peak_rss_mb_per_process", ".0f"),
    ("peak RSS total (MiB)", "peak_rss_mb_total", ".0f"),
]

MISSING = "—"

_CHART_TEXT = [
    ("time_per_epoch", "time_per_epoch.png", "Training time per epoch"),
    ("throughput", "throughput.png", "Throughput and scaling efficiency"),
    ("accuracy_scaling", "accuracy_scaling.png", "Test accuracy, single vs multi-process"),
    ("accuracy_syncbn", "accuracy_syncbn.png", "Test accuracy, SyncBN vs BN"),
]


def has_syncbn(runs: list[dict[str, Any]]) -> bool:
    """Whether any finished run used SyncBN (otherwise there is no SyncBN chart)."""
    return any(r["sync_bn"] and r["status"] == "ok" for r in runs)


def cell(run: dict[str, Any], key: str, fmt: str) -> str:
    """One table cell, formatted the same way every time (the tests rely on it)."""
    value = run.get(key)
    if value is None or (fmt != "s" and value == ""):
        return MISSING
    if fmt == "s":
        return str(value)
    if fmt == "yesno":
        return "yes" if value else "no"
    if fmt == "ms":
        return f"{value * 1000:.1f}"
    if fmt == "pct":
        return f"{value * 100:.1f} %"
    return format(value, fmt)


def table(runs: list[dict[str, Any]]) -> str:
    """The results table in Markdown."""
    lines = [
        "| " + " | ".join(h for h, _, _ in COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    for r in runs:
        lines.append("| " + " | ".join(cell(r, k, f) for _, k, f in COLUMNS) + " |")
    return "\n".join(lines)


def _load_range(rounds: list[dict[str, Any]]) -> str:
    """The spread of the 1-minute load average over the runs' starts and ends (shared machines)."""
    loads = [
        r[k][0] for r in rounds for k in ("load_average_start", "load_average_end") if r.get(k)
    ]
    return f"; 1-min load {min(loads):.1f}–{max(loads):.1f} while the runs ran" if loads else ""


def timing_note(runs: list[dict[str, Any]]) -> str:
    """How samples/s (and so speedup) was measured, per the runs' timing source."""
    by_steps = [r for r in runs if r.get("timing") == "steps"]
    note = (
        "samples/s is the median over timed steps (the interval between two optimizer "
        "steps of one epoch, "
        "slowest rank; the first 10 % of a run's steps, at least 3, are warm-up), so "
        "evaluation, epoch "
        "boundaries and warm-up are outside every timed interval"
    )
    if len(by_steps) == len(runs):
        return note
    epochs = (
        "samples/s is training samples over training time per epoch (evaluation "
        "excluded), the first "
        "(warm-up) epoch left out when there are two or more"
    )
    if not by_steps:
        return epochs + "; the script records no step times (the built-in workloads do)"
    return f"{note} for {', '.join(r['name'] for r in by_steps)}; for the others {epochs}"


def breakdown_section(runs: list[dict[str, Any]]) -> list[str]:
    """The stacked-bar chart of a step's time, one line per configuration ([] without data)."""
    from distrain.tools.bench.study.breakdown import ordered

    rows = [r for r in runs if r.get("breakdown_ms")]
    if not rows:
        return [
            "## Where a step's time goes",
            "",
            "No run's metrics carry distrain's step breakdown, so there is no chart.",
            "",
        ]
    lines = [
        "## Where a step's time goes",
        "",
        "![Where a step's time goes](breakdown.png)",
        "",
        "Milliseconds per step by phase, mean over ranks, from distrain's own step breakdown "
        "(warm-up step excluded; "
        "`other` includes evaluation between epochs):",
        "",
    ]
    for r in rows:
        total = sum(r["breakdown_ms"].values()) or 1.0
        split = " · ".join(
            f"{p} {v:.1f} ms ({v / total * 100:.0f} %)"
            for p, v in ordered(r["breakdown_ms"])
            if v > 0
        )
        lines.append(f"- {r['name']}: {split}")
    return lines + [""]


def render(results: dict[str, Any]) -> str:
    """The whole report.md text."""
    m = results["machine"]
    runs = results["configs"]
    notes = results["interpretation"]
    load = ", ".join(str(x) for x in m.get("load_average_start", [])) or "?"
    load_end = ", ".join(str(x) for x in m.get("load_average", [])) or "?"
    parts = [
        f"# Scaling report: {results['workload']}",
        "",
        f"- command: `{shlex.join(results['argv'])}`",
        f"- date: {m['date']}",
        f"- machine: {m['host']} · {m['platform']} · {m['processor']} · {m['cpu_count']} CPUs "
        f"({m['usable_cores']} usable)",
        f"- load average (1, 5, 15 min): {load} at start, {load_end} at the "
        f"end{_load_range(results.get('rounds', []))}",
        f"- versions: Python {m['python']} · torch {m['torch']} · distrain {m['distrain']}",
        f"- one process per device, {results['threads']} CPU thread(s) per process (n1-allcores: "
        "one process, all cores); " + timing_note(runs),
        *([f"- workload {results['sizing']['text']}"] if results.get("sizing") else []),
        "",
        "## Results",
        "",
        table(runs),
        "",
        "Efficiency = speedup / (cores used / baseline cores) against the smallest process count "
        "without SyncBN, "
        "i.e. throughput_N / (N × throughput_1) for one-thread processes. "
        "With several rounds (run interleaved in time), samples/s and time/epoch are medians "
        "over rounds and ± std is over every timed epoch of every round; "
        "step (ms) is the median steady-state step.",
        "",
    ]
    failed = [r for r in runs if r["status"] != "ok"]
    if failed:
        parts += ["## Failed runs", ""]
        parts += [
            f"- **{r['name']}**: {r['error']} (logs: {', '.join(f'`{x}`' for x in r['logs'])})"
            for r in failed
        ]
        parts.append("")
    for key, png, title in _CHART_TEXT:
        if key == "accuracy_syncbn" and not has_syncbn(runs):  # no chart drawn: its note says why
            parts += [f"## {title}", "", notes.get(key, ""), ""]
            continue
        parts += [f"## {title}", "", f"![{title}]({png})", "", notes.get(key, ""), ""]
    parts += breakdown_section(runs)
    return "\n".join(parts)


def write(results: dict[str, Any], out: Path) -> Path:
    """Write report.md into `out`; returns its path."""
    path = out / "report.md"
    path.write_text(render(results), encoding="utf-8")
    return path
