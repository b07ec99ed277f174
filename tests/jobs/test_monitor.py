"""Per-rank metrics written by real jobs, read back by `distrain top`, and TensorBoard events."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from helpers import EXAMPLES, REPO, kill_group, python, run

from distrain.launch.plan import plan
from distrain.launch.report.dry_run import torchrun_command
from distrain.monitor import Monitor, open_monitor, rank_file
from distrain.monitor.probes import GPUProbe
from distrain.tools.top.cli import main as top_main
from distrain.tools.top.status import Thresholds, job_status

CLI = [python(), "-m", "distrain.cli"]


def top_json(run_dir: Path, *extra: str) -> dict:
    res = run([*CLI, "top", str(run_dir), "--json", *extra], timeout=60, check=True)
    return json.loads(res.stdout)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_digits_job_metrics_top_and_tensorboard(tmp_path: Path) -> None:
    """A real 2-rank distrain run: both ranks' files, top's snapshot, rank 0's TensorBoard."""
    run_dir = tmp_path / "run"
    res = run(
        [*CLI, "run", "-n", "2", "--log-dir", str(run_dir), str(EXAMPLES / "train_digits.py"),
         "--epochs", "2", "--out", str(tmp_path / "out")],
        timeout=240, env={"DISTRAIN_METRICS_INTERVAL": "0.2"}, check=True,
    )  # fmt: skip
    assert "done: test acc" in res.stdout
    all_records = {r: records(rank_file(run_dir, r)) for r in (0, 1)}
    # one summary per finished epoch (what distrain bench reads), with the accuracy logged after it
    for recs in all_records.values():
        epochs = [r for r in recs if r.get("event") == "epoch"]
        assert [e["epoch"] for e in epochs] == [1, 2] and all(
            e["epoch_steps"] > 1 and e["epoch_seconds"] > 0 for e in epochs
        )
        assert all(0.0 < e["values"]["accuracy"] <= 1.0 for e in epochs), epochs
    per_rank = {
        r: [x for x in recs if x.get("event") != "epoch"] for r, recs in all_records.items()
    }
    steps_per_epoch = None
    for rank, recs in per_rank.items():
        assert recs[0]["event"] == "start" and recs[-1]["event"] == "end", rank
        steps = [r["step"] for r in recs]
        assert steps == sorted(steps) and steps[-1] > steps[0], steps
        assert all(r["rank"] == rank and r["world_size"] == 2 and r["rss"] > 0 for r in recs)
        assert recs[-1]["values"]["accuracy"] > 0.5
        steps_per_epoch = recs[-1]["step"] // 2
    assert per_rank[0][-1]["step"] == per_rank[1][-1]["step"]

    snap = top_json(run_dir)
    assert snap["status"] == "finished"
    assert [r["rank"] for r in snap["ranks"]] == [0, 1]
    assert all(r["state"] == "done" and r["step"] == per_rank[0][-1]["step"] for r in snap["ranks"])
    assert snap["totals"]["world_size"] == 2 and snap["totals"]["missing_ranks"] == []
    table = run([*CLI, "top", str(run_dir), "--once"], timeout=60, check=True).stdout
    assert "finished" in table and "samples/s" in table and table.count(" done ") == 2

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {
        "loss",
        "lr",
        "accuracy",
        "test_loss",
        "throughput/samples_per_s",
        "throughput/steps_per_s",
    } <= tags
    loss_steps = [e.step for e in acc.Scalars("loss")]
    assert loss_steps == list(range(1, per_rank[0][-1]["step"] + 1))  # every step, none lost
    accuracy = acc.Scalars("accuracy")
    assert [e.step for e in accuracy] == [steps_per_epoch, 2 * steps_per_epoch]  # one per epoch
    assert accuracy[-1].value == pytest.approx(per_rank[0][-1]["values"]["accuracy"])


def _wait_for(predicate, timeout: float, what: str):  # noqa: ANN001, ANN202
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")


