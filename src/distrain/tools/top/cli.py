"""`distrain top RUN_DIR`: every rank of a job at a glance, refreshed like `watch nvidia-smi`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from distrain.errors import UsageError, fail, raise_usage_errors
from distrain.tools.top.groups import snapshot as read_snapshot
from distrain.tools.top.status import NoJobError, Thresholds

PROG = "distrain top"

#: the step breakdown's columns (percent of the step time over the window): phase → header
_PHASE_COLUMNS = {
    "data": "data%",
    "compute": "comp%",
    "comm": "comm%",
    "optimizer": "opt%",
    "checkpoint": "ckpt%",
    "other": "other%",
}

_STATE_STYLE = {
    "running": "green",
    "waiting": "yellow",
    "stalled": "bold red",
    "done": "cyan",
    "failed": "bold red",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Live view of a distrain job's ranks from its run directory (distrain "
        "run --run-dir DIR).",
        allow_abbrev=False,
    )
    parser.add_argument("run_dir", help="the job's run directory (holds metrics/rank-*.jsonl)")
    parser.add_argument("--once", action="store_true", help="print one snapshot and exit")
    parser.add_argument("--json", action="store_true", help="print one snapshot as JSON and exit")
    parser.add_argument(
        "--refresh", type=float, default=2.0, help="seconds between screen updates (default 2)"
    )
    parser.add_argument(
        "--stall-after",
        type=float,
        default=Thresholds.stall_after,
        help="seconds without a record (or a new step) before a rank is flagged stalled (or "
        "waiting); default 10",
    )
    parser.add_argument(
        "--straggler-ratio",
        type=float,
        default=Thresholds.straggler_ratio,
        help="flag a rank whose step rate is below this fraction of the median; default 0.5",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=Thresholds.window,
        help="seconds of records the rates are measured over; default 10",
    )

    raise_usage_errors(parser)
    return parser


def _size(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def render(snapshot: dict[str, Any]) -> Any:
    """A rich renderable of one snapshot: a header line and one table row per rank."""
    from rich.console import Group

    return Group(_header(snapshot), _table(snapshot))


def _header(snapshot: dict[str, Any]) -> Any:
    """The job's line: status, ranks, step, speed, memory; replica groups and missing ranks."""
    from rich.text import Text

    totals = snapshot["totals"]
    status = snapshot["status"]
    header = Text()
    header.append(f"distrain top · {snapshot['run_dir']} · ", style="bold")
    header.append(status, style=_STATE_STYLE.get({"finished": "done"}.get(status, status), "bold"))
    header.append(
        f" · {totals['ranks']}/{totals['world_size']} ranks on {len(totals['hosts'])} host(s)"
        f" · step {totals['min_step']}"
        + (f"..{totals['max_step']}" if totals["max_step"] != totals["min_step"] else "")
        + f" · {_num(totals['samples_per_s'], ',.0f')} samples/s · RSS {_size(totals['rss'])}"
        + f" · elapsed {totals['elapsed']:.0f} s"
    )
    if snapshot.get("groups"):  # distrain run --replicas: one line on the groups and their heals
        line = " · ".join(
            f"group {g['group']} {g['status']} step {g['max_step']}" for g in snapshot["groups"]
        )
        heals = [ev for ev in snapshot["events"] if ev["event"] == "healed"]
        line += f" · heals {totals['heals']}"
        if heals:
            last = heals[-1]
            line += (
                f" (last: group {last['group']} from group {last.get('source')} at step "
                f"{last.get('step')})"
            )
        header.append("\nreplica groups: " + line)
    if totals["missing_ranks"]:
        header.append(
            f"\nno records from rank(s) {totals['missing_ranks']} (other nodes need a "
            "shared run directory)",
            style="yellow",
        )
    return header


