"""A rank that hangs: the job ends non-zero, the console names the rank and shows its stack."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO, python
from helpers.netns_hosts import Hosts, make_hosts

SCRIPT = str(REPO / "tests" / "scripts" / "mn_train.py")


@pytest.fixture
def hosts2() -> Iterator[Hosts]:
    """Two namespace hosts on one bridge, removed afterwards."""
    with make_hosts(2) as hosts:
        yield hosts


@pytest.mark.netns
@pytest.mark.timeout(400)
def test_hanging_rank_on_other_node_is_named(hosts2: Hosts, tmp_path: Path) -> None:
    master = hosts2.addrs[0]
    flags = [
        "--nnodes",
        "2",
        "--master-addr",
        master,
        "--master-port",
        "29500",
        "-n",
        "1",
        "--watchdog",
        "5",
    ]
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    procs = [
        hosts2.start(
            i,
            [
                python(),
                "-m",
                "distrain.cli",
                "run",
                *flags,
                "--node-rank",
                str(i),
                SCRIPT,
                "--steps",
                "100000",
                "--hang-rank",
                "1",
                "--hang-step",
                "3",
            ],
            logs[i],
        )
        for i in range(2)
    ]
    start = time.monotonic()
    codes = hosts2.wait(procs, 300, logs)
    elapsed = time.monotonic() - start
    console0, console1 = (log.read_text() for log in logs)
    assert codes[0] == 124 and codes[1] != 0, (codes, console0, console1)
    # the launching console (node 0, where rank 0 runs) names the rank on the other node and its
    # step
    summary = [
        line
        for line in console0.splitlines()
        if line.startswith("distrain watchdog: no training progress")
    ]
    assert len(summary) == 1, console0
    assert "stuck: rank 1 (node 1," in summary[0] and "at step 3 in mn_train.py:" in summary[0], (
        summary[0]
    )
    assert "ranks 0" in summary[0] or "rank 0 waits" in summary[0]
    assert "stopped by the watchdog" in console0
    # every rank's Python stack: rank 1 sleeps in the script, rank 0 waits inside torch's backward
    assert (
        "distrain watchdog: rank 1" in console1
        and 'mn_train.py", line' in console1
        and "in <module>" in console1
    )
    assert "distrain watchdog: rank 0" in console0 and "in backward" in console0
    print(f"hang detected and job down {elapsed:.1f}s after launch")


def test_diagnose_names_the_rank_outside_torch() -> None:
    from distrain.worker.lifecycle.watchdog import diagnose

    beats = {
        0: {"step": 3, "in_torch": True},
        1: {"step": 3, "in_torch": False},
        2: {"step": 3, "in_torch": True},
    }
    assert diagnose(beats, set(), 3) == ([1], "is not in a collective while the others wait for it")
    # a frozen process (heartbeat stopped) or a missing one wins over everything else
    assert diagnose(beats, {2}, 4)[0] == [2, 3]
    # everyone inside torch: a collective only some ranks called; name the ones furthest behind
    beats = {0: {"step": 5, "in_torch": True}, 1: {"step": 4, "in_torch": True}}
    assert diagnose(beats, set(), 2)[0] == [1]


def test_bad_watchdog_value_is_one_line(tmp_path: Path) -> None:
    from helpers import run

    res = run(
        [python(), "-m", "distrain.cli", "run", "-n", "2", "--watchdog", "soon", SCRIPT],
        timeout=120,
    )
    assert (
        res.returncode == 2
        and res.stderr.strip() == "distrain run: error: --watchdog expects seconds (got 'soon')"
    )


PLAIN = str(REPO / "tests" / "scripts" / "plain_step_hang.py")


@pytest.mark.timeout(200)
def test_watchdog_arms_on_a_bare_optimizer_step() -> None:
    """The README's converted script steps with opt.step(), not ctx.step(): the watchdog sees it."""
    from helpers import run

    res = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "-n",
            "2",
            "--watchdog",
            "5",
            PLAIN,
            "--hang-rank",
            "1",
            "--hang-step",
            "5",
        ],
        timeout=180,
    )
    assert res.returncode == 124, (res.returncode, res.stderr[-3000:])
    # ranks write to one stderr at once: the verdict is matched wherever it starts in a line
    summary = [
        ln[ln.index("distrain watchdog: no training") :]
        for ln in res.stderr.splitlines()
        if "distrain watchdog: no training" in ln
    ]
    assert (
        summary
        and "stuck: rank 1" in summary[0]
        and "at step 4 in plain_step_hang.py:" in summary[0]
    ), res.stderr[-3000:]


@pytest.mark.timeout(200)
def test_counted_steps_and_unarmed_warning() -> None:
    from helpers import run

    res = run(
        [python(), "-m", "distrain.cli", "run", "-n", "2", PLAIN, "--steps", "30"], timeout=180
    )
    assert res.returncode == 0 and "done: 30 counted steps" in res.stdout, res.stderr[-3000:]
    # an optimizer over a model that was never prepared: not counted, and the watchdog says so once
    res = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "-n",
            "2",
            "--watchdog",
            "30",
            PLAIN,
            "--steps",
            "30",
            "--unprepared",
        ],
        timeout=180,
    )
    assert res.returncode == 0 and "done: 0 counted steps" in res.stdout, res.stderr[-3000:]
    assert res.stderr.count("the watchdog is not armed") == 1, res.stderr[-3000:]


@pytest.mark.timeout(300)
def test_the_verdict_counts_steps_from_the_resumed_checkpoint(tmp_path: Path) -> None:
    """A rank that hangs after a resume is named at its training step, not at its process's
    count (a job resumed at step 5 that hangs after step 7 said "at step 2")."""
    from helpers import run

    worker = str(REPO / "tests" / "scripts" / "ckpt_worker.py")
    job = [python(), "-m", "distrain.cli", "run", "-n", "2", "--watchdog", "5", worker]
    ckpt = ["--dir", str(tmp_path / "ckpt"), "--out", str(tmp_path / "final.pt")]
    first = run([*job, *ckpt, "--stop-at", "5"], timeout=150)
    assert first.returncode == 0 and "finished at step 5" in first.stdout, first.stderr[-3000:]
    # a script calling distrain.init() is watched silently: no "watches nothing" line
    # (test_watchdog_notice.py has the plain script that gets it)
    assert "--watchdog watches scripts that call" not in first.stderr, first.stderr[-3000:]
    res = run([*job, *ckpt, "--hang-at", "7", "--fault-rank", "1"], timeout=200)
    assert res.returncode == 124, (res.returncode, res.stderr[-3000:])
    summary = [
        ln[ln.index("distrain watchdog: no training") :]
        for ln in res.stderr.splitlines()
        if "distrain watchdog: no training" in ln
    ]
    assert summary and "stuck: rank 1" in summary[0], res.stderr[-3000:]
    assert "at step 7 in ckpt_worker.py:" in summary[0], summary[0]
    assert "distrain watchdog: rank 1 (pid" in res.stderr and ") at step 7, stack:" in res.stderr
