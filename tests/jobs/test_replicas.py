"""`distrain run --replicas`: real TorchFT lighthouse, real replica groups, real SIGKILL.

The script (tests/scripts/replica_job.py) is a normal distrain script without TorchFT code.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import EXAMPLES, SCRIPTS, kill_group, python, run

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchft") is None,
    reason="torchft not installed (pip install 'distrain[ft]')",
)

SCRIPT = str(SCRIPTS / "replica_job.py")


def _finals(out: Path) -> dict[int, dict[str, object]]:
    return {int(p.name.split(".")[1]): json.loads(p.read_text()) for p in out.glob("final.*.json")}


def _starts(out: Path) -> list[tuple[int, int]]:
    return [
        (int(pid), int(group))
        for pid, group, _ in (line.split() for line in (out / "starts").read_text().splitlines())
    ]


@pytest.mark.timeout(300)
def test_survivor_trains_through_a_sigkill(tmp_path: Path) -> None:
    """Group 1 dies inside a backward pass, while group 0 waits for it in the gradient
    all-reduce (the survivor once crashed there: TorchFT's future of a failed all-reduce was
    never set); group 0 trains on in the same process, group 1 is replaced and heals."""
    out = tmp_path / "out"
    out.mkdir()
    # 55 steps (~3 s) after the kill: the survivor must still be training when the replacement
    # is back (~1 s here, more on a loaded machine), else the replacement finds no live group
    steps = 80
    # --cpu too: under a rehearsal torch.accelerator answers for stand-in GPUs, and TorchFT's
    # Manager must still not touch CUDA (it made a CUDA stream and failed on this CPU machine)
    cmd = [python(), "-m", "distrain.cli", "run", "--cpu", "--replicas", "2", "-n", "1",
           "--run-dir", str(tmp_path / "run"),
           SCRIPT, "--out", str(out), "--dir", str(tmp_path / "ckpt"), "--steps", str(steps),
           "--kill-at", "25", "--kill-group", "1", "--kill-in-backward",
           "--late-group", "1", "--late", "2"]  # fmt: skip
    res = run(cmd, timeout=280)
    assert res.returncode == 0, res.stderr[-3000:]
    # group 1 loads 2 s longer: group 0's first quorum waits for it (without the start marks it
    # trained alone for those 2 s and its first step had 1 participant), so both take step 0
    # together
    assert [(out / f"first.{g}.0").read_text() for g in (0, 1)] == ["0 2\n", "0 2\n"]
    starts = _starts(out)
    survivor = [pid for pid, group in starts if group == 0]
    assert len(survivor) == 1, starts  # the script's start ran once in the group that did not fail
    assert len([pid for pid, group in starts if group == 1]) == 2, (
        starts
    )  # killed once, replaced once
    finals = _finals(out)
    assert finals[0]["pid"] == survivor[0]  # the same process trained to the end
    assert finals[0]["step"] == finals[1]["step"] == steps
    assert (
        finals[0]["params"] == finals[1]["params"]
    )  # healed, then the same committed steps: bit for bit
    assert (
        "distrain run: replica group 1 lost at step 25 (rank 0, pid" in res.stderr
        and "SIGKILL); 1/2 groups continue" in res.stderr
    )
    assert "distrain run: replica group 1 healed from group 0 at step" in res.stderr
    for group in (0, 1):  # the processes that ended (not the killed one) left no group thread
        assert (out / f"threads.{group}.0").read_text() == "group threads at exit: []\n"

    # distrain top on the job's run directory: both groups' ranks, the loss and the heal
    top = run([python(), "-m", "distrain.cli", "top", str(tmp_path / "run"), "--json"], timeout=60)
    assert top.returncode == 0, top.stderr[-2000:]
    snap = json.loads(top.stdout)
    assert snap["totals"]["groups"] == 2 and snap["status"] == "finished", snap["status"]
    assert sorted((r["group"], r["rank"], r["step"]) for r in snap["ranks"]) == [
        (0, 0, steps),
        (1, 0, steps),
    ]
    events = [(e["event"], e["group"], e.get("source")) for e in snap["events"]]
    lost = events.index(("lost", 1, None))
    assert ("healed", 1, 0) in events[lost:], events
    assert snap["totals"]["heals"] == sum(e[0] == "healed" for e in events) >= 1
    once = run([python(), "-m", "distrain.cli", "top", str(tmp_path / "run"), "--once"], timeout=60)
    assert re.search(
        rf"replica groups: group 0 finished step {steps} · group 1 finished step {steps} · heals "
        r"[12] \(last: group 1 from group 0",
        once.stdout,
    ), once.stdout


@pytest.mark.timeout(300)
def test_lighthouse_death_stops_the_job_in_one_line(tmp_path: Path) -> None:
    import psutil

    out = tmp_path / "out"
    out.mkdir()
    cmd = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "1", SCRIPT,
           "--out", str(out), "--dir", str(tmp_path / "ckpt"), "--steps", "100000"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 200
        while not ((out / "starts").exists() and len(_starts(out)) >= 2):
            assert time.monotonic() < deadline and proc.poll() is None, "the groups did not start"
            time.sleep(0.5)
        time.sleep(2)  # training
        (house,) = [
            p
            for p in psutil.Process(proc.pid).children()
            if any(os.path.basename(a).startswith("torchft_lighthouse") for a in p.cmdline()[:2])
        ]
        os.kill(house.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)  # nothing hangs
    finally:
        kill_group(proc)
    assert proc.returncode != 0
    assert (
        f"distrain run: error: the TorchFT lighthouse (pid {house.pid}) ended (SIGKILL)" in err
    ), err[-3000:]
    # the cause is the job's last line, after the groups' own ends (the chaos oracle reads it)
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert "the TorchFT lighthouse" in last, err[-3000:]


def _resumed(out: Path) -> list[tuple[int, int, int, int]]:
    """(pid, group, rank, step ckpt.restore returned), one per process start, in start order."""
    rows = (line.split() for line in (out / "resumed").read_text().splitlines())
    return [(int(pid), int(g), int(r), int(s)) for pid, g, r, s in rows]


@pytest.mark.timeout(400)
def test_two_by_two_one_process_killed_then_every_group_killed(tmp_path: Path) -> None:
    """2 groups × 2 processes in one job, two faults: rank 1 of group 1 at step 20 (group 0 trains
    on, group 1 heals), then one process of each group at step 42 (no live group is left: both
    resume from their disk checkpoints and still end at step 100, equal).  The replacement of the
    first fault must find group 0 still training: group 0 waits at step 30 until it started (at
    load 26 it came back after group 0's step 100 once, and healed there: no second fault)."""
    out = tmp_path / "out"
    out.mkdir()
    cmd = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "2", SCRIPT,
           "--out", str(out), "--dir", str(tmp_path / "ckpt"), "--steps", "100", "--every", "5",
           "--kill", "20:1:1", "--kill", "42:0:0", "--kill", "42:1:0", "--hold-for-restart",
           "30"]  # fmt: skip
    res = run(cmd, timeout=380)
    assert res.returncode == 0, res.stderr[-3000:]
    resumed = _resumed(out)
    by_group = {g: [(r, s) for _, gg, r, s in resumed if gg == g] for g in (0, 1)}
    # group 0's two processes started once and trained through group 1's loss (no restart near
    # step 20), then were started again by the second fault; group 1 was started three times
    assert len(by_group[0]) == 4 and len(by_group[1]) == 6, resumed
    assert all(s < 20 for _, s in by_group[0][:2] + by_group[1][:2]), resumed  # a late start heals
    replacement = by_group[1][2:4]  # after the first fault: caught up with group 0, which went on
    assert sorted(r for r, _ in replacement) == [0, 1] and all(
        20 <= s < 100 for _, s in replacement
    )
    # after the second: both groups from disk (step 40 or later); a group restarted later than
    # the other may find it ahead and copy its state instead
    again = by_group[0][2:] + by_group[1][4:]
    assert all(40 <= s < 100 for _, s in again), resumed
    finals = _finals_2(out)
    assert sorted(finals) == [(0, 0), (0, 1), (1, 0), (1, 1)], finals
    assert {f["step"] for f in finals.values()} == {100}
    assert "distrain run: replica group 1 lost at step 20 (rank 1, pid" in res.stderr, res.stderr[
        -3000:
    ]
    # its disk checkpoint of step 20 may already be where group 0 is: a heal or a rejoin
    assert re.search(
        r"distrain run: replica group 1 (healed from group 0|rejoined) at step", res.stderr
    )
    assert "0/2 groups continue" in res.stderr  # the second fault took every group
    # every process of both groups, bit for bit (before Replicas._match_group, about one run in
    # two ended with two states: TorchFT had healed the ranks of one group from different groups
    # at the first quorum, and a disk checkpoint then mixed their tensors)
    assert len({f["params"] for f in finals.values()}) == 1, finals


