"""Node loss with distrain's own defaults: a 1:2 elastic job loses a whole node and goes on.

No timing flags are given: the rendezvous keep-alive and last-call settings are distrain's
(launch/nodes/rendezvous.py).  Every process of node 1 (agent, workers, fork server) is SIGKILLed;
node 0 must resume from the checkpoint on its own and finish.  The only time asserted is a
generous bound: torch's own defaults take ~45 s here before the survivor trains again, and
distrain's take ~10 s on a loaded machine; benchmarks/recovery/node_loss.py measures it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO, python
from helpers.netns_hosts import Hosts, make_hosts

pytestmark = [pytest.mark.netns, pytest.mark.timeout(400)]

SCRIPT = str(
    REPO / "tests" / "scripts" / "node_loss_worker.py"
)  # benchmarks/recovery/node_loss.py runs it too
BOUND_S = 30.0


@pytest.fixture
def hosts2() -> Iterator[Hosts]:
    """Two namespace hosts on one bridge, removed afterwards."""
    with make_hosts(2) as hosts:
        yield hosts


def _rows(marker: Path) -> list[tuple[str, int, float]]:
    if not marker.exists():
        return []
    return [
        (h, int(w), float(t))
        for h, _r, w, t, _s in (line.split() for line in marker.read_text().splitlines())
    ]


@pytest.mark.slow
def test_whole_node_sigkill_survivor_resumes_within_bound(hosts2: Hosts, tmp_path: Path) -> None:
    marker, ckpt = tmp_path / "first_steps", tmp_path / "ckpt"
    flags = ["--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
             f"{hosts2.addrs[0]}:29400",
             "--rdzv-id", "nodeloss", "--max-restarts", "3", "-n", "1"]  # fmt: skip
    argv = [
        python(),
        "-m",
        "distrain.cli",
        "run",
        *flags,
        SCRIPT,
        "--dir",
        str(ckpt),
        "--steps",
        "60",
        "--sleep",
        "0.2",
    ]
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    procs = [hosts2.start(i, argv, logs[i],
                          env={"BENCH_NODE": f"n{i}", "BENCH_FIRST_STEP_FILE": str(marker)})
             for i in range(2)]  # fmt: skip
    deadline = time.monotonic() + 240
    while not (
        {h for h, w, _ in _rows(marker) if w == 2} >= {"n0", "n1"} and list(ckpt.glob("step_*"))
    ):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            pytest.fail(
                "the two nodes never trained together\n"
                + "\n".join(log.read_text()[-3000:] for log in logs)
            )
        time.sleep(0.1)
    killed_at = time.time()
    assert hosts2.kill_node(1)
    codes = hosts2.wait([procs[0]], 300, logs)
    text = logs[0].read_text()
    assert codes == [0], text[-4000:]
    assert "finished at step 60 on 1 rank(s)" in text, text[-4000:]
    resumed = [t for h, w, t in _rows(marker) if h == "n0" and w == 1 and t > killed_at]
    assert resumed, text[-4000:]
    assert resumed[0] - killed_at < BOUND_S, (
        f"survivor resumed {resumed[0] - killed_at:.1f} s after the node died\n{text[-4000:]}"
    )
