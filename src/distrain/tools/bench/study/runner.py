"""Run one training job of a scaling study under `distrain run` and collect what it reports.

Each run is a real ``distrain run --nproc N script ...`` subprocess in its own session (so the whole
tree can be killed), one CPU thread per process, with its run directory set (``DISTRAIN_RUN_DIR``):
what the script reports through ``ctx.log(...)`` lands in ``metrics/rank-<R>.jsonl`` there, and the
per-epoch summaries the monitor writes (``event: epoch``) are the bench's data, with the step times
of the bench's own workload (:mod:`distrain.tools.bench.study.steps`) when the script wrote them.
While it runs, the process tree is polled with psutil for peak memory and the epoch count is read
back for the progress bar.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from distrain.contract import NUM_THREADS, RUN_DIR
from distrain.tools.bench.study.breakdown import read_breakdown
from distrain.tools.bench.study.steps import read_steps

#: how often the process tree is sampled for memory and progress
POLL_SECONDS = 0.25


@dataclass
class RunSpec:
    """One point of the study: N processes, with or without SyncBN, and the exact command."""

    name: str
    nproc: int
    sync_bn: bool
    command: list[str]
    threads: int = 1
    round: int = 1
    #: the "1 process, all cores" baseline row (what a CPU user compares against)
    all_cores: bool = False

    def key(self) -> dict[str, Any]:
        """What must match for --resume to reuse a finished run."""
        return {
            "nproc": self.nproc,
            "sync_bn": self.sync_bn,
            "command": self.command,
            "threads": self.threads,
        }


@dataclass
class RunResult:
    """What one run produced: its per-epoch records plus how it ended."""

    name: str
    nproc: int
    sync_bn: bool
    command: list[str]
    threads: int
    round: int
    status: str  # "ok" or "failed"
    exit_code: int
    error: str = ""
    wall_seconds: float = 0.0
    peak_rss_mb_total: float = 0.0
    peak_rss_mb_per_process: float = 0.0
    load_average_start: list[float] = field(default_factory=list)
    load_average_end: list[float] = field(default_factory=list)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    #: the job's timed steps (distrain.tools.bench.study.steps.read_steps): empty for a script that
    #: writes none
    steps: list[dict[str, Any]] = field(default_factory=list)
    #: {rank: {phase: ms per step}} (distrain.tools.bench.study.breakdown): empty where the records
    #: carry none
    breakdown: dict[str, dict[str, float]] = field(default_factory=dict)
    log: str = ""
    all_cores: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def _json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON records of a file written so far (a half-written last line is skipped)."""
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return records


def read_epochs(run_dir: Path) -> list[dict[str, Any]]:
    """One record per finished epoch, combined over the ranks' ``event: epoch`` metrics records.

    ``seconds`` is the slowest rank's training time of the epoch (the others wait for it at
    every all-reduce), ``samples`` the sum over ranks; accuracy and losses are rank 0's
    (``ctx.log(accuracy=..., test_loss=..., loss=...)``; ``test_acc`` is accepted for accuracy).
    """
    per_epoch: dict[Any, list[dict[str, Any]]] = {}
    order: list[Any] = []
    files = (
        sorted((run_dir / "metrics").glob("rank-*.jsonl")) if (run_dir / "metrics").is_dir() else []
    )
    for path in files:
        for rec in _json_lines(path):
            if rec.get("event") != "epoch":
                continue
            if rec["epoch"] not in per_epoch:
                per_epoch[rec["epoch"]] = []
                order.append(rec["epoch"])
            per_epoch[rec["epoch"]].append(rec)
    out = []
    for epoch in order:
        recs = per_epoch[epoch]
        main = next((r for r in recs if r.get("rank") == 0), None)
        if main is None:
            continue  # rank 0 has not written it yet
        values = main.get("values") or {}
        seconds = [r["epoch_seconds"] for r in recs if r.get("epoch_seconds") is not None]
        row: dict[str, Any] = {
            "epoch": epoch,
            "seconds": max(seconds) if seconds else None,
            "samples": sum(int(r.get("epoch_samples") or 0) for r in recs),
            "ranks": len(recs),
        }
        for key, names in (
            ("test_acc", ("accuracy", "test_acc")),
            ("test_loss", ("test_loss",)),
            ("train_loss", ("loss", "train_loss")),
        ):
            found = next((values[n] for n in names if n in values), None)
            if found is not None:
                row[key] = found
        out.append(row)
    return out


def _tree_rss_mb(root: psutil.Process) -> tuple[float, float]:
    """(sum, max) resident memory in MiB over the worker processes below `root`.

    The launcher and torchrun's agent are excluded when workers exist: they are the
    bench's overhead, not the training's.
    """
    rss = []
    try:
        procs = root.children(recursive=True)
        leaves = []
        for p in procs:
            with contextlib.suppress(psutil.Error):  # processes come and go between calls
                if not p.children():
                    leaves.append(p)
        for p in leaves or procs:
            with contextlib.suppress(psutil.Error):
                rss.append(p.memory_info().rss / 2**20)
    except psutil.Error:
        pass
    return (sum(rss), max(rss)) if rss else (0.0, 0.0)