def _table(snapshot: dict[str, Any]) -> Any:
    """One row per rank; GPU and step-breakdown columns only when some rank has them."""
    from rich.table import Table
    from rich.text import Text

    gpu = any(r["gpu_util"] is not None for r in snapshot["ranks"])
    table = Table(box=None, header_style="bold", pad_edge=False)
    grouped = any("group" in r for r in snapshot["ranks"])
    columns = ["group"] if grouped else []
    columns += [
        "rank",
        "host",
        "pid",
        "state",
        "step",
        "epoch",
        "loss",
        "samples/s",
        "step ms",
        "RSS",
    ]
    columns += ["GPU %", "GPU mem"] if gpu else []
    shares = any(r.get("breakdown") for r in snapshot["ranks"])
    ckpt = any((r.get("breakdown") or {}).get("checkpoint") for r in snapshot["ranks"])
    phases = [p for p in _PHASE_COLUMNS if p != "checkpoint" or ckpt] if shares else []
    columns += [_PHASE_COLUMNS[p] for p in phases]
    columns += ["last", "flags"]
    for name in columns:
        table.add_column(name, justify="left" if name in ("host", "state", "flags") else "right")
    for r in snapshot["ranks"]:
        cells: list[str | Text] = [str(r["group"])] if grouped else []
        cells += [
            str(r["rank"]),
            r["host"],
            str(r["pid"]),
            Text(r["state"], style=_STATE_STYLE.get(r["state"], "")),
            str(r["step"]),
            "-" if r["epoch"] is None else str(r["epoch"]),
            _num(r["loss"], ".4f"),
            _num(r["samples_per_s"], ",.0f"),
            _num(None if r["step_time"] is None else r["step_time"] * 1000, ".1f"),
            _size(r["rss"]),
        ]
        if gpu:
            cells += [
                _num(r["gpu_util"], ".0f"),
                f"{_size(r['gpu_mem'])}/{_size(r['gpu_mem_total'])}"
                if r["gpu_mem"] is not None
                else "-",
            ]
        cells += [
            _num(None if not r.get("breakdown") else 100 * r["breakdown"][p], ".0f") for p in phases
        ]
        cells += [
            f"{r['age']:.0f}s ago",
            Text(" ".join(r["flags"]), style="bold red" if r["flags"] else ""),
        ]
        table.add_row(*cells)
    return table


def main(argv: list[str]) -> int:
    """Entry point of `distrain top`."""
    try:
        args = _parser().parse_args(argv)
        if (
            args.refresh <= 0
            or args.stall_after <= 0
            or args.window <= 0
            or not 0 < args.straggler_ratio < 1
        ):
            raise UsageError(
                "--refresh, --stall-after and --window must be positive and "
                "--straggler-ratio in (0, 1)"
            )
    except UsageError as err:
        fail(PROG, str(err), err.exit_code)
    th = Thresholds(
        stall_after=args.stall_after, straggler_ratio=args.straggler_ratio, window=args.window
    )
    try:
        snapshot = read_snapshot(args.run_dir, th=th)
    except NoJobError as err:
        fail(PROG, str(err), 1)
    try:
        if args.json:
            sys.stdout.write(json.dumps(snapshot, indent=2) + "\n")
            sys.stdout.flush()
            return 0
        from rich.console import Console

        console = Console(width=None if sys.stdout.isatty() else 160)
        if args.once or not sys.stdout.isatty():
            console.print(render(snapshot))
            return 0
        return _live(console, args.run_dir, th, args.refresh)
    except BrokenPipeError:  # `distrain top DIR --json | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _live(console: Any, run_dir: str, th: Thresholds, refresh: float) -> int:
    """Redraw until Ctrl-C; a job directory that vanishes ends the view with an error."""
    from rich.live import Live

    try:
        with Live(
            render(read_snapshot(run_dir, th=th)), console=console, screen=False, auto_refresh=False
        ) as live:
            while True:
                time.sleep(refresh)
                live.update(render(read_snapshot(run_dir, th=th)), refresh=True)
    except KeyboardInterrupt:
        return 0
    except NoJobError as err:
        fail(PROG, str(err), 1)