def test_straggler_and_stopped_rank_flagged(tmp_path: Path) -> None:
    """3 ranks: rank 2 is slow (straggler); SIGSTOP rank 1 → stalled, rank 0 (its peer) waiting."""
    run_dir = tmp_path / "run"
    env = dict(os.environ, DISTRAIN_METRICS_INTERVAL="0.25")
    log = open(tmp_path / "job.log", "w")  # a file, not a pipe: nothing can block on it
    job = subprocess.Popen(
        [*CLI, "run", "-n", "3", "--run-dir", str(run_dir),
         str(REPO / "tests" / "scripts" / "monitor_job.py"), "--seconds", "90"],
        stdout=log, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
    )  # fmt: skip
    stopped: int | None = None
    try:

        def ready() -> bool:
            files = [rank_file(run_dir, r) for r in range(3)]
            return all(f.exists() and len(records(f)) >= 12 for f in files)

        _wait_for(ready, 150, "3 ranks to record progress")
        th = Thresholds(stall_after=4, window=2)  # what `top --stall-after 4 --window 2` uses
        snap = job_status(run_dir, th=th)
        by_rank = {r["rank"]: r for r in snap["ranks"]}
        assert sorted(by_rank) == [0, 1, 2] and snap["status"] == "running"
        assert by_rank[2]["flags"] == ["straggler"], by_rank
        assert by_rank[0]["flags"] == [] and by_rank[1]["flags"] == []

        stopped = by_rank[1]["pid"]
        os.kill(stopped, signal.SIGSTOP)
        time.sleep(6)
        snap = job_status(run_dir, th=th)
        by_rank = {r["rank"]: r for r in snap["ranks"]}
        assert by_rank[1]["state"] == "stalled" and "stalled" in by_rank[1]["flags"], by_rank[1]
        assert by_rank[0]["state"] == "waiting", by_rank[0]  # alive, blocked in all_reduce
        assert by_rank[2]["state"] == "running"
        assert snap["status"] == "stalled" and snap["totals"]["stalled"] == [1]
        table = run(
            [*CLI, "top", str(run_dir), "--once", "--stall-after", "4"], timeout=60, check=True
        ).stdout
        assert "stalled" in table and "waiting" in table
    finally:
        _stop_job(job, run_dir, stopped)
        log.close()


def _stop_job(job: subprocess.Popen, run_dir: Path, stopped: int | None) -> None:
    """SIGTERM the launcher (its agent ends the workers), then make sure every worker is gone.

    torchrun starts workers in sessions of their own, so killing the launcher's process group
    alone would leave them running."""
    workers = [
        records(f)[-1]["pid"] for f in run_dir.glob("metrics/rank-*.jsonl") if f.stat().st_size
    ]
    if stopped is not None:
        os.kill(stopped, signal.SIGCONT)
    job.terminate()
    try:
        job.wait(timeout=30)
    except subprocess.TimeoutExpired:
        kill_group(job)  # type: ignore[arg-type]
        job.wait(timeout=30)
    for pid in workers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_monitor_in_process(tmp_path: Path) -> None:
    """Without a GPU the probe is silent; records are bounded in number and end with 'end'."""
    mon = Monitor(tmp_path, rank=0, world_size=1, gpu_index=0, interval=0.2, tensorboard=False)
    for i in range(20000):
        mon.log(loss=torch.tensor(float(i)), samples=4)
    time.sleep(0.5)
    mon.log(advance=False, accuracy=0.75)
    mon.close()
    recs = records(rank_file(tmp_path, 0))
    assert recs[0]["event"] == "start" and recs[-1]["event"] == "end"
    assert len(recs) < 20  # bounded by time, not by calls
    assert recs[-1]["step"] == 20000 and recs[-1]["samples"] == 80000
    assert recs[-1]["values"] == {"loss": 19999.0, "accuracy": 0.75}
    with pytest.raises(TypeError):
        mon.log(loss="high")
    if not torch.cuda.is_available():
        assert not any("gpu_util" in r for r in recs)


