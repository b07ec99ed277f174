"""The four classic scaling charts as PNG files (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.ticker import MaxNLocator  # noqa: E402

from distrain.tools.bench.study.report import has_syncbn  # noqa: E402

#: file names, in the order the report shows them
CHARTS = ("time_per_epoch.png", "throughput.png", "accuracy_scaling.png", "accuracy_syncbn.png")
#: drawn only when the runs' metrics carry distrain's step breakdown
BREAKDOWN_CHART = "breakdown.png"
#: one colour per phase, the same in every report
PHASE_COLORS = {
    "data": "tab:purple",
    "compute": "tab:blue",
    "comm": "tab:red",
    "optimizer": "tab:green",
    "checkpoint": "tab:brown",
    "other": "0.7",
}


def _unit(n: int, device: str) -> str:
    word = "GPU" if device == "cuda" else "process"
    plural = "GPUs" if device == "cuda" else "processes"
    return f"{n} {word if n == 1 else plural}"


def _label(run: dict[str, Any], device: str, sep: str = "\n") -> str:
    """A configuration's name on a chart: the all-cores baseline is `1 process × T threads`, so
    it is never a second "1 process"."""
    if run.get("all_cores"):
        return f"1 process{sep}× {run['threads']} threads"
    return _unit(run["nproc"], device)


def _no_data(ax: Any, text: str) -> None:
    ax.text(
        0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="0.4"
    )
    ax.set_xticks([])
    ax.set_yticks([])


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # a legend outside the axes stays in the image
    plt.close(fig)


def time_per_epoch(runs: list[dict[str, Any]], path: Path, device: str = "cpu") -> None:
    """Bars of time per epoch per process count, labelled with the seconds (the classic chart)."""
    plain = sorted(
        (r for r in runs if not r["sync_bn"]), key=lambda r: (r["nproc"], bool(r.get("all_cores")))
    )
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    if not plain:
        _no_data(ax, "no runs")
    else:
        labels = [_label(r, device) for r in plain]
        heights = [r.get("time_per_epoch_mean") or 0.0 for r in plain]
        errs = [r.get("time_per_epoch_std") or 0.0 for r in plain]
        colors = ["tab:blue" if r["status"] == "ok" else "tab:gray" for r in plain]
        bars = ax.bar(labels, heights, yerr=errs, capsize=4, color=colors, width=0.6)
        for bar, r, h, e in zip(bars, plain, heights, errs, strict=True):
            text = f"{h:.2f}s" if r["status"] == "ok" and h else "failed"
            ax.annotate(
                text,
                (bar.get_x() + bar.get_width() / 2, h + e),
                xytext=(0, 4),  # above the error bar
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=10,
            )
        ax.set_ylim(0, max([h + e for h, e in zip(heights, errs, strict=True)] + [1e-9]) * 1.2)
        ax.set_ylabel("training time per epoch (s)")
    ax.set_title("Training time per epoch")
    _save(fig, path)


def throughput(runs: list[dict[str, Any]], base: dict[str, Any] | None, path: Path) -> None:
    """Throughput vs N with the ideal line, and efficiency on a second axis."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ok = sorted(
        (r for r in runs if r["status"] == "ok" and r.get("samples_per_s") and not r["sync_bn"]),
        key=lambda r: r["nproc"],
    )
    all_cores = next((r for r in ok if r.get("all_cores")), None)
    ok = [r for r in ok if not r.get("all_cores")]
    if not ok or base is None:
        _no_data(ax, "no finished runs")
    else:
        ns = [r["nproc"] for r in ok]
        ax.plot(ns, [r["samples_per_s"] for r in ok], "o-", color="tab:blue", label="measured")
        ax.plot(
            ns,
            [base["samples_per_s"] * n / base["nproc"] for n in ns],
            "--",
            color="0.5",
            label="ideal (linear)",
        )
        if all_cores is not None:
            ax.axhline(
                all_cores["samples_per_s"],
                linestyle=":",
                color="tab:green",
                label=f"1 process × {all_cores['threads']} threads",
            )
        ax.set_xlabel("processes")
        ax.set_ylabel("samples/s (all processes)")
        ax.set_xticks(ns)
        ax.set_ylim(bottom=0)
        ax2 = ax.twinx()
        ax2.plot(
            ns, [r["efficiency"] * 100 for r in ok], "s:", color="tab:orange", label="efficiency"
        )
        ax2.set_ylabel("scaling efficiency (%)")
        ax2.set_ylim(0, 110)
        lines = ax.get_legend_handles_labels()
        lines2 = ax2.get_legend_handles_labels()
        # below the axes: inside, it covered a measured point whatever corner it took
        ax.legend(
            lines[0] + lines2[0],
            lines[1] + lines2[1],
            loc="upper center",
            bbox_to_anchor=(0.5, -0.14),
            ncol=2,
            fontsize=9,
        )
    ax.set_title("Throughput and scaling efficiency")
    _save(fig, path)


def _curves(ax: Any, series: list[tuple[str, dict[str, Any], str]]) -> bool:
    drawn = False
    for label, run, style in series:
        pts = [
            (e["epoch"], e["test_acc"])
            for e in run.get("epochs", [])
            if isinstance(e.get("test_acc"), (int, float))
        ]
        if pts:
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                style,
                label=label,
                marker="o",
                markersize=3,
            )
            drawn = True
    if drawn:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy")
        ax.legend(loc="best")  # matplotlib's choice: the corner with the fewest points
        ax.grid(alpha=0.3)
    return drawn


