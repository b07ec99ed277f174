"""One worker of one node dies in a multi-node job: every node restarts and the job resumes.

The nodes are `distrain run` launchers on this machine's loopback (distinct agents and worker
groups, one rendezvous): enough to reproduce what a cluster shows.  Under c10d the failed
node's agent counts a restart (TORCHELASTIC_RESTART_COUNT=1) while the others only see a
membership change (=0); the other ranks linger at the fault's step (``--linger``), so their own
agents do not see a failure first.  Before the attempt was agreed through the store
(worker/start/attempt.py), the two counts gave two store prefixes and every rank waited for its
peers until the init timeout.  Each job ends equal to its uninterrupted run: bit for bit with
2 ranks; with 3, to float32 rounding (1e-6), as a 3-rank resume on one node does too: a sum of
three gradients is rounded in an order DDP's bucket layout decides, and a resumed process starts
with DDP's first-iteration buckets again.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
import torch
from helpers import kill_group
from helpers.checkpoints import DISTRAIN, WORKER, assert_bitwise, one_thread_baseline

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

#: one thread per rank everywhere: an N-node job then computes exactly what N local ranks do
ONE_THREAD = {**os.environ, "DISTRAIN_NUM_THREADS": "1"}
#: the init timeout the ranks would otherwise wait (10 min) before the old bug showed: a hang
#: longer than this bound fails the test
JOB_BOUND_S = 150


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def baselines(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Uninterrupted runs of 2 and 3 ranks (one node, one thread per rank), made once per test
    run (a module fixture is made once per xdist worker); the 2-rank one is also the two-node
    checkpoint tests' (helpers.checkpoints.assert_equals_uninterrupted)."""
    return {world: one_thread_baseline(tmp_path_factory, world) for world in (2, 3)}


def _nodes(
    tmp_path: Path, flags: list[list[str]], worker_args: list[str]
) -> tuple[list[int], list[str]]:
    """Start one launcher per entry of `flags`; wait for all; their exit codes and logs."""
    logs = [tmp_path / f"node{i}.log" for i in range(len(flags))]
    procs: list[subprocess.Popen[str]] = []
    try:
        for i, node_flags in enumerate(flags):
            with open(logs[i], "w") as log:
                cmd = [
                    *DISTRAIN,
                    *node_flags,
                    "-n",
                    "1",
                    "--max-restarts",
                    "1",
                    WORKER,
                    *worker_args,
                ]
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True,
                                              env=ONE_THREAD, start_new_session=True))  # fmt: skip
        deadline = time.monotonic() + JOB_BOUND_S
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        return [p.returncode if p.returncode is not None else -999 for p in procs], [
            log.read_text() for log in logs
        ]
    finally:
        for p in procs:
            kill_group(p)


def _c10d(nnodes: str, count: int) -> list[list[str]]:
    rdzv = [
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{_port()}",
        "--rdzv-id",
        "restart",
    ]
    return [["--nnodes", nnodes, *rdzv] for _ in range(count)]


def _static(count: int) -> list[list[str]]:
    common = ["--nnodes", str(count), "--master-addr", "127.0.0.1", "--master-port", str(_port())]
    return [[*common, "--node-rank", str(i)] for i in range(count)]


CASES = {
    "static-2-nodes-raise": (lambda: _static(2), ["--raise-at", "5"]),
    "c10d-fixed-2-nodes-sigkill": (lambda: _c10d("2", 2), ["--kill-at", "5"]),
    "c10d-elastic-1:2-nodes-raise": (lambda: _c10d("1:2", 2), ["--raise-at", "5"]),
    "c10d-fixed-3-nodes-sigkill": (lambda: _c10d("3", 3), ["--kill-at", "6"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_worker_of_one_node_dies_and_the_job_resumes(
    case: str, tmp_path: Path, baselines: dict[int, Path]
) -> None:
    flags, fault = CASES[case]
    nodes = flags()
    final, ckpt = tmp_path / "final.pt", tmp_path / "ckpt"
    args = ["--dir", str(ckpt), "--out", str(final), "--fault-rank", "1", "--linger", "3", *fault]
    started = time.monotonic()
    codes, logs = _nodes(tmp_path, nodes, args)
    # the checks read the whole logs; the message shows their tails (torch's C++ warnings at the
    # end of a node's log can be longer than the tail, and once cut the resume line in half)
    whole = "\n".join(logs)
    text = "\n".join(f"--- node {i}\n{log[-3000:]}" for i, log in enumerate(logs))
    assert codes == [0] * len(nodes), text
    assert (ckpt / "FAULT_DONE").exists(), text  # the fault happened
    assert "distrain: resumed from" in whole, text
    assert "finished at step 16" in whole, text
    if len(nodes) == 2:
        assert_bitwise(final, baselines[2])
    else:
        got, want = (torch.load(p, weights_only=True) for p in (final, baselines[len(nodes)]))
        assert got["step"] == want["step"]
        for key, value in want["model"].items():
            torch.testing.assert_close(got["model"][key], value, rtol=0, atol=1e-6)
    print(f"{case}: {time.monotonic() - started:.1f} s")