def test_no_run_dir_means_no_monitor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from distrain.settings import Settings

    monkeypatch.delenv("DISTRAIN_RUN_DIR", raising=False)
    assert open_monitor(Settings.read().run_dir, 0, 1, None) is None  # ctx.log() is then a no-op
    monkeypatch.setenv("DISTRAIN_RUN_DIR", str(tmp_path))
    mon = open_monitor(Settings.read().run_dir, 0, 1, None)  # what init() does
    assert mon is not None and mon.run_dir == tmp_path
    mon.close()  # never logged: no thread, no files
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU and its NVML driver")
def test_gpu_probe_reads_nvml() -> None:
    probe = GPUProbe(0)
    values = probe.read()
    probe.close()
    assert probe is not None and 0 <= values["gpu_util"] <= 100 and values["gpu_mem_total"] > 0


def test_gpu_probe_silent_without_driver() -> None:
    probe = GPUProbe(0)
    if not torch.cuda.is_available():
        assert not probe.available and probe.read() == {}
    probe.close()
    assert GPUProbe(None).read() == {}


def test_top_without_a_job_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    res = run([*CLI, "top", str(tmp_path / "missing"), "--once"], timeout=60)
    assert res.returncode == 1 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert lines == [f"distrain top: error: {tmp_path / 'missing'} is not a directory"], res.stderr
    empty = tmp_path / "empty"
    (empty / "metrics").mkdir(parents=True)
    junk = tmp_path / "junk"
    (junk / "metrics").mkdir(parents=True)
    (junk / "metrics" / "rank-0.jsonl").write_text("not json\n")
    for target, code in [
        ([str(empty), "--once"], 1),
        ([str(junk), "--json"], 1),
        ([str(empty), "--refresh", "0"], 2),
    ]:
        with pytest.raises(SystemExit) as exc:
            top_main(target)
        assert exc.value.code == code
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("distrain top: error:"), err


def test_run_dir_reaches_workers_env() -> None:
    script = str(EXAMPLES / "train_digits.py")
    assert plan(["-n", "2", "--run-dir", "some/dir", script]).env[
        "DISTRAIN_RUN_DIR"
    ] == os.path.abspath("some/dir")
    assert plan(["--log-dir", "logs", script]).env["DISTRAIN_RUN_DIR"] == os.path.abspath("logs")
    assert "DISTRAIN_RUN_DIR" not in plan([script]).env
    assert "--run-dir" not in torchrun_command(plan(["--run-dir", "x", script]))


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_live_view_in_a_terminal_and_leftover_ranks(tmp_path: Path) -> None:
    """`distrain top` without --once on a TTY redraws until Ctrl-C, then exits 0.  A rank file
    left from a larger earlier run (world size 3) is ignored once a 2-rank run started."""
    old = Monitor(tmp_path, rank=2, world_size=3, interval=0.1, tensorboard=False)
    old.log(loss=1.0)
    old.close()
    time.sleep(0.05)
    for rank in (0, 1):
        mon = Monitor(tmp_path, rank=rank, world_size=2, interval=0.1, tensorboard=False)
        mon.log(loss=0.5, samples=4)
        mon.close()
    snap = job_status(tmp_path)
    assert [r["rank"] for r in snap["ranks"]] == [0, 1] and snap["status"] == "finished"

    leader, follower = pty.openpty()
    # started as a shell script's background job starts it: SIGINT ignored (issue 47); `top`
    # promises to stop on Ctrl-C all the same
    proc = subprocess.Popen([*CLI, "top", str(tmp_path), "--refresh", "0.3"], stdin=follower,
                            stdout=follower, stderr=follower, start_new_session=True,
                            preexec_fn=_ignore_sigint)  # fmt: skip
    os.close(follower)
    output = b""
    try:
        end = time.monotonic() + 120
        while output.count(b"finished") < 2 and time.monotonic() < end:  # first frame and a redraw
            if select.select([leader], [], [], 0.5)[0]:
                try:
                    output += os.read(leader, 65536)
                except OSError:
                    break
        assert output.count(b"finished") >= 2, output[-2000:]
        proc.send_signal(signal.SIGINT)
        # keep reading, as a terminal does: top's last frame is written on the way out, and a pty
        # nobody reads (it holds ~19 KB, ~17 frames) blocks that write for good
        end = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < end:
            if select.select([leader], [], [], 0.2)[0]:
                try:
                    os.read(leader, 65536)
                except OSError:
                    break
        assert proc.wait(timeout=5) == 0
    finally:
        kill_group(proc)  # type: ignore[arg-type]
        os.close(leader)


