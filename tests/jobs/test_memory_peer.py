"""The memory tier's copy on a peer node (checkpoint/memory_tier/peer.py): two "nodes" in
network namespaces.

A static 2-node × 1-process job with one checkpoint directory both see and each node its own
memory root (``DISTRAIN_MEMORY_DIR``), snapshots every step.  Rank 1 is SIGKILLed; the job
fails; node 1 then loses its memory (its folder removed: the machine was replaced).  The rerun
finds rank 1's snapshot in node 0's copy, sends it over the tier's gloo group, resumes from the
step before the kill and ends bit for bit equal to an uninterrupted run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO, python
from helpers.checkpoints import assert_equals_uninterrupted
from helpers.netns_hosts import Hosts, make_hosts

pytestmark = [pytest.mark.slow, pytest.mark.netns, pytest.mark.timeout(500)]

RUN = [python(), "-m", "distrain.cli", "run"]
WORKER = str(REPO / "tests" / "scripts" / "ckpt_worker.py")
#: one thread per rank everywhere, so a 2-node job computes exactly what a 1-node 2-rank job does
ONE_THREAD = {"DISTRAIN_NUM_THREADS": "1"}
ARGS = ["--every", "100", "--memory-every", "1"]


@pytest.fixture
def hosts2() -> Iterator[Hosts]:
    """Two namespace hosts on one bridge, removed afterwards."""
    with make_hosts(2) as hosts:
        yield hosts


@pytest.fixture
def roots(tmp_path: Path) -> Iterator[list[Path]]:
    """Each node's own tmpfs memory root, removed afterwards."""
    made = [Path("/dev/shm") / f"dtest-peer-{os.getpid()}-{tmp_path.name}-node{i}" for i in (0, 1)]
    for root in made:
        root.mkdir()
    yield made
    for root in made:
        shutil.rmtree(root, ignore_errors=True)


def static_job(
    hosts: Hosts, tmp_path: Path, roots: list[Path], name: str, args: list[str], port: int
) -> tuple[list[int], list[str]]:
    """A 2-node × 1-process static job of the checkpoint worker, each node its memory root."""
    common = ["--nnodes", "2", "--master-addr", hosts.addrs[0], "--master-port", str(port)]
    logs = [tmp_path / f"{name}-node{i}.log" for i in range(2)]
    procs = [
        hosts.start(
            i,
            RUN + common + ["-n", "1", "--node-rank", str(i), WORKER, *args],
            logs[i],
            env={**ONE_THREAD, "DISTRAIN_MEMORY_DIR": str(roots[i])},
        )
        for i in range(2)
    ]
    codes = hosts.wait(procs, 300, logs)
    return codes, [log.read_text() for log in logs]


def test_node_lost_with_its_memory_resumes_from_the_peer_copy(
    hosts2: Hosts, tmp_path: Path, roots: list[Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    ckpt, final = tmp_path / "ckpt", tmp_path / "final.pt"
    args = ["--dir", str(ckpt), "--out", str(final), *ARGS]
    codes, logs = static_job(hosts2, tmp_path, roots, "killed", [*args, "--kill-at", "7"], 29521)
    assert codes[1] != 0, "\n".join(logs)
    (folder1,) = roots[1].glob("distrain-mem-*")
    (folder0,) = roots[0].glob("distrain-mem-*")
    held = sorted(p.name for p in (folder0 / "peer").glob("r00001-*.pt"))
    assert held == ["r00001-s00000005.pt", "r00001-s00000006.pt"], held
    shutil.rmtree(folder1)  # node 1 lost its memory
    codes, logs = static_job(hosts2, tmp_path, roots, "rerun", args, 29522)
    assert codes == [0, 0], "\n".join(logs)
    assert "this node's memory has no step 6: the copy of step 6 on rank 0's node used" in logs[1]
    assert "resumed from memory" in logs[0] and "(step 6," in logs[0], logs[0]
    assert not list(roots[0].iterdir()) and not list(roots[1].iterdir()), "left behind"
    assert_equals_uninterrupted(final, tmp_path_factory, step=16)