@pytest.mark.timeout(300)
def test_fsdp_inside_groups_survivor_trains_through_a_sigkill(tmp_path: Path) -> None:
    """2 groups × 2 processes sharding with FSDP inside each group (their reduce-scattered
    shards all-reduced across groups), saving sharded checkpoints: rank 1 of group 1 is killed
    at step 25; group 0's processes train on, group 1 is replaced and heals rank by rank, and
    every rank ends with the same shard as its peer in the other group."""
    out = tmp_path / "out"
    out.mkdir()
    cmd = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "2", SCRIPT,
           "--strategy", "fsdp",
           "--out", str(out), "--dir", str(tmp_path / "ckpt"), "--steps", "60", "--every", "10",
           "--kill", "25:1:1"]  # fmt: skip
    res = run(cmd, timeout=280)
    assert res.returncode == 0, res.stderr[-3000:]
    starts = _starts(out)
    assert len([pid for pid, group in starts if group == 0]) == 2, (
        starts
    )  # each rank of group 0 once
    assert len([pid for pid, group in starts if group == 1]) == 4, starts  # group 1 restarted once
    finals = _finals_2(out)
    assert {f["step"] for f in finals.values()} == {60}, finals
    for rank in (0, 1):  # rank r of each group holds shard r: equal across groups, bit for bit
        assert finals[(0, rank)]["params"] == finals[(1, rank)]["params"], finals
    assert finals[(0, 0)]["params"] != finals[(0, 1)]["params"]  # they are shards, not copies
    assert "distrain run: replica group 1 lost at step 25 (rank 1, pid" in res.stderr
    assert "distrain run: replica group 1 healed from group 0 at step" in res.stderr
    assert list((tmp_path / "ckpt" / "replica_0").glob("step_*")), "no sharded checkpoint was saved"


