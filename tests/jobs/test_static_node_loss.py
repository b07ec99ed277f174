"""A static two-node job loses a node's launcher, or the whole node: the survivor stops at once,
a rerun resumes.

A static rendezvous has no membership signal.  When node 1's `distrain run` is SIGKILLed, node
0's rank fails (its peer's connections reset) and node 0's agent restarts it; the restarted rank
then waited for rank 1 for the init timeout (10 min), then for ``DISTRAIN_REJOIN_TIMEOUT`` (60 s:
the chaos campaign's node loss took 75–86 s to train again, benchmarks/chaos/RESULTS.md).  Now
node 0's launcher sees node 1's launcher's connections to its store close
(launch/nodes/peer_gone.py) and the restarted rank stops its node at once, with a last line naming
the node and rank that will not come back; rerunning both nodes resumes.  The rejoin bound here
(120 s) is far above the stop's bound: only the closed connections can end the wait in time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import REPO, python
from helpers.netns_hosts import Hosts

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(400)]

SCRIPT = str(REPO / "tests" / "scripts" / "node_loss_worker.py")
#: the formation bound of a restarted attempt in this test (default 60 s): never reached in time
REJOIN_S = 120
#: from the kill to node 0's exit: the peer's failure seen, one restart (imports under load), the
#: gone node seen (1 s looks), the agent's end; measured 3.9–6.7 s at load 6–15 on 2 cores
STOP_BOUND_S = 30


def _start(
    hosts: Hosts, tmp_path: Path, tag: str, marker: Path, ckpt: Path
) -> tuple[list[subprocess.Popen[str]], list[Path]]:
    flags = [
        "--nnodes",
        "2",
        "--master-addr",
        hosts.addrs[0],
        "--master-port",
        "29500",
        "-n",
        "1",
        "--max-restarts",
        "3",
    ]
    logs = [tmp_path / f"{tag}-node{i}.log" for i in range(2)]
    env = {
        "BENCH_FIRST_STEP_FILE": str(marker),
        "DISTRAIN_REJOIN_TIMEOUT": str(REJOIN_S),
        "DISTRAIN_NUM_THREADS": "1",
    }
    procs = [
        hosts.start(i,
                    [python(), "-m", "distrain.cli", "run", *flags, "--node-rank", str(i), SCRIPT,
                        "--dir", str(ckpt), "--steps", "40", "--sleep", "0.2"], logs[i],
                    env={**env, "BENCH_NODE": f"n{i}"})
        for i in range(2)
    ]  # fmt: skip
    return procs, logs


@pytest.mark.parametrize("lost", ["launcher", "node"])
def test_static_node_lost_survivor_stops_at_once_and_rerun_resumes(
    hosts2: Hosts, tmp_path: Path, lost: str
) -> None:
    marker, ckpt = tmp_path / "first_steps", tmp_path / "ckpt"
    procs, logs = _start(hosts2, tmp_path, "first", marker, ckpt)
    deadline = time.monotonic() + 240
    while not list(ckpt.glob("step_*")):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            pytest.fail(
                "no checkpoint from the two nodes\n"
                + "\n".join(log.read_text()[-3000:] for log in logs)
            )
        time.sleep(0.1)
    killed, killed_at = time.monotonic(), time.time()
    if lost == "launcher":
        os.kill(procs[1].pid, signal.SIGKILL)  # node 1's launcher only (`ip netns exec` exec'd it)
    else:
        assert hosts2.kill_node(1)  # the machine dies: launcher, rank, fork server
    try:
        code = procs[0].wait(timeout=STOP_BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"node 0 still waiting {STOP_BOUND_S} s after node 1's launcher "
            f"died\n{logs[0].read_text()[-4000:]}"
        )
    took = time.monotonic() - killed
    text = logs[0].read_text()
    last = text.strip().splitlines()[-1]
    assert code != 0, text[-4000:]
    assert "job stopped: node 1 (rank 1) did not rejoin attempt 1: its launcher ended" in (last), (
        text[-4000:]
    )
    assert "rerun the same command on every node to resume from step" in last, text[-4000:]
    procs[1].wait(timeout=10)
    leftover_deadline = time.monotonic() + 15
    while (hosts2.pids(0) or hosts2.pids(1)) and time.monotonic() < leftover_deadline:
        time.sleep(0.2)
    assert not hosts2.pids(0) and not hosts2.pids(1), (
        f"processes left: {hosts2.pids(0)} {hosts2.pids(1)}"
    )
    print(f"node 0 stopped {took:.1f} s after node 1's launcher was killed: {last}")

    procs, logs = _start(hosts2, tmp_path, "rerun", marker, ckpt)
    codes = hosts2.wait(procs, 240, logs)
    text = "\n".join(log.read_text()[-3000:] for log in logs)
    assert codes == [0, 0], text
    assert "distrain: resumed from" in text, text
    assert "finished at step 40 on 2 rank(s)" in text, text
    again = min(t for t in (float(ln.split()[3]) for ln in marker.read_text().splitlines())
                if t > killed_at)  # fmt: skip
    print(f"kill -> first step trained again (the rerun's): {again - killed_at:.1f} s")


#: how long node 1's launcher is frozen: past the 4 s after which a launcher's look-counter
#: counts as "stopped looking" (stop_watch.GONE_S), a heartbeat that load can stall
FROZEN_S = 8.0


def test_a_launcher_frozen_by_load_is_not_a_lost_node(hosts2: Hosts, tmp_path: Path) -> None:
    """Node 1's launcher stopped (SIGSTOP, as a machine too loaded to schedule it) while its rank
    is killed: its connections stay open, so node 0's restarted rank waits; once resumed it
    restarts its rank, which rejoins, and the job ends well on both nodes."""
    import psutil

    marker, ckpt = tmp_path / "first_steps", tmp_path / "ckpt"
    procs, logs = _start(hosts2, tmp_path, "frozen", marker, ckpt)
    deadline = time.monotonic() + 240
    while not list(ckpt.glob("step_*")):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "\n".join(
            log.read_text()[-3000:] for log in logs
        )
        time.sleep(0.1)
    ranks = [int(p) for p in hosts2.pids(1)
             if "distrain rank" in " ".join(psutil.Process(int(p)).cmdline())]  # fmt: skip
    assert ranks, "node 1's rank not found"
    os.kill(procs[1].pid, signal.SIGSTOP)
    try:
        os.kill(ranks[0], signal.SIGKILL)
        time.sleep(FROZEN_S)
        assert procs[0].poll() is None, logs[0].read_text()[-4000:]
    finally:
        os.kill(procs[1].pid, signal.SIGCONT)
    codes = hosts2.wait(procs, 240, logs)
    text = "\n".join(log.read_text()[-3000:] for log in logs)
    assert codes == [0, 0], text
    assert "job stopped" not in text, text
    assert "finished at step 40 on 2 rank(s)" in text, text
