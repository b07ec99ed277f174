"""A failure that every restart would repeat stops the job at once, on every node, with its line.

The job resumes from a checkpoint saved on a dataset of another length: the loader refuses it
(``saved with a dataset of 96 samples, this one has 120``) on every rank and would on every
attempt.  Before,
torch's agent restarted the job until ``--max-restarts`` ran out (each attempt refused again);
now the refusing ranks close the c10d rendezvous (worker/lifecycle/stop_job.py), no node restarts,
and each launcher's last line names the refusal.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from helpers import kill_group, run
from helpers.checkpoints import DISTRAIN, WORKER, ok

pytestmark = [pytest.mark.timeout(300)]

REFUSAL = "saved with a dataset of 96 samples, this one has 120"
LAST = "distrain run: job failed, not restarted (a restart would fail the same way): rank "
ONE_THREAD = {**os.environ, "DISTRAIN_NUM_THREADS": "1"}


def _saved(tmp_path: Path) -> Path:
    """A checkpoint of a 2-rank job with global batch 12."""
    ckpt = tmp_path / "ckpt"
    cmd = [*DISTRAIN, "-n", "2", WORKER, "--dir", str(ckpt), "--out", str(tmp_path / "a.pt")]
    ok(run([*cmd, "--stop-at", "4"], timeout=120, env=ONE_THREAD))
    return ckpt


def test_a_refused_checkpoint_is_not_retried(tmp_path: Path) -> None:
    ckpt = _saved(tmp_path)
    started = time.monotonic()
    cmd = [*DISTRAIN, "-n", "2", "--max-restarts", "3", WORKER, "--dir", str(ckpt)]
    cmd += ["--out", str(tmp_path / "b.pt"), "--samples", "120"]
    result = run(cmd, timeout=120, env=ONE_THREAD)
    took = time.monotonic() - started
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-3000:]
    # one attempt: each of the 2 ranks refused once, nobody started again
    assert out.count(f"distrain: error: cannot resume loader from {ckpt}") == 2, out[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(LAST) and REFUSAL in last, out[-3000:]
    print(f"stopped {took:.1f} s after the launch")


def test_two_nodes_stop_together(tmp_path: Path) -> None:
    ckpt = _saved(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rdzv = [
        "--nnodes",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        "refusal",
    ]
    cmd = [*DISTRAIN, *rdzv, "-n", "1", "--max-restarts", "3", WORKER, "--dir", str(ckpt),
           "--out", str(tmp_path / "b.pt"), "--samples", "120"]  # fmt: skip
    logs = [tmp_path / f"node{i}.log" for i in range(2)]
    procs: list[subprocess.Popen[str]] = []
    try:
        for log in logs:
            with open(log, "w") as f:
                out = {"stdout": f, "stderr": subprocess.STDOUT}
                procs.append(
                    subprocess.Popen(cmd, **out, text=True, env=ONE_THREAD, start_new_session=True)
                )
        deadline = time.monotonic() + 150
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        texts = [log.read_text() for log in logs]
        both = "\n".join(texts)
        assert [p.returncode for p in procs] == [1, 1], both[-4000:]
        assert both.count(f"distrain: error: cannot resume loader from {ckpt}") == 2, both[-4000:]
        for text in texts:  # every node's last line names the refusal
            last = text.strip().splitlines()[-1]
            assert last.startswith(LAST) and REFUSAL in last, both[-4000:]
    finally:
        for p in procs:
            kill_group(p)


def test_a_usage_error_in_the_script_is_not_retried(tmp_path: Path) -> None:
    script = tmp_path / "bad_input.py"
    script.write_text(
        "import distrain\nfrom distrain.errors import UsageError\n"
        "ctx = distrain.init(verbose=False)\n"
        "raise UsageError('--lr must be positive, got -1')\n"
    )
    result = run([*DISTRAIN, "-n", "2", "--max-restarts", "3", str(script)], timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-3000:]
    assert out.count("UsageError: --lr must be positive, got -1") == 3, out[
        -3000:
    ]  # 2 ranks + the last line
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(LAST) and last.endswith("UsageError: --lr must be positive, got -1"), (
        out[-3000:]
    )
