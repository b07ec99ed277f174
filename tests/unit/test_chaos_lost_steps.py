"""The chaos oracle's lost-steps rule (benchmarks/chaos/oracle.py) on recorded histories: a trial
that healed bit for bit and resumed from the newest valid checkpoint still breaks the promise
when it lost more steps than its kind's checkpoint interval (+1 in flight); and the memory tier
must leave nothing behind after a good end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "chaos"))
from kinds import KINDS, Job, interval  # noqa: E402
from oracle import RunRecord, Verdict, lost_bound, lost_steps_verdict, memory_left  # noqa: E402
from recovery import cost  # noqa: E402

FAULT_T = 1000.0
RESUMED = "distrain: resumed from {where} (step {step}, saved on 2 rank(s))\n"
ADDRS = ["10.0.0.1", "10.0.0.2"]  # a two-node kind's nodes
RESTART = "distrain run: rank 1 (pid 9) was killed by SIGKILL; restarting every rank (attempt 1)"


def _history(run_dir: Path, at_fault: int, resumed: int) -> None:
    """Two ranks train to `at_fault` by the fault (as distrain.monitor.recorder writes them:
    one record every 0.1 s), then two new ranks resume at `resumed` and log on."""
    for rank, pid in ((0, 10), (1, 11)):
        path = run_dir / "metrics" / f"rank-{rank}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        base = {"host": "h", "rank": rank, "world_size": 2, "attempt": 0}
        lines = [{"t": FAULT_T - 0.1 * (at_fault - s), "event": "beat", "pid": pid, **base,
                  "first_log_t": FAULT_T - 0.1 * at_fault, "step": s}
                 for s in range(1, at_fault + 1)]  # fmt: skip
        lines += [{"t": FAULT_T + 2.0 + 0.1 * i, "event": "beat", "pid": pid + 10, **base,
                   "attempt": 1, "first_log_t": FAULT_T + 2.0, "step": resumed + i}
                  for i in range(1, 4)]  # fmt: skip
        path.write_text("".join(json.dumps(rec) + "\n" for rec in lines))


def _judged(tmp: Path, kind: str, fault: str, at_fault: int, resumed: int) -> Verdict:
    """The verdict a healed trial of `kind` under `fault` gets once its cost is measured."""
    job = KINDS[kind].job(tmp, "t1", addrs=ADDRS)
    _history(job.run_dir, at_fault, resumed)
    line = RESUMED.format(where=f"{job.ckpt}/step_{resumed:08d}", step=resumed)
    runs = [RunRecord(0, 12.0, line, RESTART)]
    lost = cost(KINDS[kind], job, runs, False, FAULT_T).lost_steps
    assert lost == at_fault - resumed
    healed = Verdict("healed", f"resumed from step {resumed}")
    return lost_steps_verdict(healed, job, fault, lost)


def test_each_kinds_interval_is_read_from_its_command(tmp_path: Path) -> None:
    """The interval is the finest tier's, from the command (or the script's default)."""
    got = {name: interval(KINDS[name].job(tmp_path, "t", addrs=ADDRS))
           for name in ("digits", "imagefolder", "ddp_small", "fsdp", "memory", "nodes_static",
                        "nodes_static_memory", "nodes_elastic_batch", "rehearsal",
                        "selfstart")}  # fmt: skip
    assert got == {"digits": 5, "imagefolder": 2, "ddp_small": 4, "fsdp": 4, "memory": 1,
                   "nodes_static": 4, "nodes_static_memory": 1, "nodes_elastic_batch": 2,
                   "rehearsal": None, "selfstart": None}  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "fault", "at_fault", "resumed", "word"),
    [
        ("ddp_small", "kill_rank", 23, 20, "healed"),  # 3 lost, interval 4
        ("ddp_small", "kill_rank", 25, 20, "healed"),  # 5: the interval and one step in flight
        ("ddp_small", "kill_rank", 26, 20, "lost steps"),  # a skipped save: 6 lost
        ("ddp_small", "corrupt_newest", 27, 18, "healed"),  # the newest destroyed: 2 × 4 + 1
        ("ddp_small", "corrupt_newest", 28, 18, "lost steps"),
        ("memory", "kill_rank", 23, 21, "healed"),  # K = 1: at most 2 lost
        ("memory", "kill_rank", 23, 16, "lost steps"),  # resumed from the disk (every 8)
        ("memory", "corrupt_memory", 23, 20, "healed"),  # the newest snapshot destroyed: 3
        ("memory", "corrupt_memory", 23, 19, "lost steps"),
        # the final disk checkpoint corrupted after the tier removed its snapshots (a good end)
        ("memory", "corrupt_newest", 32, 24, "healed"),  # 8 + 1 + 1
        ("memory", "corrupt_newest", 32, 21, "lost steps"),
        # a node lost with its memory: the peer's copy of its snapshot, not the disk (every 8)
        ("nodes_static_memory", "lose_node_with_memory", 23, 21, "healed"),
        ("nodes_static_memory", "lose_node_with_memory", 23, 16, "lost steps"),
    ],
)
def test_a_healed_trial_that_lost_more_than_its_interval_is_bad(
    tmp_path: Path, kind: str, fault: str, at_fault: int, resumed: int, word: str
) -> None:
    """The bound: the finest interval + 1, and the destroyed tier's interval more where the fault
    destroys its newest checkpoint."""
    verdict = _judged(tmp_path, kind, fault, at_fault, resumed)
    assert verdict.word == word, verdict
    assert verdict.ok == (word == "healed")
    if not verdict.ok:
        assert f"lost {at_fault - resumed} steps, more than" in verdict.detail


def test_no_figure_no_check(tmp_path: Path) -> None:
    """Where the lost steps are n/a (a missed fault, a replica kind) the verdict stands; a
    verdict that is already bad is not replaced."""
    job = KINDS["ddp_small"].job(tmp_path, "t1")
    assert lost_bound(job, "kill_rank") == 5
    healed = Verdict("healed")
    assert lost_steps_verdict(healed, job, "kill_rank", None) is healed
    hung = Verdict("hung", "", ["hung"])
    assert lost_steps_verdict(hung, job, "kill_rank", 40) is hung
    assert lost_bound(KINDS["rehearsal"].job(tmp_path, "t2"), "kill_rank") is None


def test_the_memory_tier_must_leave_nothing_after_a_good_end(tmp_path: Path) -> None:
    """A snapshot left under the memory root is named; a fault's filler beside it is not."""
    job: Job = KINDS["memory"].job(tmp_path, "t1")
    assert job.memory is not None and job.env["DISTRAIN_MEMORY_DIR"] == str(job.memory)
    job.memory.mkdir()
    (job.memory / ".filler").write_bytes(b"0")
    assert memory_left(job) == []
    own = job.memory / "distrain-mem-ab12" / "own"
    own.mkdir(parents=True)
    assert memory_left(job) == ["distrain-mem-ab12", "distrain-mem-ab12/own"]  # its folder too
    (own / "r00001-s00000023.pt").write_bytes(b"x")
    assert "distrain-mem-ab12/own/r00001-s00000023.pt" in memory_left(job)


def test_each_node_has_its_own_memory_root_and_must_leave_it_empty(tmp_path: Path) -> None:
    """A two-node memory kind: node i's ``DISTRAIN_MEMORY_DIR`` is ``node<i>`` under the job's
    memory folder (a node lost with its memory loses that root alone); a snapshot left in either
    is named after a good end."""
    job = KINDS["nodes_static_memory"].job(tmp_path, "t1", addrs=ADDRS)
    assert job.memory is not None
    roots = [env["DISTRAIN_MEMORY_DIR"] for env in job.node_env]
    assert roots == [str(job.memory / "node0"), str(job.memory / "node1")]
    assert "DISTRAIN_MEMORY_DIR" not in job.env
    peer = job.memory / "node1" / "distrain-mem-ab12" / "peer"
    peer.mkdir(parents=True)
    (peer / "r00000-s00000007.pt").write_bytes(b"x")
    assert "node1/distrain-mem-ab12/peer/r00000-s00000007.pt" in memory_left(job)
