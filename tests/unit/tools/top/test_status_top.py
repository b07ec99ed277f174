"""`distrain top` shows the breakdown: a column per phase, and each rank's shares in --json."""

from __future__ import annotations

from distrain.tools.top.cli import render
from distrain.tools.top.status import RankStatus


def _row(rank: int, breakdown: dict | None) -> dict:
    row = RankStatus(
        rank=rank,
        host="h",
        pid=1,
        state="running",
        step=5,
        epoch=None,
        loss=None,
        steps_per_s=1.0,
        samples_per_s=1.0,
        step_time=1.0,
        rss=0,
        gpu_util=None,
        gpu_mem=None,
        gpu_mem_total=None,
        age=0.0,
        idle=0.0,
        records=2,
        breakdown=breakdown,
    )
    return row.__dict__


def test_render_has_a_column_per_phase() -> None:
    from rich.console import Console

    shares = {
        "data": 0.1,
        "compute": 0.6,
        "comm": 0.2,
        "optimizer": 0.05,
        "checkpoint": 0.0,
        "other": 0.05,
    }
    snapshot = {
        "run_dir": "r",
        "status": "running",
        "ranks": [_row(0, shares), _row(1, None)],
        "totals": {
            "ranks": 2,
            "world_size": 2,
            "hosts": ["h"],
            "min_step": 5,
            "max_step": 5,
            "samples_per_s": 2.0,
            "rss": 0,
            "elapsed": 1.0,
            "missing_ranks": [],
        },
    }
    console = Console(width=200, record=True)
    console.print(render(snapshot))
    text = console.export_text()
    for header in ("data%", "comp%", "comm%", "opt%", "other%"):
        assert header in text
    assert "ckpt%" not in text  # shown only when some rank checkpointed
    assert " 60 " in text.splitlines()[2]


def test_render_of_replica_groups_has_a_group_column_and_the_last_heal() -> None:
    from rich.console import Console

    rows = [dict(_row(0, None), group=g) for g in (0, 1)]
    snapshot = {
        "run_dir": "r",
        "status": "running",
        "ranks": rows,
        "totals": {"ranks": 2, "world_size": 2, "hosts": ["h"], "min_step": 5, "max_step": 5,
                   "samples_per_s": 2.0, "rss": 0, "elapsed": 1.0, "missing_ranks": [], "groups": 2,
                   "heals": 1},
        "groups": [{"group": 0, "status": "running", "ranks": 1, "min_step": 5, "max_step": 5},
                   {"group": 1, "status": "running", "ranks": 1, "min_step": 5, "max_step": 5}],
        "events": [{"event": "lost", "group": 1, "step": 3},
                   {"event": "healed", "group": 1, "source": 0, "step": 4}],
    }  # fmt: skip
    console = Console(width=200, record=True)
    console.print(render(snapshot))
    lines = console.export_text().splitlines()
    assert "replica groups: group 0 running step 5 · group 1 running step 5 · heals 1" in lines[1]
    assert "(last: group 1 from group 0 at step 4)" in lines[1]
    assert lines[2].split()[:2] == ["group", "rank"]
    assert [line.split()[0] for line in lines[3:5]] == ["0", "1"]  # each row names its group
