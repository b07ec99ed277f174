"""What `distrain run` prints: what happened, and nothing else (issue 34, "The first hour").

Real jobs of examples/train_digits.py, real SIGKILLs; each test asserts which lines appear and
which of torch's and TorchFT's known lines do not (docs/console.md shows the transcripts).
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from helpers import EXAMPLES, SCRIPTS, kill_group, python, run

DIGITS = str(EXAMPLES / "train_digits.py")
#: lines of torch's and TorchFT's that distrain folds into its own or leaves out
NOISE = ("Terminating process", "failed (exitcode", "start_method", "Traceback",
         "setSequenceNumberForGroup",
         "not writable", "find_unused_parameters", "got exception", "Warning:")  # fmt: skip


def _wait_for(
    log: Path, text: str, proc: subprocess.Popen[str], after: int = 0, limit: float = 240
) -> int:
    """Wait until `text` appears in `log` after offset `after`; its offset."""
    deadline = time.monotonic() + limit
    while (found := log.read_text().find(text, after)) < 0:
        assert proc.poll() is None, (
            f"exited {proc.returncode} before {text!r}:\n{log.read_text()[-3000:]}"
        )
        assert time.monotonic() < deadline, (
            f"no {text!r} after {limit} s:\n{log.read_text()[-3000:]}"
        )
        time.sleep(0.05)
    return found


def _titled(launcher: int, prefix: str, contains: str = "") -> psutil.Process:
    """The worker under `launcher` whose process title starts with `prefix` (and has `contains`)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for p in psutil.Process(launcher).children(recursive=True):
            try:
                title = " ".join(p.cmdline())
            except psutil.Error:
                continue
            if title.startswith(prefix) and contains in title:
                return p
        time.sleep(0.1)
    raise AssertionError(f"no worker titled {prefix!r}…{contains!r}")


def _start(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    with open(log, "w") as out:  # stdout and stderr interleaved, as a terminal shows them
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True,
                                cwd=log.parent, env={**os.environ, **(env or {})})  # fmt: skip


@pytest.mark.timeout(420)
def test_restart_and_failure_say_what_happened(tmp_path: Path) -> None:
    """Rank 1 SIGKILLed after epoch 1 (checkpoint at step 22): one line of distrain's naming the
    cause, attempt 1 of 1 and the step it resumes from; killed again after the resume: the job
    fails with the cause and "rerun the same command to resume from step N" on its last line.
    None of torch's agent lines, and no progress bar in a pipe."""
    log = tmp_path / "console.txt"
    proc = _start([python(), "-m", "distrain.cli", "run", "-n", "2", "--max-restarts", "1", DIGITS,
                   "--epochs", "3",
                   "--checkpoint-dir", "ckpt", "--checkpoint-every", "20", "--out", "model"],
                  log)  # fmt: skip
    try:
        at = _wait_for(log, "epoch 1/3", proc)
        _titled(proc.pid, "distrain rank 1/2").kill()
        at = _wait_for(log, "distrain: resumed from", proc, at)
        _wait_for(log, "\n", proc, at)
        _titled(proc.pid, "distrain rank 1/2").kill()  # the restarted rank 1 (the old one is gone)
        proc.wait(timeout=240)
    finally:
        kill_group(proc)
    text = log.read_text()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert proc.returncode == 128 + signal.SIGKILL, text[-3000:]
    restart = [ln for ln in lines if "restarting" in ln]
    said = len(restart) == 1 and re.fullmatch(
        r"distrain run: rank 1 \(pid \d+\) was killed by SIGKILL; restarting every rank "
        r"\(attempt 1 of 1\), "
        r"resuming from step (\d+)", restart[0])  # fmt: skip
    # 22: the end of epoch 1 (40 if 18 more steps ran before the kill landed), the step the workers
    # resumed from
    assert said and said[1] in ("22", "40") and f"(step {said[1]}, saved on 2 rank(s))" in text, (
        restart
    )
    last = re.fullmatch(r"distrain run: job failed: rank 1 \(pid \d+\) was killed by SIGKILL; "
                        r"rerun the same command "
                        r"to resume from step (\d+) \(ckpt/step_(\d+)\)", lines[-1])  # fmt: skip
    assert last and int(last[1]) >= 22 and int(last[2]) == int(last[1]), lines[-1]
    assert not [ln for ln in lines if any(n in ln for n in NOISE)], text
    assert text.count("distrain: 2 processes on 1 node") == 1, text  # not again after each restart
    assert "━" not in text  # rank 0's bar only on a terminal


