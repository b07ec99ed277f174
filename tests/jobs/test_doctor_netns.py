"""`distrain doctor --master-addr` across two real network stacks (Linux network namespaces).

Node n1 checks master n0 over a veth pair: through which interface the route goes, an open
port, and an address nobody answers for (the firewall / wrong-address case)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from helpers import kill_group, python, run

pytestmark = pytest.mark.netns


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@pytest.fixture
def two_nodes() -> Iterator[tuple[str, str]]:
    tag = uuid.uuid4().hex[:6]
    n0, n1, v0, v1 = f"dd0{tag}", f"dd1{tag}", f"dv0{tag}", f"dv1{tag}"
    if os.geteuid() != 0 or _ip("netns", "add", n0).returncode != 0:
        pytest.skip("needs root and ip netns")
    try:
        steps = [
            ("netns", "add", n1), ("link", "add", v0, "type", "veth", "peer", "name", v1),
            ("link", "set", v0, "netns", n0), ("link", "set", v1, "netns", n1),
            ("-n", n0, "addr", "add", "10.231.0.1/24", "dev", v0), ("-n", n1, "addr", "add", "10.231.0.2/24", "dev", v1),
            ("-n", n0, "link", "set", v0, "up"), ("-n", n1, "link", "set", v1, "up"),
            ("-n", n0, "link", "set", "lo", "up"), ("-n", n1, "link", "set", "lo", "up"),
        ]
        for step in steps:
            res = _ip(*step)
            if res.returncode != 0:
                pytest.skip(f"ip {' '.join(step)}: {res.stderr.strip()}")
        yield n0, n1
    finally:
        _ip("netns", "del", n0)
        _ip("netns", "del", n1)


def _doctor_in(ns: str, *args: str) -> dict:
    res = run(["ip", "netns", "exec", ns, python(), "-m", "distrain.cli", "doctor", "--json", *args], timeout=150)
    try:
        doc = json.loads(res.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return {c["id"]: c for c in doc["checks"]}


def test_master_reachability_across_namespaces(two_nodes: tuple[str, str]) -> None:
    n0, n1 = two_nodes
    # a listener on the "master node" (its own network stack)
    server = subprocess.Popen(["ip", "netns", "exec", n0, python(), "-c",
                               "import socket,time; s=socket.socket(); s.bind(('10.231.0.1', 29511)); s.listen(); time.sleep(300)"],
                              start_new_session=True)
    try:
        # wait until it listens (the check below would report 'refused' otherwise)
        for _ in range(100):
            probe = subprocess.run(["ip", "netns", "exec", n1, python(), "-c",
                                    "import socket; socket.create_connection(('10.231.0.1', 29511), 1)"], capture_output=True)
            if probe.returncode == 0:
                break
        checks = _doctor_in(n1, "--master-addr", "10.231.0.1", "--master-port", "29511")
        master = checks["network.master"]
        assert master["status"] == "ok" and master["data"]["connect"] == "open", master
        assert master["data"]["interface"].startswith("dv1") and master["data"]["local_address"] == "10.231.0.2", master
        # an address on the link that nobody owns: no answer → fail with the firewall fix
        checks = _doctor_in(n1, "--master-addr", "10.231.0.9", "--master-port", "29511")
        master = checks["network.master"]
        assert master["status"] == "fail" and master["data"]["connect"] != "open" and "firewall" in master["fix"], master
    finally:
        kill_group(server)
        server.wait()