def _finals_2(out: Path) -> dict[tuple[int, int], dict[str, object]]:
    return {
        (int(p.name.split(".")[1]), int(p.name.split(".")[2])): json.loads(p.read_text())
        for p in out.glob("final.*.json")
    }


@pytest.mark.netns
@pytest.mark.timeout(300)
def test_groups_on_two_nodes_survivor_trains_through_a_sigkill(tmp_path: Path) -> None:
    """--replicas 2 --nnodes 2 in two network namespaces: one group per node, the lighthouse on
    node 0.  Group 1 (node 1) is killed; group 0 trains on in the same process, group 1 is
    replaced and heals from group 0 across the link, and both end with the same parameters."""
    from helpers.netns_hosts import make_hosts

    out = tmp_path / "out"
    out.mkdir()
    with make_hosts(2) as hosts:
        procs, logs = [], [tmp_path / "node0.log", tmp_path / "node1.log"]
        for node in range(2):
            cmd = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "1", "--nnodes",
                   "2", "--node-rank", str(node),
                   "--master-addr", hosts.addrs[0], "--master-port", "29500", SCRIPT, "--out",
                   str(out),
                   "--dir", str(tmp_path / f"ckpt{node}"), "--steps", "60", "--kill-at", "25",
                   "--kill-group", "1"]  # fmt: skip
            procs.append(hosts.start(node, cmd, logs[node]))
        codes = hosts.wait(procs, 240, logs)
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0], texts[0][-2000:] + texts[1][-2000:]
    assert (
        "(groups 0–0 on node 0/2); TorchFT lighthouse on " + hosts.addrs[0] + ":29500" in texts[0]
    )
    # the start marks crossed the nodes: neither group waited out its start for the other
    assert not any("starts without" in text for text in texts), texts
    assert [(out / f"first.{g}.0").read_text() for g in (0, 1)] == ["0 2\n", "0 2\n"]
    starts = _starts(out)
    assert len([pid for pid, group in starts if group == 0]) == 1, (
        starts
    )  # the survivor never restarted
    assert len([pid for pid, group in starts if group == 1]) == 2, (
        starts
    )  # killed once, replaced once
    finals = _finals(out)
    assert finals[0]["step"] == finals[1]["step"] == 60
    assert (
        finals[0]["params"] == finals[1]["params"]
    )  # healed across the nodes, then the same steps
    # each node's launcher reports its own groups: the loss and the heal are node 1's lines
    assert (
        "distrain run: replica group 1 lost at step 25" in texts[1]
        and "1/2 groups continue" in texts[1]
    )
    assert "distrain run: replica group 1 healed from group 0 at step" in texts[1]
    assert "replica group 1" not in texts[0].replace("replica groups", "")
    for group in (0, 1):
        assert (out / f"threads.{group}.0").read_text() == "group threads at exit: []\n"


