"""tools/bench/study/plots.py: the scaling charts say what they show (issue 34's defects
checked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from distrain.tools.bench.study import plots, report


def _run(
    name: str,
    nproc: int,
    sps: float,
    sync_bn: bool = False,
    all_cores: bool = False,
    threads: int = 1,
) -> dict[str, Any]:
    return {
        "name": name, "nproc": nproc, "sync_bn": sync_bn, "all_cores": all_cores,
            "threads": threads, "status": "ok",
        "samples_per_s": sps,
            "efficiency": sps / (nproc * 1000.0) if not all_cores else sps / 2000.0,
        "time_per_epoch_mean": 1400 / sps, "time_per_epoch_std": 0.01,
        "epochs": [{"epoch": e, "test_acc": 0.5 + 0.1 * e} for e in (1, 2, 3)],
    }  # fmt: skip


RUNS = [
    _run("n1-bn", 1, 1000.0),
    _run("n1-allcores", 1, 1900.0, all_cores=True, threads=2),
    _run("n2-bn", 2, 1800.0),
]


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures the chart functions would save, kept open for inspection."""
    kept: list[Any] = []

    def keep(fig: Any, path: Path) -> None:
        fig.canvas.draw()  # lay it out as savefig would
        kept.append(fig)

    monkeypatch.setattr(plots, "_save", keep)
    return kept


def test_accuracy_lines_have_distinct_labels(figures: list[Any]) -> None:
    """The one-process baseline and the all-cores process were both labelled "1 process"."""
    plots.accuracy_scaling(RUNS, Path("unused.png"))
    labels = [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]
    assert len(labels) == 3 and len(set(labels)) == 3, labels
    assert "1 process × 2 threads" in labels, labels


def test_throughput_legend_covers_no_point(figures: list[Any]) -> None:
    """2 processes at 30 % efficiency (small model, loaded 2 cores): its point sat under legend."""
    slow = [RUNS[0], RUNS[1], _run("n2-bn", 2, 600.0)]
    plots.throughput(slow, slow[0], Path("unused.png"))
    fig = figures[0]
    ax, ax2 = fig.axes[0], fig.axes[1]
    box = (
        ax.get_legend().get_window_extent().expanded(1.0, 1.0).padded(4)
    )  # a marker's radius around it
    for axes in (ax, ax2):
        for line in axes.get_lines():
            if line.get_transform() != axes.transData:  # axhline: across the axes, no data point
                continue
            for x, y in axes.transData.transform(line.get_xydata()):
                assert not box.contains(x, y), f"the legend covers a point of {line.get_label()!r}"


def test_no_syncbn_chart_without_syncbn_runs(tmp_path: Path) -> None:
    """An empty SyncBN chart was written (and shown in the report) when SyncBN was not run."""
    (tmp_path / "accuracy_syncbn.png").write_bytes(b"stale")  # from an earlier run into the folder
    written = plots.write_all(RUNS, RUNS[0], tmp_path)
    assert not (tmp_path / "accuracy_syncbn.png").exists() and all(p.exists() for p in written)
    assert [p.name for p in written] == [
        "time_per_epoch.png",
        "throughput.png",
        "accuracy_scaling.png",
    ]
    with_syncbn = [*RUNS, _run("n2-syncbn", 2, 1700.0, sync_bn=True)]
    assert (tmp_path / "accuracy_syncbn.png") in plots.write_all(with_syncbn, RUNS[0], tmp_path)
    assert report.has_syncbn(with_syncbn) and not report.has_syncbn(RUNS)


def test_comm_plot_separates_the_small_sizes(figures: list[Any]) -> None:
    """Everything up to 4 KiB was drawn as one flat line at 0 (a linear bandwidth axis)."""
    sizes = [4 * 4**k for k in range(12)]  # 4 B .. 16 MiB
    doc = {
        "ops": ["all_reduce"], "world_size": 2, "backend": "gloo", "device": "cpu",
        "dtype": "float32",
        "results": [{"op": "all_reduce", "bytes": b, "busbw_gbps": 5.0 * b / (b + 2**20)}
                    for b in sizes],
    }  # fmt: skip
    plots.comm_bandwidth(doc, Path("unused.png"))
    ax = figures[0].axes[0]
    small = [  # 4 B, 16 B, … 4 KiB: 0.00002 to 0.02 GB/s, in pixels
        ax.transData.transform((r["bytes"], r["busbw_gbps"]))[1]
        for r in doc["results"]
        if r["bytes"] <= 4096
    ]
    steps = [hi - lo for lo, hi in zip(small, small[1:], strict=False)]
    assert min(steps) > 10, steps  # pixels between neighbours, not one flat line