def accuracy_scaling(runs: list[dict[str, Any]], path: Path, device: str = "cpu") -> None:
    """Test accuracy per epoch: 1 process against N (without SyncBN)."""
    plain = sorted(
        (r for r in runs if not r["sync_bn"] and r["status"] == "ok"), key=lambda r: r["nproc"]
    )
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    if not _curves(
        ax, [(_label(r, device, " "), r, ":" if r.get("all_cores") else "-") for r in plain]
    ):
        _no_data(ax, "no accuracy records")
    ax.set_title("Test accuracy: single vs multi-process")
    _save(fig, path)


def accuracy_syncbn(runs: list[dict[str, Any]], path: Path, device: str = "cpu") -> None:
    """Test accuracy per epoch with and without SyncBN, for each process count that has both."""
    ok = [r for r in runs if r["status"] == "ok"]
    series = []
    for n in sorted({r["nproc"] for r in ok if r["sync_bn"]}):
        for r in ok:
            if r["nproc"] == n:
                series.append(
                    (
                        f"{_unit(n, device)}, {'SyncBN' if r['sync_bn'] else 'BN'}",
                        r,
                        "-" if r["sync_bn"] else "--",
                    )
                )
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    if not _curves(ax, series):
        _no_data(ax, "no SyncBN runs (use --sync-bn both)")
    ax.set_title("Test accuracy: SyncBatchNorm vs BatchNorm")
    _save(fig, path)


def breakdown(runs: list[dict[str, Any]], path: Path, device: str = "cpu") -> bool:
    """Stacked bars of ms per step by phase per configuration with a breakdown; False if none."""
    from distrain.tools.bench.study.breakdown import ordered

    rows = sorted(
        (r for r in runs if r.get("breakdown_ms")),
        key=lambda r: (r["nproc"], r["sync_bn"], bool(r.get("all_cores"))),
    )
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    labels = []
    for r in rows:
        name = _label(r, device)
        labels.append(name + ("\nSyncBN" if r["sync_bn"] else ""))
    bottoms = [0.0] * len(rows)
    phases = ordered({p: 0.0 for r in rows for p in r["breakdown_ms"]})
    for phase, _ in phases:
        heights = [r["breakdown_ms"].get(phase, 0.0) for r in rows]
        if not any(heights):
            continue
        ax.bar(
            labels, heights, bottom=bottoms, width=0.6, label=phase, color=PHASE_COLORS.get(phase)
        )
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    for i, total in enumerate(bottoms):
        ax.annotate(
            f"{total:.0f} ms",
            (i, total),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=10,
        )
    ax.set_ylim(0, max(bottoms + [1e-9]) * 1.45)  # room for the legend above the bars
    ax.set_ylabel("ms per step (mean over ranks)")
    ax.legend(loc="upper center", ncol=3, fontsize=9)
    ax.set_title("Where a step's time goes")
    _save(fig, path)
    return True


def write_all(
    runs: list[dict[str, Any]], base: dict[str, Any] | None, out: Path, device: str = "cpu"
) -> list[Path]:
    """Write every chart that has data into `out`; returns their paths in CHARTS order.

    The SyncBN chart only when a SyncBN run finished (an empty chart says nothing), the
    breakdown only when the runs carry one.
    """
    time_per_epoch(runs, out / CHARTS[0], device)
    throughput(runs, base, out / CHARTS[1])
    accuracy_scaling(runs, out / CHARTS[2], device)
    written = [out / c for c in CHARTS[:3]]
    stale = out / CHARTS[3]
    if has_syncbn(runs):
        accuracy_syncbn(runs, stale, device)
        written.append(stale)
    elif stale.exists():  # from an earlier run into the same folder (--resume)
        stale.unlink()
    drawn = breakdown(runs, out / BREAKDOWN_CHART, device)
    return written + ([out / BREAKDOWN_CHART] if drawn else [])


def comm_bandwidth(doc: dict[str, Any], path: Path, size_label: Callable[[int], str] = str) -> None:
    """`distrain bench comm`'s results: bus bandwidth against message size, one line per op
    (sizes written by `size_label`, e.g. ``4 KiB``).

    busbw, not algbw: nccl-tests' normalisation makes the ops comparable with each other and
    with the link's speed whatever the number of ranks.  A size that failed its check is a red x.
    """
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for op in doc["ops"]:
        rows = sorted((r for r in doc["results"] if r["op"] == op), key=lambda r: r["bytes"])
        if not rows:
            continue
        ax.plot(
            [r["bytes"] for r in rows],
            [r["busbw_gbps"] for r in rows],
            "o-",
            markersize=3,
            label=op,
        )
        bad = [r for r in rows if r.get("correct") is False]
        if bad:
            ax.plot(
                [r["bytes"] for r in bad],
                [r["busbw_gbps"] for r in bad],
                "x",
                color="red",
                markersize=8,
            )
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(
        FuncFormatter(lambda x, _pos: size_label(int(x)) if x >= 1 else "")
    )
    ax.set_xlabel("message size")
    ax.set_ylabel("bus bandwidth (GB/s, log scale)")
    # log: a small message's bandwidth is 1000× below a large one's; on a linear axis every size
    # up to a few KiB was one flat line at 0
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
    ax.grid(alpha=0.3, which="both")
    ax.legend(
        loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=4, fontsize=9
    )  # below: no point covered
    ax.set_title(
        f"bench comm: {doc['world_size']} ranks, {doc['backend']}, {doc['device']}, {doc['dtype']}"
    )
    _save(fig, path)