@pytest.mark.timeout(300)
def test_a_replacement_back_after_the_survivor_ended_copies_its_final_state(tmp_path: Path) -> None:
    """The FSDP test's divergence under load, made certain: group 1's replacement starts 8 s
    late, after group 0 trained its last steps alone and ended.  Group 0 stays to serve it (before,
    the replacement found no live group, resumed from its step-20 checkpoint and trained 21-40
    alone: another model, exit code 0); both end at step 40, equal rank by rank."""
    out = tmp_path / "out"
    out.mkdir()
    cmd = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "2", "--run-dir",
           str(tmp_path / "run"),
           SCRIPT, "--strategy", "fsdp", "--out", str(out), "--dir", str(tmp_path / "ckpt"),
           "--steps", "40", "--every", "10", "--kill", "25:1:1", "--late-restart", "8"]  # fmt: skip
    res = run(cmd, timeout=280)
    assert res.returncode == 0, res.stderr[-3000:]
    finals = _finals_2(out)
    assert {f["step"] for f in finals.values()} == {40}, finals
    for rank in (0, 1):
        assert finals[(0, rank)]["params"] == finals[(1, rank)]["params"], finals
    assert "distrain run: replica group 1 healed from group 0 at step 40" in res.stderr, res.stderr[
        -3000:
    ]
    assert "distrain run: replica groups 0, 1 ended at step 40 with equal states" in res.stderr
    # the replacement took no step: its end record (at the healed step) tells `distrain top` the
    # job finished; before, top read its killed predecessor's last record and said "stalled"
    top = run([python(), "-m", "distrain.cli", "top", str(tmp_path / "run"), "--json"], timeout=60)
    snap = json.loads(top.stdout)
    assert snap["status"] == "finished", snap["status"]
    assert sorted((r["group"], r["rank"], r["step"]) for r in snap["ranks"]) == [
        (0, 0, 40), (0, 1, 40), (1, 0, 40), (1, 1, 40)
    ], snap["ranks"]  # fmt: skip


@pytest.mark.timeout(200)
def test_groups_that_end_with_different_states_fail_the_job_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    cmd = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "1", SCRIPT, "--out",
           str(out),
           "--dir", str(tmp_path / "ckpt"), "--steps", "10", "--perturb-group", "1"]  # fmt: skip
    res = run(cmd, timeout=180)
    assert res.returncode == 1, res.stderr[-3000:]
    errors = [line for line in res.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith(
        "distrain run: error: replica groups ended with different states: rank 0 of group 0 "
        "at step 10, state "
    ), res.stderr[-3000:]


@pytest.mark.timeout(400)
def test_docs_first_command_without_a_checkpoint_dir_ends_groups_equal(tmp_path: Path) -> None:
    """`distrain run --replicas 2 -n 1 examples/train_digits.py` (no --checkpoint-dir), group 1's
    process SIGKILLed in epoch 2 of 6: the replacement copies model, optimizer, scheduler, loader
    position and step from group 0 (before: the model only; it restarted at epoch 0 and trained
    on alone after group 0 ended), and both groups end at the same step with equal states."""
    import psutil

    log = tmp_path / "stdout"
    cmd = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "1",
           str(EXAMPLES / "train_digits.py"),
           "--epochs", "6", "--out", str(tmp_path / "model")]  # fmt: skip
    with open(log, "w") as stdout:
        proc = subprocess.Popen(
            cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 300
        while "epoch 1/6" not in log.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, "epoch 1 did not end"
            time.sleep(0.1)
        os.kill(_worker_of_group(psutil.Process(proc.pid), 1), signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, err[-3000:]
    assert (
        "distrain run: replica group 1 lost at step" in err and "healed from group 0 at step" in err
    ), err[-3000:]
    # 6 epochs × 22 batches; the step during which group 1 died is not committed (its batch is
    # skipped by both groups), so the last step is 131 or so: the same in both, states equal
    last = re.search(
        r"distrain run: replica groups 0, 1 ended at step (\d+) with equal states", err
    )
    assert last and 128 <= int(last[1]) <= 132, err[-3000:]


def _worker_of_group(launcher: object, group: int) -> int:
    """The pid of rank 0 of `group`: under its group's `distrain run` (DISTRAIN_REPLICA_GROUP)."""
    for child in launcher.children():  # type: ignore[attr-defined]
        if child.environ().get("DISTRAIN_REPLICA_GROUP") == str(group):
            for p in child.children(recursive=True):
                if p.cmdline() and p.cmdline()[0].startswith("distrain rank 0/"):
                    return int(p.pid)
    raise AssertionError(f"no worker of group {group} under {launcher}")