#: launcher and torch-elastic log lines: not the script's own words
_NOISE = re.compile(r"^([WEI]\d{4} |distrain run: |\$ |Traceback |File |\[W|\^+$)")


def _last_error_line(text: str) -> str:
    """The script's own last error line (an exception or SystemExit message), launcher noise off."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    own = [ln for ln in lines if not _NOISE.match(ln)]
    for ln in reversed(own):
        if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", ln):
            return ln[:300]
    pick = own or lines
    return pick[-1][:300] if pick else "no output"


def execute(
    spec: RunSpec,
    run_dir: Path,
    timeout: float,
    on_epoch: Callable[[int], None] | None = None,
) -> RunResult:
    """Run `spec` to the end (or `timeout` s), writing into `run_dir`; never raises on failure."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log_path, metrics_dir = run_dir / "log.txt", run_dir / "job"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    env = dict(os.environ)
    # One thread per process: N processes × 1 thread against 1 × 1 is the fair comparison
    # (torch would otherwise use every core in the 1-process run).
    env.update(
        {
            "OMP_NUM_THREADS": str(spec.threads),
            NUM_THREADS: str(spec.threads),
            RUN_DIR: str(metrics_dir),
        }
    )
    load_start = _load()
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(spec.command) + "\n")
        log.flush()
        proc = subprocess.Popen(
            spec.command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        root = psutil.Process(proc.pid)
        try:
            peak_total, peak_one, timed_out = _watch(
                proc, root, metrics_dir, start + timeout, on_epoch
            )
        finally:
            _kill_tree(proc, root)
        code = proc.wait()
    wall = time.perf_counter() - start
    epochs = read_epochs(metrics_dir)
    if on_epoch is not None:
        on_epoch(len(epochs))
    peak_total = max(peak_total, peak_one)
    output = log_path.read_text(encoding="utf-8", errors="replace")
    status, error, code = _outcome(code, timed_out, timeout, output, bool(epochs))
    return RunResult(
        name=spec.name,
        nproc=spec.nproc,
        sync_bn=spec.sync_bn,
        command=spec.command,
        threads=spec.threads,
        round=spec.round,
        status=status,
        exit_code=code,
        error=error,
        wall_seconds=round(wall, 3),
        peak_rss_mb_total=round(peak_total, 1),
        peak_rss_mb_per_process=round(peak_one, 1),
        load_average_start=load_start,
        load_average_end=_load(),
        epochs=epochs,
        steps=read_steps(metrics_dir),
        breakdown=read_breakdown(metrics_dir),
        log=str(log_path),
        all_cores=spec.all_cores,
    )


def _watch(
    proc: subprocess.Popen[Any],
    root: psutil.Process,
    metrics_dir: Path,
    deadline: float,
    on_epoch: Callable[[int], None] | None,
) -> tuple[float, float, bool]:
    """Poll the run to its end or `deadline`: (peak RSS of the tree, of a process, timed out)."""
    peak_total = peak_one = 0.0
    seen = 0
    while proc.poll() is None:
        total, one = _tree_rss_mb(root)
        peak_total, peak_one = max(peak_total, total), max(peak_one, one)
        n = len(read_epochs(metrics_dir))
        if n != seen and on_epoch is not None:
            on_epoch(n)
        seen = n
        if time.perf_counter() > deadline:
            return peak_total, peak_one, True
        time.sleep(POLL_SECONDS)
    return peak_total, peak_one, False


def _outcome(
    code: int, timed_out: bool, timeout: float, output: str, logged_epochs: bool
) -> tuple[str, str, int]:
    """(status, error, exit code) of a run from how it ended and what it logged."""
    if timed_out:
        return "failed", f"timed out after {timeout:.0f} s", 124
    if code != 0:
        return "failed", f"exit code {code}: {_last_error_line(output)}", code
    if not logged_epochs:
        return (
            "failed",
            "the script logged no epochs (call ctx.log(epoch=..., samples=...) every step; "
            "see docs/bench.md)",
            code,
        )
    return "ok", "", code


def _kill_tree(proc: subprocess.Popen[Any], root: psutil.Process) -> None:
    """SIGKILL the run's launcher, agent and workers; the gone are ignored.

    torchrun starts each worker in a session of its own, so killing the launcher's process
    group is not enough: every descendant is collected first and killed by pid.
    """
    try:
        family = root.children(recursive=True)
    except psutil.Error:
        family = []
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.kill()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def python() -> str:
    """The interpreter that runs the bench (and therefore each `distrain run`)."""
    return sys.executable


def reusable(spec: RunSpec, run_dir: Path) -> dict[str, Any] | None:
    """The saved result of a finished run of the same spec in `run_dir`, else None."""
    path = run_dir / "result.json"
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    same = all(saved.get(k) == v for k, v in spec.key().items())
    return saved if same and saved.get("status") == "ok" else None
