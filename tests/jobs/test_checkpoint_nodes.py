"""Checkpoints when each node has its own disk: real multi-node jobs between network namespaces.

Every "node" (a namespace, see netns_hosts.py) runs its launcher in a mount namespace of its own
(``ip netns exec`` makes one) where the job's checkpoint path is a bind mount of that node's
private directory: the same path on every node, different disks, as on a cluster with local
SSDs.  Nothing a node writes there is visible to the other.
"""

from __future__ import annotations

import json
import shutil
import subprocess
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
ELASTIC = str(REPO / "tests" / "scripts" / "elastic_train.py")


@pytest.fixture
def hosts2(tmp_path: Path) -> Iterator[Hosts]:
    """Two namespace hosts where bind mounts work (skip otherwise)."""
    with make_hosts(2) as hosts:
        (tmp_path / "probe-src").mkdir()
        (tmp_path / "probe-dst").mkdir()
        res = subprocess.run(
            hosts.cmd(
                0, ["mount", "--bind", str(tmp_path / "probe-src"), str(tmp_path / "probe-dst")]
            ),
            capture_output=True,
            text=True,
            timeout=30,
        )
        if res.returncode != 0:
            pytest.skip(f"bind mounts are not possible here: {res.stderr.strip()}")
        yield hosts


