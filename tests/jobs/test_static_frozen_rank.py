"""A static two-node job with a rank frozen for good: every node stops in a bound, a rerun resumes.

A SIGSTOPped rank looks alive to its own node's agent, and a static rendezvous tells that agent
nothing about the other node: the watchdog's verdict (on the other node) stopped or restarted
only its own node, and the frozen rank's node waited for good (chaos campaign, seed 18 trials 11
and 14, benchmarks/chaos/RESULTS.md).  Now the rank that gives the verdict leaves the reason in
the agents' store on node 0, and every node's `distrain run` stops on reading it
(launch/nodes/stop_watch.py), SIGKILLing its own frozen rank (a stopped process cannot obey
SIGTERM), with a last line naming the frozen rank and saying to rerun.

One job, three runs: rank 1 (node 1) frozen, then rank 0 (node 0, which serves the ranks'
store) frozen in the rerun, then a rerun that resumes and finishes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from helpers import REPO, python
from helpers.netns_hosts import Hosts

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(600)]

SCRIPT = str(REPO / "tests" / "scripts" / "node_loss_worker.py")
WATCHDOG_S = 5  # the bound under test is the stop after the verdict, not the verdict itself
#: from the freeze to each node's exit: the verdict (S, a poll, 2 s of stacks), the other node's
#: look at the store (1 s), 2 s before its SIGKILL of the frozen rank, the agents' ends; load
STOP_BOUND_S = WATCHDOG_S + 60


def _start(
    hosts: Hosts, tmp_path: Path, tag: str, ckpt: Path, steps: int
) -> tuple[list[subprocess.Popen[str]], list[Path]]:
    flags = ["--nnodes", "2", "--master-addr", hosts.addrs[0], "--master-port", "29500", "-n", "1",
             "--max-restarts", "3", "--watchdog", str(WATCHDOG_S)]  # fmt: skip
    logs = [tmp_path / f"{tag}-node{i}.log" for i in range(2)]
    env = {
        "BENCH_FIRST_STEP_FILE": str(tmp_path / "first_steps"),
        "DISTRAIN_REJOIN_TIMEOUT": "20",
        "DISTRAIN_NUM_THREADS": "1",
    }
    procs = [
        hosts.start(i,
                    [python(), "-m", "distrain.cli", "run", *flags, "--node-rank", str(i), SCRIPT,
                        "--dir", str(ckpt), "--steps", str(steps), "--sleep", "0.2"], logs[i],
                    env={**env, "BENCH_NODE": f"n{i}"})
        for i in range(2)
    ]  # fmt: skip
    return procs, logs


def _rank_pid(hosts: Hosts, node: int) -> int:
    """The pid of the rank in node `node`'s namespace (its title: `distrain rank R/2 · …`)."""
    for pid in hosts.pids(node):
        try:
            if " ".join(psutil.Process(int(pid)).cmdline()).startswith("distrain rank"):
                return int(pid)
        except psutil.Error:
            continue
    raise AssertionError(f"no rank in node {node}: {hosts.pids(node)}")


def _step(path: Path) -> int:
    digits = path.name.removeprefix("step_")
    return int(digits) if digits.isdigit() else -1


def _freeze_and_expect_stop(
    hosts: Hosts, tmp_path: Path, tag: str, ckpt: Path, node: int, after_step: int
) -> None:
    procs, logs = _start(hosts, tmp_path, tag, ckpt, steps=100000)
    deadline = time.monotonic() + 240
    while not any(_step(p) >= after_step for p in ckpt.glob("step_*")):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            text = "\n".join(log.read_text()[-3000:] for log in logs)
            pytest.fail(f"{tag}: no checkpoint past step {after_step - 1}\n{text}")
        time.sleep(0.1)
    frozen = _rank_pid(hosts, node)
    os.kill(frozen, signal.SIGSTOP)  # for good: never resumed
    stopped = time.monotonic()
    codes: list[int | None] = [None, None]
    ended = [0.0, 0.0]  # seconds from the freeze to each node's exit
    while time.monotonic() - stopped < STOP_BOUND_S and None in codes:
        for i, p in enumerate(procs):
            if codes[i] is None and p.poll() is not None:
                codes[i], ended[i] = p.returncode, time.monotonic() - stopped
        time.sleep(0.2)
    texts = [log.read_text() for log in logs]
    if None in codes:
        hosts.kill_all()
        dump = "\n".join(f"--- node {i}\n{t[-3000:]}" for i, t in enumerate(texts))
        pytest.fail(f"{tag}: node exits {codes} {STOP_BOUND_S} s after rank {node} froze\n{dump}")
    for i, (code, text) in enumerate(zip(codes, texts, strict=True)):
        last = text.strip().splitlines()[-1]
        assert code != 0, f"node {i} exited 0 with rank {node} frozen\n{text[-3000:]}"
        assert last.startswith("distrain run: job stopped: the watchdog:"), f"node {i}: {last}"
        assert f"rank {node}" in last and "frozen or gone" in last, f"node {i}: {last}"
        assert "rerun the same command on every node to resume" in last, f"node {i}: {last}"
        # the frozen rank was SIGKILLed by its own launcher, not after torch's 30 s grace
        assert "Unable to shutdown process" not in text, f"node {i}: {text[-3000:]}"
    deadline = time.monotonic() + 15
    while (hosts.pids(0) or hosts.pids(1)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not hosts.pids(0) and not hosts.pids(1), (
        f"processes left: {hosts.pids(0)} {hosts.pids(1)}"
    )
    if after_step > 5:  # a rerun: it resumed before the freeze
        assert "distrain: resumed from" in "".join(texts), "".join(texts)[-3000:]
    after = ", ".join(f"node {i} {t:.1f} s" for i, t in enumerate(ended))
    print(f"{tag}: rank {node} frozen; node exits {codes}, after {after}: {last}")


def test_static_frozen_rank_stops_every_node_and_rerun_resumes(
    hosts2: Hosts, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    _freeze_and_expect_stop(hosts2, tmp_path, "node1-frozen", ckpt, node=1, after_step=5)
    _freeze_and_expect_stop(hosts2, tmp_path, "node0-frozen", ckpt, node=0, after_step=15)
    procs, logs = _start(hosts2, tmp_path, "rerun", ckpt, steps=25)
    codes = hosts2.wait(procs, 240, logs)
    text = "\n".join(log.read_text()[-3000:] for log in logs)
    assert codes == [0, 0], text
    assert "distrain: resumed from" in text, text
    assert "finished at step 25 on 2 rank(s)" in text, text
