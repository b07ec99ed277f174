"""What a chaos trial's fault cost (benchmarks/chaos/recovery.py), read from recorded histories:
the ranks' metrics records as distrain.monitor.recorder writes them, the oracle's resume lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "chaos"))
from kinds import KINDS, Job  # noqa: E402
from oracle import RunRecord  # noqa: E402
from record import Trial, load_trials, report  # noqa: E402
from recovery import Cost, cost, cost_table  # noqa: E402

FAULT_T = 1000.0
RESUMED = "distrain: resumed from ckpt/step_{0:08d} (step {0}, saved on 2 rank(s))\n"
RESTART = "distrain run: rank 1 (pid 9) was killed by SIGKILL; restarting every rank (attempt 1)"


def _records(run_dir: Path, rank: int, pid: int, first: float, steps: list[tuple[float, int]],
             end: bool = False, attempt: int = 0) -> None:  # fmt: skip
    """Append one process's records (time, step) to rank `rank`'s file, as the recorder writes
    them: the start record, beats, and with `end` the final one."""
    path = run_dir / "metrics" / f"rank-{rank}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    static = {"host": "h", "pid": pid, "rank": rank, "world_size": 2, "attempt": attempt}
    with open(path, "a") as f:
        for i, (t, step) in enumerate(steps):
            event = "start" if i == 0 else "end" if end and i == len(steps) - 1 else "beat"
            rec = {"t": t, "event": event, **static, "first_log_t": first, "step": step}
            f.write(json.dumps(rec) + "\n")


def _killed_rank_history(run_dir: Path) -> None:
    """Two ranks train to step 23 by the fault (rank 1 killed at FAULT_T), rank 0 records step 23
    on until the agent stops it; two new ranks resume at 20 and log their first step 4.2 s after
    the fault (rank 1's 4.5 s)."""
    for rank, pid in ((0, 10), (1, 11)):
        beats = [(FAULT_T - 2.0 + 0.1 * i, 4 + i) for i in range(20)]  # step 23 at FAULT_T - 0.1
        if rank == 0:
            beats += [(FAULT_T + 0.1 * i, 23) for i in range(1, 15)]
        _records(run_dir, rank, pid, FAULT_T - 2.0, beats)
    _records(run_dir, 0, 20, FAULT_T + 4.2, [(FAULT_T + 4.25, 21), (FAULT_T + 4.35, 22)])
    _records(run_dir, 1, 21, FAULT_T + 4.5, [(FAULT_T + 4.55, 22)])


def _job(tmp: Path, ckpt: bool = True) -> Job:
    return Job(["x"], tmp / "ckpt" if ckpt else None, tmp / "out", tmp / "t1-run")


def test_lost_steps_and_recovery_of_a_restarted_job(tmp_path: Path) -> None:
    """Lost: the step reached at the fault (23) minus the resumed one (20); recovery: the fault
    to the first step a process started after it logged (4.2 s, the earliest of the new ranks)."""
    job = _job(tmp_path)
    _killed_rank_history(job.run_dir)
    runs = [RunRecord(0, 12.0, RESUMED.format(20), RESTART)]
    got = cost(KINDS["ddp_small"], job, runs, False, FAULT_T)
    assert (got.lost_steps, got.recovery_s) == (3, 4.2), got
    # a restarted job that resumed from no checkpoint retrained from step 0: 23 steps lost
    fresh = cost(KINDS["ddp_small"], job, [RunRecord(0, 12.0, "", RESTART)], False, FAULT_T)
    assert fresh.lost_steps == 23


def test_recovery_is_timed_to_the_last_restart(tmp_path: Path) -> None:
    """A double kill: the first restart's ranks (attempt 1) log a step, then one is SIGKILLed;
    the job trains again when attempt 2's ranks log their first step (6.1 s), not at attempt
    1's (0.9 s). A rerun's launcher counts attempts from 0 again: it is later still."""
    job = _job(tmp_path)
    _killed_rank_history(job.run_dir)  # attempt 0 before the fault; its new ranks at 4.2 s
    for rank, pid, first in ((0, 40, 0.9), (1, 41, 0.95)):
        _records(job.run_dir, rank, pid, FAULT_T + first, [(FAULT_T + 1.0, 21)], attempt=1)
    for rank, pid, first in ((0, 50, 6.1), (1, 51, 6.15)):
        _records(job.run_dir, rank, pid, FAULT_T + first, [(FAULT_T + 6.2, 21)], attempt=2)
    runs = [RunRecord(0, 12.0, RESUMED.format(20) * 2, RESTART)]
    got = cost(KINDS["ddp_small"], job, runs, False, FAULT_T)
    assert (got.lost_steps, got.recovery_s) == (3, 6.1), got
    _records(job.run_dir, 0, 60, FAULT_T + 9.0, [(FAULT_T + 9.1, 21)], attempt=0)  # a rerun
    assert cost(KINDS["ddp_small"], job, runs, False, FAULT_T).recovery_s == 9.0


def test_the_survivor_of_a_killed_rank_tells_the_step_at_the_fault(tmp_path: Path) -> None:
    """A step the survivor finished after the last record of its killed peer counts: the job
    reached it before it was replaced; a line cut by the kill is skipped."""
    job = _job(tmp_path)
    _killed_rank_history(job.run_dir)
    _records(job.run_dir, 0, 10, FAULT_T - 2.0, [(FAULT_T + 1.6, 24)])
    with open(job.run_dir / "metrics" / "rank-1.jsonl", "a") as f:
        f.write('{"t": 1000.3, "event": "beat", "pid": 11, "st')
    runs = [RunRecord(0, 12.0, RESUMED.format(20), RESTART)]
    assert cost(KINDS["ddp_small"], job, runs, False, FAULT_T).lost_steps == 4


def test_two_node_kinds_read_each_nodes_run_folder(tmp_path: Path) -> None:
    """Node i's launcher writes under RUN_DIR-i (kinds.py); the step at the fault is the job's."""
    job = _job(tmp_path)
    node0, node1 = job.run_dir.with_name("t1-run-0"), job.run_dir.with_name("t1-run-1")
    _records(node0, 0, 10, FAULT_T - 5, [(FAULT_T - 0.5, 30)])
    _records(node1, 0, 11, FAULT_T - 5, [(FAULT_T - 0.05, 31)])
    _records(node0, 0, 12, FAULT_T + 7.5, [(FAULT_T + 7.6, 29)])
    _records(job.run_dir.with_name("t10-run-0"), 0, 13, FAULT_T - 5, [(FAULT_T, 99)])  # not ours
    runs = [RunRecord(0, 20.0, RESUMED.format(28), RESTART)]
    got = cost(KINDS["nodes_static"], job, runs, False, FAULT_T)
    assert (got.lost_steps, got.recovery_s) == (3, 7.5), got


def test_no_restart_and_nothing_left_to_train(tmp_path: Path) -> None:
    """No process after the fault and no resume: nothing lost, no recovery to time; a job resumed
    at its last step logs no step: its lost steps count, its recovery is n/a."""
    job = _job(tmp_path)
    _records(job.run_dir, 0, 10, FAULT_T - 3, [(FAULT_T - 0.1, 40), (FAULT_T + 0.1, 41)])
    kind = KINDS["ddp_small"]
    same = cost(kind, job, [RunRecord(0, 9.0, "", "")], False, FAULT_T)
    assert (same.lost_steps, same.recovery_s) == (0, None) and "not restarted" in same.note
    end = {"t": FAULT_T + 9, "event": "end", "pid": 30, "rank": 0, "step": 36}  # no first_log_t
    with open(job.run_dir / "metrics" / "rank-0.jsonl", "a") as f:
        f.write(json.dumps(end) + "\n")
    rerun = [RunRecord(1, 1.0, "", "distrain run: job failed"),
             RunRecord(0, 4.0, RESUMED.format(36), "")]  # fmt: skip
    last = cost(kind, job, rerun, False, FAULT_T)
    assert (last.lost_steps, last.recovery_s) == (5, None), last


def test_kinds_without_a_figure_say_why(tmp_path: Path) -> None:
    """Missed faults, replica kinds, kinds without distrain's checkpoints, a script that logs no
    step: n/a with the reason, never a number."""
    job, runs = _job(tmp_path), [RunRecord(0, 9.0, RESUMED.format(20), RESTART)]
    cases = [
        (KINDS["ddp_small"], job, True, "hit nothing"),
        (KINDS["replicas"], job, False, "replica group heals"),
        (KINDS["rehearsal"], _job(tmp_path, ckpt=False), False, "no distrain checkpoint"),
        (KINDS["ddp_small"], job, False, "no step recorded"),
    ]
    for kind, j, missed, why in cases:
        got = cost(kind, j, runs, missed, FAULT_T)
        assert got.lost_steps is None and got.recovery_s is None and why in got.note, got


def test_the_table_gives_median_and_max_per_fault(tmp_path: Path) -> None:
    """--summarize's second table, from --json lines (older lines without the fields: n/a)."""
    rows = [("kill_rank", Cost(3, 4.2)), ("kill_rank", Cost(1, 2.0)), ("kill_rank", Cost(8, 9.5)),
            ("kill_rank", Cost(note="n/a: the fault hit nothing")),
            ("corrupt_newest", Cost(None, None, "n/a"))]  # fmt: skip
    text = cost_table(rows)
    assert "| kill_rank | 3 | 3 | 8 | 4.2 | 9.5 | 1 |" in text, text
    assert "| corrupt_newest | 0 | n/a | n/a | n/a | n/a | 1 |" in text, text

    import argparse

    path = tmp_path / "trials.jsonl"
    args = argparse.Namespace(json=str(path), tsv=str(tmp_path / "trials.tsv"))
    from oracle import Verdict

    for i, c in enumerate(rows[:3]):
        report(Trial(i, "ddp_small", c[0], 0.5, "SIGKILL", Verdict("healed"), cost=c[1]), 1, args,
               "abc")  # fmt: skip
    old = {"index": 9, "kind": "digits", "fault": "kill_rank", "moment": 0.3, "what": "x",
           "verdict": "healed", "detail": ""}  # fmt: skip
    with open(path, "a") as f:
        f.write(json.dumps(old) + "\n")
    for name in (str(path), args.tsv):
        back = load_trials([name])
        assert [t.cost.lost_steps for t in back][:3] == [3, 1, 8]
        assert [t.cost.recovery_s for t in back][:3] == [4.2, 2.0, 9.5]
    assert load_trials([str(path)])[3].cost.lost_steps is None


def test_one_generation_with_two_attempt_numbers(tmp_path: Path) -> None:
    """Two nodes restart the same generation under different attempt numbers (node 0's agent
    restarted twice, node 1's once), their ranks logging their first step at one time: the
    recovery is that time (seed 9102 trial 15 crashed the campaign on it)."""
    job = _job(tmp_path)
    node0, node1 = job.run_dir.with_name("t1-run-0"), job.run_dir.with_name("t1-run-1")
    _records(node0, 0, 10, FAULT_T - 5, [(FAULT_T - 0.1, 18)])
    _records(node1, 1, 11, FAULT_T - 5, [(FAULT_T - 0.1, 18)])
    _records(node0, 0, 12, FAULT_T + 4.3, [(FAULT_T + 4.4, 19)], attempt=2)
    _records(node1, 1, 13, FAULT_T + 4.3, [(FAULT_T + 4.4, 18)], attempt=1)
    runs = [RunRecord(0, 20.0, RESUMED.format(17), RESTART)]
    got = cost(KINDS["nodes_static"], job, runs, False, FAULT_T)
    assert (got.lost_steps, got.recovery_s) == (1, 4.3), got


def test_a_time_aimed_span_ends_with_the_first_rank_done_training(tmp_path: Path) -> None:
    """replicas_readme has no checkpoint: its faults are aimed at a fraction of this span, which
    ends at its first `final.*` file, not at the launcher's exit after the groups' end."""
    import os

    from job_progress import training_span

    job = KINDS["replicas_readme"].job(tmp_path, "ref")
    job.out.mkdir(parents=True, exist_ok=True)
    assert training_span(job, 100.0, 130.0) == 30.0  # no rank done yet: the run's end
    for group, at in ((1, 121.0), (0, 118.0)):
        done = job.out / f"final.{group}.0.json"
        done.write_text("{}")
        os.utime(done, (at, at))
    assert training_span(job, 100.0, 130.0) == 18.0
    plain = Job(["x"], None, tmp_path, tmp_path)
    assert training_span(plain, 100.0, 130.0) == 30.0
