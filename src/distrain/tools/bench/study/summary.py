"""Numbers of a scaling study: per-run statistics, speedup, efficiency, and what they say.

Conventions (also in docs/bench.md):
- throughput, and so speedup and efficiency, come from timed steps when the script recorded
  them (the built-in workloads do; :mod:`distrain.tools.bench.study.steps`): the median over
  steady-state steps, warm-up steps, evaluation and epoch boundaries excluded; otherwise from
  epochs:
- the first epoch is warm-up (lazy imports, allocator growth) and is left out of the timing
  statistics whenever a run has two or more epochs; accuracy curves keep every epoch;
- throughput is training samples per second over all processes (evaluation excluded);
- the baseline is the smallest process count without SyncBN (SyncBN on 1 process is plain BN);
  speedup_N = throughput_N / throughput_base and efficiency_N = speedup_N × base / N, i.e.
  throughput_N / (N × throughput_1) when the baseline has one process.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
from datetime import datetime, timezone
from typing import Any

from distrain.process.cores import usable_cores
from distrain.tools.bench.study.breakdown import per_step_ms
from distrain.tools.bench.study.steps import steady_stats


def run_stats(run: dict[str, Any]) -> dict[str, Any]:
    """Timing and accuracy statistics of one run (None where the run has no such number)."""
    epochs = [e for e in run.get("epochs", []) if float(e.get("seconds") or 0) > 0]
    steady = epochs[1:] if len(epochs) >= 2 else epochs
    stats: dict[str, Any] = {
        "epochs_done": len(run.get("epochs", [])),
        "timed_epochs": len(steady),
        "time_per_epoch_mean": None,
        "time_per_epoch_std": None,
        "samples_per_s": None,
        "final_test_acc": None,
        "final_test_loss": None,
    }
    if steady:
        secs = [float(e["seconds"]) for e in steady]
        stats["time_per_epoch_mean"] = statistics.fmean(secs)
        stats["time_per_epoch_std"] = statistics.stdev(secs) if len(secs) > 1 else 0.0
        samples = sum(float(e.get("samples", 0)) for e in steady)
        stats["samples_per_s"] = samples / sum(secs) if samples > 0 else None
    stats["timing"] = "epochs" if stats["samples_per_s"] else None
    stepped = steady_stats(run.get("steps") or [])
    stats.update(stepped)
    if stepped["step_samples_per_s"]:
        stats["samples_per_s"], stats["timing"] = stepped["step_samples_per_s"], "steps"
    last = run.get("epochs", [])[-1] if run.get("epochs") else {}
    for src, dst in (("test_acc", "final_test_acc"), ("test_loss", "final_test_loss")):
        if isinstance(last.get(src), (int, float)):
            stats[dst] = float(last[src])
    return stats


def aggregate(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per configuration (name) from its rounds; `runs` must already carry run_stats().

    With --repeat the rounds of all configurations were interleaved in time, so slow spells of
    a shared machine hit every configuration alike.  A configuration is "ok" only when every
    round is; its throughput and time per epoch are the medians over rounds, the spread is the
    standard deviation over every timed epoch of every round, and the accuracy curve is the
    first finished round's (training is seeded, so rounds repeat it).
    """
    configs: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        configs.setdefault(r["name"], []).append(r)
    rows = []
    for rounds in configs.values():
        ok = [r for r in rounds if r["status"] == "ok" and r.get("samples_per_s")]
        first = ok[0] if ok else rounds[0]
        row = {k: v for k, v in first.items() if k not in ("round", "log")}
        row["rounds"] = len(rounds)
        row["status"] = "ok" if len(ok) == len(rounds) else "failed"
        failed = [r for r in rounds if r not in ok]
        row["error"] = "; ".join(
            f"round {r.get('round', 1)}: {r.get('error') or 'no throughput'}" for r in failed
        )
        row["logs"] = [r.get("log", "") for r in rounds]
        if ok:
            row["samples_per_s"] = statistics.median(r["samples_per_s"] for r in ok)
            row["samples_per_s_rounds"] = [r["samples_per_s"] for r in ok]
            row["time_per_epoch_mean"] = (
                statistics.median(
                    r["time_per_epoch_mean"] for r in ok if r.get("time_per_epoch_mean")
                )
                if any(r.get("time_per_epoch_mean") for r in ok)
                else None
            )
            stepped = [r["step_seconds_median"] for r in ok if r.get("step_seconds_median")]
            row["step_seconds_median"] = statistics.median(stepped) if stepped else None
            row["timed_steps"] = sum(int(r.get("timed_steps") or 0) for r in ok)
            secs = [
                float(e["seconds"])
                for r in ok
                for e in (r["epochs"][1:] if len(r["epochs"]) >= 2 else r["epochs"])
            ]
            row["time_per_epoch_std"] = statistics.stdev(secs) if len(secs) > 1 else 0.0
            row["peak_rss_mb_total"] = max(r["peak_rss_mb_total"] for r in ok)
            row["peak_rss_mb_per_process"] = max(r["peak_rss_mb_per_process"] for r in ok)
        row["breakdown_ms"] = per_step_ms(ok or rounds)
        rows.append(row)
    return rows


