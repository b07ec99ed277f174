"""A rank that resumed and ended without a step still leaves its end (monitor/recorder.py).

Under `--replicas` a replacement that came back after the survivors' last step heals at that
step and ends at once: without its end record, `distrain top` read its killed predecessor's last
record and called the finished job stalled.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from distrain.monitor.recorder import Monitor, rank_file
from distrain.tools.top.status import job_status


def _records(run_dir: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in rank_file(run_dir, rank).read_text().splitlines()]


def test_a_rank_resumed_at_the_last_step_ends_there(tmp_path: Path) -> None:
    old = Monitor(tmp_path, rank=0, world_size=1, tensorboard=False, interval=0.05)
    old.log(step=25, loss=1.0)
    time.sleep(0.2)
    old.close()  # its predecessor's records, less the end: it died by SIGKILL
    path = rank_file(tmp_path, 0)
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    assert _records(tmp_path, 0)[-1]["event"] != "end"
    replacement = Monitor(tmp_path, rank=0, world_size=1, tensorboard=False)
    replacement.resumed_at(100)
    replacement.close()
    last = _records(tmp_path, 0)[-1]
    assert (last["event"], last["step"]) == ("end", 100)
    # judged long after: done at step 100, not stalled at 25
    status = job_status(tmp_path, now=time.time() + 3600)
    assert status["status"] == "finished"
    assert [(r["state"], r["step"]) for r in status["ranks"]] == [("done", 100)]


def test_a_rank_that_neither_resumed_nor_stepped_writes_nothing(tmp_path: Path) -> None:
    monitor = Monitor(tmp_path, rank=0, world_size=1, tensorboard=False)
    monitor.close()
    assert not rank_file(tmp_path, 0).exists()


def test_rates_after_a_resume_count_from_the_resumed_step(tmp_path: Path) -> None:
    monitor = Monitor(tmp_path, rank=0, world_size=1, tensorboard=False, interval=0.05)
    monitor.resumed_at(100)
    for step in range(101, 106):
        monitor.log(step=step)
    time.sleep(0.3)
    monitor.close()
    beats = [r for r in _records(tmp_path, 0) if r["event"] in ("beat", "end")]
    assert beats and all(r["step"] >= 101 for r in beats)
    assert max(r["steps_per_s"] or 0 for r in beats) < 1000  # not the 100 steps of the resume