def own_disk(disk: Path, mountpoint: Path, argv: list[str]) -> list[str]:
    """`argv` run with `mountpoint` showing this node's private `disk` (own mount namespace)."""
    disk.mkdir(parents=True, exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    return [
        "sh",
        "-c",
        'mount --bind "$1" "$2" && shift 2 && exec "$@"',
        "sh",
        str(disk),
        str(mountpoint),
        *argv,
    ]


def static_job(
    hosts: Hosts, tmp_path: Path, name: str, worker_args: list[str], timeout: float = 300
) -> tuple[list[int], list[str]]:
    """A 2-node × 1-process static job of the checkpoint worker, each node on its own disk."""
    common = ["--nnodes", "2", "--master-addr", hosts.addrs[0], "--master-port", "29511", "-n", "1"]
    logs = [tmp_path / f"{name}-node{i}.log" for i in range(2)]
    procs = [
        hosts.start(
            i,
            own_disk(
                tmp_path / f"disk{i}",
                tmp_path / "ckpt",
                RUN + common + ["--node-rank", str(i), WORKER, *worker_args],
            ),
            logs[i],
            env=ONE_THREAD,
        )
        for i in range(2)
    ]
    codes = hosts.wait(procs, timeout, logs)
    return codes, [log.read_text() for log in logs]


def test_per_node_disks_each_node_keeps_a_complete_checkpoint(
    hosts2: Hosts, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """DDP on two nodes with private directories: each node's directory alone verifies and holds
    the whole model, optimizer and shared state plus its own ranks' RNG; the job resumes bitwise."""
    from distrain.checkpoint import verify

    ckpt, part, final = tmp_path / "ckpt", tmp_path / "part.pt", tmp_path / "final.pt"
    codes, logs = static_job(
        hosts2, tmp_path, "first", ["--dir", str(ckpt), "--out", str(part), "--stop-at", "6"]
    )
    assert codes == [0, 0], "\n".join(logs)
    for i in range(2):
        step = tmp_path / f"disk{i}" / "step_00000006"
        assert verify(str(step)) is None, verify(str(step))
        names = {p.name for p in step.iterdir()}
        assert {".metadata", "__0_0.distcp", "shared.pt", f"rank_0000{i}.pt"} <= names, names
        assert (
            f"rank_0000{1 - i}.pt" not in names
        )  # the other node's RNG file lives on the other disk
    assert not any(ckpt.iterdir()), (
        "the mount point itself (the shared root namespace's view) stayed empty"
    )
    codes, logs = static_job(hosts2, tmp_path, "resume", ["--dir", str(ckpt), "--out", str(final)])
    assert codes == [0, 0], "\n".join(logs)
    assert "resumed from" in logs[0] and "(step 6, saved on 2 rank(s))" in logs[0]
    assert "absent" not in "\n".join(logs)  # every rank found its RNG file on its own node
    # the same job uninterrupted, on one machine: bit for bit the same result
    assert_equals_uninterrupted(final, tmp_path_factory, step=16)
    # node 1 is replaced by a machine with an empty disk: it receives step 16 from node 0 over the
    # network (DDP does not re-broadcast weights after construction: without it the replicas,
    # and the two nodes' checkpoints, would differ)
    shutil.rmtree(tmp_path / "disk1")
    codes, logs = static_job(
        hosts2, tmp_path, "replaced", ["--dir", str(ckpt), "--out", str(final), "--epochs", "3"]
    )
    assert codes == [0, 0], "\n".join(logs)
    assert "step 16 is not on this node's disk: received it from rank 0" in logs[1], logs[1]
    shas = [
        json.loads((tmp_path / f"disk{i}" / "step_00000024" / "manifest.json").read_text())[
            "files"
        ]["__0_0.distcp"]["sha256"]
        for i in range(2)
    ]
    assert shas[0] == shas[1], "the two nodes' replicas differ"


def test_per_node_disks_refuse_fsdp_at_start(hosts2: Hosts, tmp_path: Path) -> None:
    """FSDP shards on private disks could never be reassembled: one line at start, no training."""
    codes, logs = static_job(
        hosts2,
        tmp_path,
        "fsdp",
        ["--strategy", "fsdp", "--dir", str(tmp_path / "ckpt"), "--out", str(tmp_path / "x.pt")],
    )
    assert codes[0] != 0 and codes[1] != 0
    text = "\n".join(logs)
    assert f"checkpoint directory {tmp_path / 'ckpt'} is not shared between nodes" in text, text
    assert "Traceback" not in text
    assert not list((tmp_path / "disk0").glob("step_*"))


def _history(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_per_node_disks_survive_node_loss(hosts2: Hosts, tmp_path: Path) -> None:
    """Elastic 1:2 job on private disks; node 1 dies; node 0 resumes alone from its own disk."""
    ckpt, out, hist = tmp_path / "ckpt", tmp_path / "out.json", tmp_path / "history.jsonl"
    flags = [
        "--nnodes",
        "1:2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"{hosts2.addrs[0]}:29412",
        "--rdzv-id",
        "disks",
        "--rdzv-conf",
        "last_call_timeout=2,keep_alive_interval=2",
        "--max-restarts",
        "3",
        "--monitor-interval",
        "0.5",
        "-n",
        "1",
    ]
    argv = RUN + flags + [ELASTIC, "--dir", str(ckpt), "--out", str(out), "--history", str(hist)]
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    procs = [
        hosts2.start(
            i,
            own_disk(tmp_path / f"disk{i}", ckpt, argv),
            logs[i],
            env={"DISTRAIN_TRAIN_TIMEOUT": "30"},
        )
        for i in range(2)
    ]
    deadline = 180.0
    import time

    start = time.monotonic()
    while not list((tmp_path / "disk0").glob("step_0000000[4-9]")) or not list(
        (tmp_path / "disk1").glob("step_0000000[4-9]")
    ):
        if time.monotonic() - start > deadline or any(p.poll() is not None for p in procs):
            pytest.fail(
                "no checkpoint on both disks\n" + "\n".join(log.read_text()[-3000:] for log in logs)
            )
        time.sleep(0.2)
    assert _history(hist)[-1]["world"] == 2
    assert hosts2.kill_node(1)  # the node dies, its disk with it
    codes = hosts2.wait([procs[0]], 300, logs)
    text = logs[0].read_text()
    assert codes == [0], text
    history = _history(hist)
    assert history[-1]["world"] == 1 and history[-1]["resumed_step"] >= 4, (history, text)
    assert json.loads(out.read_text()) == {"step": 24, "world": 1}