def _cores(run: dict[str, Any]) -> int:
    return int(run["nproc"]) * int(run.get("threads") or 1)


def add_scaling(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Fill speedup and efficiency into each ok run in place; return the baseline run (or None).

    Efficiency is per core used: speedup × cores_base / cores_run, so the "1 process, all
    cores" row is judged by the same measure as N one-thread processes.
    """
    ok = [r for r in runs if r["status"] == "ok" and r.get("samples_per_s")]
    plain = [r for r in ok if not r["sync_bn"] and not r.get("all_cores")] or ok
    base = min(plain, key=lambda r: r["nproc"]) if plain else None
    for r in runs:
        r["speedup"] = r["efficiency"] = None
        if base is not None and r in ok:
            r["speedup"] = r["samples_per_s"] / base["samples_per_s"]
            r["efficiency"] = r["speedup"] * _cores(base) / _cores(r)
    return base


def machine_info() -> dict[str, Any]:
    """Where and with what the study ran: host, cores, load, versions, date."""
    import torch

    from distrain import __version__

    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = []
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "host": platform.node(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cores": usable_cores(),
        "load_average": load,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "distrain": __version__,
        "cuda_available": torch.cuda.is_available(),
    }


def _fmt_n(n: int) -> str:
    return f"{n} process" + ("es" if n != 1 else "")


def interpret(runs: list[dict[str, Any]], machine: dict[str, Any]) -> dict[str, str]:
    """One sentence per chart, computed from the numbers."""
    ok = sorted(
        (r for r in runs if r["status"] == "ok" and r.get("time_per_epoch_mean")),
        key=lambda r: r["nproc"],
    )
    all_cores = next((r for r in ok if r.get("all_cores")), None)
    ok = [r for r in ok if not r.get("all_cores")]
    plain = [r for r in ok if not r["sync_bn"]]
    failed = [r["name"] for r in runs if r["status"] != "ok"]
    out = {
        "time_per_epoch": _time_per_epoch(plain),
        "throughput": _throughput(plain, machine, all_cores),
        "accuracy_syncbn": _accuracy_syncbn(ok, plain),
        "accuracy_scaling": _accuracy_scaling(plain),
    }
    if failed:
        out["failed"] = (
            f"{len(failed)} run(s) failed: {', '.join(failed)} — see the table and "
            "each run's log.txt."
        )
    return out


def _time_per_epoch(plain: list[dict[str, Any]]) -> str:
    """The time-per-epoch chart's sentence: the smallest and largest runs without SyncBN."""
    if len(plain) >= 2:
        a, b = plain[0], plain[-1]
        ratio = a["time_per_epoch_mean"] / b["time_per_epoch_mean"]
        ideal = b["nproc"] / a["nproc"]
        verb = "falls" if ratio > 1 else "rises"
        text = (
            f"Time per epoch {verb} from {a['time_per_epoch_mean']:.2f} s on "
            f"{_fmt_n(a['nproc'])} to "
            f"{b['time_per_epoch_mean']:.2f} s on {_fmt_n(b['nproc'])}: {ratio:.2f}× faster where "
            f"{ideal:.0f}× is ideal."
        )
    elif plain:
        text = (
            f"Only one process count finished ({_fmt_n(plain[0]['nproc'])}: "
            f"{plain[0]['time_per_epoch_mean']:.2f} s per epoch); nothing to compare."
        )
    else:
        text = "No run without SyncBN finished, so there is no time-per-epoch comparison."

    return text


def _throughput(
    plain: list[dict[str, Any]], machine: dict[str, Any], all_cores: dict[str, Any] | None
) -> str:
    """The throughput chart's sentence: scaling efficiency, its lowest point and why."""
    cores = int(machine.get("usable_cores") or 1)
    load = machine.get("load_average") or []
    load_note = (
        f" (load average {load[0]:.2f} on {cores} cores when the study ended)" if load else ""
    )
    scaled = (
        [r for r in plain if r.get("efficiency") is not None and r["nproc"] > plain[0]["nproc"]]
        if plain
        else []
    )
    if scaled:
        worst = min(scaled, key=lambda r: r["efficiency"])
        parts = ", ".join(f"{r['efficiency'] * 100:.0f} % at {r['nproc']}" for r in scaled)
        busy = max(
            (x for x in (load[:1] + list(machine.get("load_average_start") or [])[:1])), default=0.0
        )
        if worst["nproc"] > cores:
            why = (
                f"{worst['nproc']} processes exceed the {cores} usable cores, so "
                "they time-share them"
            )
        elif busy > cores and worst["efficiency"] < 0.9:
            why = (
                f"the machine was busy (1-min load average up to {busy:.1f} on {cores} cores), "
                "so the processes "
                "waited for a core, on top of the per-step gradient all-reduce"
            )
        elif worst["efficiency"] >= 0.9:
            why = "close to ideal: per-step compute dominates the gradient all-reduce"
        else:
            why = (
                "the gap is the per-step gradient all-reduce and waiting for the slowest "
                "process, plus any other "
                "load on the machine" + load_note
            )
        text = (
            f"Scaling efficiency (throughput_N / (N × throughput_1)) is {parts}; lowest at "
            f"{worst['nproc']}: {why}."
        )
        if all_cores is not None and all_cores.get("samples_per_s"):
            best = max(scaled, key=lambda r: r["samples_per_s"])
            text += (
                f" One process with {all_cores['threads']} threads (all cores, no "
                "distrain) reaches "
                f"{all_cores['samples_per_s']:.0f} samples/s; {_fmt_n(best['nproc'])} × "
                f"{best.get('threads') or 1} thread "
                f"reach {best['samples_per_s']:.0f} "
                f"({best['samples_per_s'] / all_cores['samples_per_s']:.2f}× that)."
            )
    else:
        text = (
            "Efficiency needs a finished baseline run and a larger one; there is none to compare."
        )

    return text


def _accuracy_syncbn(ok: list[dict[str, Any]], plain: list[dict[str, Any]]) -> str:
    """The SyncBN chart's sentence: accuracy and cost of SyncBN at the largest paired count."""
    pairs = []
    for r in ok:
        if r["sync_bn"] and r.get("final_test_acc") is not None:
            twin = next(
                (
                    p
                    for p in plain
                    if p["nproc"] == r["nproc"] and p.get("final_test_acc") is not None
                ),
                None,
            )
            if twin:
                pairs.append((r, twin))
    if pairs:
        r, t = max(pairs, key=lambda p: p[0]["nproc"])
        diff = (r["final_test_acc"] - t["final_test_acc"]) * 100
        text = (
            f"On {_fmt_n(r['nproc'])} the final test accuracy is {r['final_test_acc'] * 100:.1f} % "
            "with SyncBN and "
            f"{t['final_test_acc'] * 100:.1f} % without ({diff:+.1f} points); with {r['nproc']} "
            "local batches of the same size "
            f"the difference is {'within' if abs(diff) < 2 else 'beyond'} run-to-run noise of a "
            "couple of points"
        )
        if r.get("samples_per_s") and t.get("samples_per_s"):
            cost = (1 - r["samples_per_s"] / t["samples_per_s"]) * 100
            extra = (
                "each BatchNorm layer adds cross-process reductions to the forward "
                "and backward passes"
            )
            text += (
                f"; SyncBN costs {cost:.0f} % of the throughput ({extra})."
                if cost >= 0
                else f"; the SyncBN run was {-cost:.0f} % faster, which is timing noise: SyncBN "
                f"only adds work ({extra})."
            )
        else:
            text += "."
    else:
        text = (
            "No SyncBN/BN pair with accuracy finished (run with --sync-bn both and more "
            "than one process)."
        )

    return text


def _accuracy_scaling(plain: list[dict[str, Any]]) -> str:
    """The accuracy chart's sentence: the smallest and largest runs' final test accuracy."""
    acc = [r for r in plain if r.get("final_test_acc") is not None]
    if len(acc) >= 2:
        a, b = acc[0], acc[-1]
        diff = (b["final_test_acc"] - a["final_test_acc"]) * 100
        text = (
            f"Final test accuracy is {a['final_test_acc'] * 100:.1f} % on {_fmt_n(a['nproc'])} and "
            f"{b['final_test_acc'] * 100:.1f} % on "
            f"{_fmt_n(b['nproc'])} ({diff:+.1f} points); with a fixed per-process batch, "
            f"{b['nproc']} processes take "
            f"{b['nproc'] // max(1, a['nproc'])}× fewer optimizer steps per epoch on a "
            f"{b['nproc'] // max(1, a['nproc'])}× larger global batch."
        )
    else:
        text = "Fewer than two finished runs report accuracy; nothing to compare."
    return text


def build_results(
    argv: list[str], label: str, runs: list[dict[str, Any]], threads: int, load_start: list[float]
) -> dict[str, Any]:
    """Statistics, scaling and interpretation: the content of results.json.

    ``configs`` has one row per configuration (what the table and charts show); ``rounds`` has
    every single run.
    """
    for r in runs:
        r.update(run_stats(r))
    configs = aggregate(runs)
    base = add_scaling(configs)
    machine = machine_info()
    machine["load_average_start"] = load_start
    return {
        "argv": ["distrain", "bench", "scaling", *argv],
        "workload": label,
        "threads": threads,
        "machine": machine,
        "baseline": base["name"] if base else None,
        "configs": configs,
        "rounds": runs,
        "interpretation": interpret(configs, machine),
    }


def portable(results: dict[str, Any]) -> dict[str, Any]:
    """`results` with the runs' commands free of this machine's paths (a report may be committed):
    the interpreter as ``python3``, files under the working directory relative to it."""
    cwd = os.getcwd() + os.sep

    def word(w: str) -> str:
        if w == sys.executable:
            return "python3"
        return w[len(cwd) :] if w.startswith(cwd) else w

    out = dict(results)
    for key in ("configs", "rounds"):
        out[key] = [
            {**r, "command": [word(w) for w in r["command"]]} if "command" in r else r
            for r in results.get(key, [])
        ]
    return out