@pytest.mark.timeout(180)
def test_debug_log_level_shows_torchs_own_lines() -> None:
    """DISTRAIN_LOG_LEVEL=debug: torch's agent lines are back (nothing is lost at debug); without
    it they are not (tests/jobs/test_plain_failure.py, and the other tests here)."""
    cmd = [python(), "-m", "distrain.cli", "run", "-n", "2", str(SCRIPTS / "raise_after_init.py")]
    loud = run(cmd, timeout=150, env={"DISTRAIN_LOG_LEVEL": "debug"})
    assert loud.returncode == 1, loud.stderr[-2000:]
    assert "KeyError: 'the cause, raised after init'" in loud.stderr.splitlines()[-1], loud.stderr[
        -2000:
    ]
    assert "failed (exitcode: 1)" in loud.stderr, loud.stderr[-2000:]


@pytest.mark.timeout(420)
def test_replica_heal_says_what_happened(tmp_path: Path) -> None:
    """`--replicas 2 -n 1`, group 1's process SIGKILLed after epoch 1: the lost and healed lines,
    a step-time line per group that names its group, a title per process that names its group;
    no deprecation warnings, gloo tracebacks or duplicated heal line."""
    log = tmp_path / "console.txt"
    proc = _start([python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "1", DIGITS,
                   "--epochs", "3", "--out", "model"], log)  # fmt: skip
    try:
        _wait_for(log, "epoch 1/3", proc)
        _titled(
            proc.pid, "distrain rank 0/1 · group 0 · train_digits.py"
        )  # each group's title names it
        _titled(proc.pid, "distrain rank 0/1 · group 1 · train_digits.py").kill()
        proc.wait(timeout=300)
    finally:
        kill_group(proc)
    text = log.read_text()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert proc.returncode == 0, text[-3000:]
    assert any(
        re.match(r"distrain run: replica group 1 lost at step \d+ \(rank 0, pid \d+, SIGKILL\)", ln)
        for ln in lines
    ), text
    assert re.search(
        r"distrain run: replica group 1 (healed from group 0|rejoined) at step", text
    ), text
    assert not any(ln.startswith("distrain: replica group 1 healed") for ln in lines), (
        text
    )  # the launcher says it once
    # every group that trained says which it is (a replacement that healed at the last step
    # under load trained none and prints no step-time line)
    step_lines = [ln for ln in lines if ln.startswith("distrain: step time")]
    assert step_lines and all(
        re.match(r"distrain: step time \(group [01], rank 0, \d+ steps,", ln) for ln in step_lines
    )
    assert any(ln.startswith("distrain: step time (group 0, rank 0,") for ln in step_lines), (
        step_lines
    )
    assert not [ln for ln in lines if any(n in ln for n in NOISE)], text


@pytest.mark.timeout(240)
def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    """Rank 0 draws a bar over each epoch when its stdout is a terminal (a real pty here)."""
    master, worker_side = pty.openpty()
    env = {**os.environ, "COLUMNS": "100"}
    for name in (
        "CI",
        "GITHUB_ACTIONS",
        "GITLAB_CI",
        "JENKINS_URL",
        "BUILDKITE",
        "DISTRAIN_PROGRESS",
    ):
        env.pop(name, None)
    proc = subprocess.Popen([python(), "-m", "distrain.cli", "run", "-n", "2", DIGITS, "--epochs",
                             "1", "--out", "model"],
                            stdout=worker_side, stderr=subprocess.PIPE, env=env, cwd=tmp_path,
                            start_new_session=True)  # fmt: skip
    os.close(worker_side)
    seen = b""
    try:
        deadline = time.monotonic() + 200
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the terminal's other side closed: the job ended
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        proc.wait(timeout=60)
    finally:
        kill_group(proc)
        os.close(master)
    text = re.sub(
        r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode(errors="replace")
    )  # without colours and cursor moves
    assert proc.returncode == 0, text[-2000:]
    # numbered from 0, as `for epoch in range(n)` holds it; 1438 samples // (32 × 2) = 22 steps
    assert re.search(r"epoch 0 ━+.*\b\d+/22\b", text), text[-2000:]
    assert not re.search(r"epoch 1 ━", text), text[-2000:]
    assert "22/22" in text and "epoch 1/1  train loss" in text, text[-2000:]
