"""Multi-node `distrain run` across real network namespaces (separate network stacks).

Every test starts real `distrain run` launchers, one per namespace "host", whose hostname
resolves to 127.0.0.1 — the classic trap that makes plain torchrun advertise loopback.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from helpers import REPO, python
from helpers.netns_hosts import Hosts

pytestmark = [pytest.mark.netns, pytest.mark.timeout(400)]

SCRIPT = str(REPO / "tests" / "scripts" / "mn_train.py")


RUN = [python(), "-m", "distrain.cli", "run"]


def _launch(
    hosts: Hosts,
    tmp_path: Path,
    per_node: list[list[str]],
    script_args: list[str],
    timeout: float = 240,
) -> tuple[list[int], list[str]]:
    logs = [tmp_path / f"node{i}.log" for i in range(len(per_node))]
    procs = [
        hosts.start(i, RUN + flags + [SCRIPT, *script_args], logs[i])
        for i, flags in enumerate(per_node)
    ]
    codes = hosts.wait(procs, timeout, logs)
    return codes, [log.read_text() for log in logs]


def _check_job(out: Path, hosts: Hosts, world: int) -> dict:
    result = json.loads(out.read_text())
    assert result["world_size"] == world
    assert result["rank_sum"] == world * (world - 1) / 2  # a real all-reduce over every rank
    nodes = {r["host_ns"] for r in result["ranks"]}
    assert nodes == set(hosts.names), nodes  # ranks really ran in both namespaces
    assert {r["gloo_ifname"] for r in result["ranks"]} == {"eth0"}
    return result


def test_static_two_nodes_two_procs(hosts2: Hosts, tmp_path: Path) -> None:
    master = hosts2.addrs[0]
    common = ["--nnodes", "2", "--master-addr", master, "--master-port", "29500", "-n", "2"]
    out = tmp_path / "out.json"
    codes, logs = _launch(
        hosts2,
        tmp_path,
        [common + ["--node-rank", "0"], common + ["--node-rank", "1"]],
        ["--out", str(out)],
    )
    assert codes == [0, 0], "\n".join(logs)
    result = _check_job(out, hosts2, 4)
    assert {r["master_addr"] for r in result["ranks"]} == {master}
    # static: the store lives in node 0's agent (torch's static rendezvous), not in rank 0
    # what distrain chose, on each node's console; and the loopback hostname was noticed
    assert (
        f"interface eth0 ({hosts2.addrs[0]}) routes to {master}:29500 · store on this node (rank 0)"
        in logs[0]
    )
    assert (
        f"interface eth0 ({hosts2.addrs[1]}) routes to {master}:29500 · store on {master}"
        in logs[1]
    )
    assert "resolves to 127.0.0.1" in logs[1]


def test_c10d_elastic_both_nodes(hosts2: Hosts, tmp_path: Path) -> None:
    endpoint = f"{hosts2.addrs[0]}:29400"
    flags = [
        "--nnodes",
        "1:2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        "job1",
        "--rdzv-conf",
        "last_call_timeout=5",
        "-n",
        "1",
    ]
    out = tmp_path / "out.json"
    codes, logs = _launch(hosts2, tmp_path, [flags, flags], ["--out", str(out)])
    assert codes == [0, 0], "\n".join(logs)
    result = _check_job(out, hosts2, 2)
    # workers got a real address, not localhost
    masters = {r["master_addr"] for r in result["ranks"]}
    assert len(masters) == 1 and masters <= set(hosts2.addrs)
    # rank 0's store listens on the chosen interface only, not on 0.0.0.0
    assert result["store_listen"] == sorted(masters)
    assert "rendezvous store on this node" in logs[0]
    assert f"rendezvous store on {hosts2.addrs[0]}" in logs[1]


@pytest.mark.skipif(
    shutil.which("etcd") is None, reason="etcd not installed (apt-get install etcd-server)"
)
def test_etcd_rendezvous(hosts2: Hosts, tmp_path: Path) -> None:
    pytest.importorskip("etcd", reason="python-etcd not installed (pip install python-etcd)")
    host = hosts2.addrs[0]
    etcd = hosts2.start(
        0,
        [
            "etcd",
            "--enable-v2=true",
            "--data-dir",
            str(tmp_path / "etcd"),
            "--listen-client-urls",
            f"http://{host}:2379",
            "--advertise-client-urls",
            f"http://{host}:2379",
            "--listen-peer-urls",
            f"http://{host}:2380",
        ],
        tmp_path / "etcd.log",
    )
    deadline = time.monotonic() + 60
    while "ready to serve client requests" not in (tmp_path / "etcd.log").read_text():
        assert etcd.poll() is None and time.monotonic() < deadline, (
            tmp_path / "etcd.log"
        ).read_text()
        time.sleep(0.2)
    flags = [
        "--nnodes",
        "2",
        "--rdzv-backend",
        "etcd",
        "--rdzv-endpoint",
        f"{host}:2379",
        "--rdzv-id",
        "job2",
        "-n",
        "1",
    ]
    out = tmp_path / "out.json"
    codes, logs = _launch(hosts2, tmp_path, [flags, flags], ["--out", str(out)])
    assert codes == [0, 0], "\n".join(logs)
    _check_job(out, hosts2, 2)
    assert f"rendezvous via etcd at {host}" in logs[1]


def test_wrong_iface_fails_fast(hosts2: Hosts) -> None:
    master = hosts2.addrs[0]
    base = RUN + [
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--master-addr",
        master,
        "--master-port",
        "29500",
    ]
    cases = {
        "lo": f"--iface lo (127.0.0.1) cannot reach --master-addr {master} ({master}): this node "
        "routes it via eth0",
        "nope0": "--iface nope0: no such interface",
    }
    for iface, message in cases.items():
        # no rendezvous wait: torch would wait up to 600 s for the master; this returns before any
        res = subprocess.run(
            hosts2.cmd(1, base + ["--iface", iface, SCRIPT]),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == 2, res.stderr
        assert message in res.stderr
        assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    # a master name that resolves to loopback on a non-master node would only talk to itself
    res = subprocess.run(
        hosts2.cmd(
            1,
            RUN
            + ["--nnodes", "2", "--node-rank", "1", "--master-addr", socket.gethostname(), SCRIPT],
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2 and "resolves to loopback 127.0.0.1 on this node" in res.stderr, (
        res.stderr
    )


# -- elastic membership ----------------------------------------------------------------------
ELASTIC = str(REPO / "tests" / "scripts" / "elastic_train.py")
STEPS = 3 * 96 // 12  # epochs × samples / global batch: the same whatever the world size


def _elastic_flags(hosts: Hosts, run_id: str) -> list[str]:
    return [
        "--nnodes",
        "1:2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"{hosts.addrs[0]}:29400",
        "--rdzv-id",
        run_id,
        "--rdzv-conf",
        "last_call_timeout=2,keep_alive_interval=2",
        "--max-restarts",
        "3",
        "--monitor-interval",
        "0.5",
        "-n",
        "1",
    ]


def _wait_for_checkpoint(
    ckpt: Path,
    at_least: int,
    procs: list[subprocess.Popen[str]],
    logs: list[Path],
    timeout: float = 180,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        steps = [int(p.name.split("_")[1]) for p in ckpt.glob("step_*")] if ckpt.exists() else []
        if steps and max(steps) >= at_least:
            return
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            pytest.fail(
                "no checkpoint appeared\n" + "\n".join(log.read_text()[-3000:] for log in logs)
            )
        time.sleep(0.2)


def _history(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_late_join_scale_up(hosts2: Hosts, tmp_path: Path) -> None:
    ckpt, out, hist = tmp_path / "ckpt", tmp_path / "out.json", tmp_path / "history.jsonl"
    argv = (
        RUN
        + _elastic_flags(hosts2, "late")
        + [ELASTIC, "--dir", str(ckpt), "--out", str(out), "--history", str(hist)]
    )
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    first = hosts2.start(0, argv, logs[0])
    _wait_for_checkpoint(ckpt, 4, [first], logs[:1])  # node 0 trains alone for a while
    second = hosts2.start(1, argv, logs[1])
    codes = hosts2.wait([first, second], 300, logs)
    text = "\n".join(log.read_text() for log in logs)
    assert codes == [0, 0], text
    history = _history(hist)
    assert history[0] == {**history[0], "world": 1, "resumed_step": 0}
    assert history[-1]["world"] == 2 and history[-1]["resumed_step"] >= 4, (
        history
    )  # from the checkpoint
    assert history[-1]["master"] in hosts2.addrs
    assert json.loads(out.read_text()) == {"step": STEPS, "world": 2}


@pytest.mark.slow
def test_node_loss_scale_down(hosts2: Hosts, tmp_path: Path) -> None:
    ckpt, out, hist = tmp_path / "ckpt", tmp_path / "out.json", tmp_path / "history.jsonl"
    argv = (
        RUN
        + _elastic_flags(hosts2, "loss")
        + [ELASTIC, "--dir", str(ckpt), "--out", str(out), "--history", str(hist)]
    )
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    procs = [hosts2.start(i, argv, logs[i], env={"DISTRAIN_TRAIN_TIMEOUT": "30"}) for i in range(2)]
    _wait_for_checkpoint(ckpt, 4, procs, logs)
    assert _history(hist)[-1]["world"] == 2
    # the node dies: every process in its namespace (agent and workers) is SIGKILLed
    assert hosts2.kill_node(1)
    codes = hosts2.wait([procs[0]], 300, logs)
    text = logs[0].read_text()
    assert codes == [0], text
    history = _history(hist)
    assert history[-1]["world"] == 1 and history[-1]["resumed_step"] >= 4, history
    assert json.loads(out.read_text()) == {"step": STEPS, "world": 1}