def test_crashed_rank_reported_failed(tmp_path: Path) -> None:
    """An uncaught exception still ends the file with a final record that names it."""
    code = (
        "import atexit, sys\n"
        "from distrain.monitor import Monitor\n"
        f"mon = Monitor({str(tmp_path)!r}, rank=0, world_size=1, interval=0.1, tensorboard=False)\n"
        "atexit.register(mon.close)\n"
        "mon.log(loss=2.0)\n"
        "raise ZeroDivisionError('diverged')\n"
    )
    res = run([python(), "-c", code], timeout=120)
    assert res.returncode == 1 and "ZeroDivisionError" in res.stderr
    last = records(rank_file(tmp_path, 0))[-1]
    assert last["event"] == "end" and last["error"] == "ZeroDivisionError"
    snap = job_status(tmp_path)
    assert snap["status"] == "failed" and snap["ranks"][0]["state"] == "failed"


RESUMING_LOGGER = """
import sys, torch, distrain
ctx = distrain.init()
model = ctx.prepare_model(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ckpt = ctx.checkpointer(sys.argv[1], every_steps=1)
step = ckpt.restore(model=model, optimizer=opt).step
for _ in range(int(sys.argv[2])):
    opt.zero_grad()
    ctx.backward(model(torch.ones(2, 4)).sum())
    ctx.step(opt)
    ctx.log(loss=1.0)  # no step=: the training's step, also after a resume
    step += 1
    ckpt.maybe_save(step)
ckpt.close()
"""


def test_logged_steps_go_on_from_the_resumed_step(tmp_path: Path) -> None:
    script, run_dir, ckpt = tmp_path / "log.py", tmp_path / "run", tmp_path / "ckpt"
    script.write_text(RESUMING_LOGGER)
    job = [*CLI, "run", "--run-dir", str(run_dir), "-n", "1", str(script), str(ckpt)]
    run([*job, "3"], timeout=180, check=True)
    run([*job, "2"], timeout=180, check=True)  # resumes at step 3, steps 4 and 5
    records = [json.loads(line) for line in rank_file(run_dir, 0).read_text().splitlines()]
    ends = [r["step"] for r in records if r["event"] == "end"]
    assert ends == [3, 5]  # not 2: TensorBoard's x-axis and `distrain top` go on from 3


MODULES_AT_FIRST_STEP = """
import sys, torch, distrain
from torch.utils.data import TensorDataset
ctx = distrain.init()
model = ctx.prepare_model(torch.nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for (x,) in ctx.prepare_loader(TensorDataset(torch.ones(8, 4)), batch_size=2):
    model(x).sum().backward()
    ctx.step(opt)
    break
held = sorted(m for m in sys.modules if m.startswith("distrain."))
# one write() per line: like torchrun's `python -u`, a worker's stdout is unbuffered, and a
# print of three items is three writes that the other rank's line can fall between
sys.stdout.write(f"MODULES {ctx.rank} {' '.join(held)}\\n")
"""


@pytest.mark.parametrize("start", ["fast", "spawn"])
def test_workers_hold_the_recorder_not_the_top_command(tmp_path: Path, start: str) -> None:
    """A worker at its first step (fast start or fresh interpreter) holds monitor/'s recorder and
    the failure hook, and none of `distrain top` (tools/top/): workers record, top reads."""
    script = tmp_path / "first_step.py"
    script.write_text(MODULES_AT_FIRST_STEP)
    res = run([*CLI, "run", "-n", "2", "--start-method", start, "--run-dir", str(tmp_path / "r"),
               str(script)], timeout=180, check=True)  # fmt: skip
    held = {
        line.split()[1]: set(line.split()[2:])
        for line in res.stdout.splitlines()
        if line.startswith("MODULES ")
    }
    assert set(held) == {"0", "1"}, res.stdout[-2000:]
    for modules in held.values():
        assert {"distrain.monitor.recorder", "distrain.worker.lifecycle.failure"} <= modules
        assert not {m for m in modules if m.startswith("distrain.tools")}, sorted(modules)
