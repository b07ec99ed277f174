"""`distrain doctor --master-addr` across two real network stacks (Linux network namespaces).

Node n1 checks master n0 over a veth pair: through which interface the route goes, an open
port, and an address nobody answers for (the firewall / wrong-address case)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

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
            ("netns", "add", n1),
            ("link", "add", v0, "type", "veth", "peer", "name", v1),
            ("link", "set", v0, "netns", n0),
            ("link", "set", v1, "netns", n1),
            ("-n", n0, "addr", "add", "10.231.0.1/24", "dev", v0),
            ("-n", n1, "addr", "add", "10.231.0.2/24", "dev", v1),
            ("-n", n0, "link", "set", v0, "up"),
            ("-n", n1, "link", "set", v1, "up"),
            ("-n", n0, "link", "set", "lo", "up"),
            ("-n", n1, "link", "set", "lo", "up"),
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
    res = run(
        ["ip", "netns", "exec", ns, python(), "-m", "distrain.cli", "doctor", "--json", *args],
        timeout=150,
    )
    try:
        doc = json.loads(res.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return {c["id"]: c for c in doc["checks"]}


def test_master_reachability_across_namespaces(two_nodes: tuple[str, str]) -> None:
    n0, n1 = two_nodes
    # a listener on the "master node" (its own network stack)
    server = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            n0,
            python(),
            "-c",
            "import socket,time; s=socket.socket(); s.bind(('10.231.0.1', 29511)); "
            "s.listen(); time.sleep(300)",
        ],
        start_new_session=True,
    )
    try:
        # wait until it listens (the check below would report 'refused' otherwise)
        for _ in range(100):
            probe = subprocess.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    n1,
                    python(),
                    "-c",
                    "import socket; socket.create_connection(('10.231.0.1', 29511), 1)",
                ],
                capture_output=True,
            )
            if probe.returncode == 0:
                break
        checks = _doctor_in(n1, "--master-addr", "10.231.0.1", "--master-port", "29511")
        master = checks["network.master"]
        assert master["status"] == "ok" and master["data"]["connect"] == "open", master
        assert (
            master["data"]["interface"].startswith("dv1")
            and master["data"]["local_address"] == "10.231.0.2"
        ), master
        # an address on the link that nobody owns: no answer → fail with the firewall fix
        checks = _doctor_in(n1, "--master-addr", "10.231.0.9", "--master-port", "29511")
        master = checks["network.master"]
        assert (
            master["status"] == "fail"
            and master["data"]["connect"] != "open"
            and "firewall" in master["fix"]
        ), master
    finally:
        kill_group(server)
        server.wait()


def _doctor_as_loopback_host(ns: str, hosts: str, *args: str, host_address: bool = False) -> dict:
    """`distrain doctor --json` in `ns` on a host whose name resolves to 127.0.1.1 (Debian's).

    Own UTS and mount namespaces: the hostname and /etc/hosts are this test's, nobody else's.
    """
    code = f'hostname dtest-node && mount --bind {hosts} /etc/hosts && exec "$@"'
    argv = ["ip", "netns", "exec", ns, "unshare", "-u", "-m", "sh", "-c", code, "sh"]
    res = run([*argv, python(), "-m", "distrain.cli", "doctor", "--json", *args], timeout=150)
    try:
        doc = json.loads(res.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    checks = {c["id"]: c for c in doc["checks"]}
    if host_address:  # what cluster/base.py advertises as the master when the hostname is loopback
        host = run(
            [*argv, python(), "-c", "from distrain.net import host_address; print(host_address())"],
            timeout=60,
        )
        checks["host_address"] = {"data": host.stdout.strip()}
    return checks


def test_suggested_interface_follows_the_route_not_the_alphabet(
    two_nodes: tuple[str, str], tmp_path: Path
) -> None:
    """A bridge named first (like docker0 on a Docker host) is never the suggestion.

    n1 has `aaa…` (a bridge with an address, alphabetically first), its veth `dv1…` with the
    default route, and a second veth `dw1…` that holds the only route to 10.233.0.0/24.
    """
    n0, n1 = two_nodes
    tag = n1[3:]
    bridge, second, veth = f"aaa{tag}", f"dw1{tag}", f"dv1{tag}"
    for step in [("-n", n1, "link", "add", bridge, "type", "bridge"),
                 ("-n", n1, "addr", "add", "10.232.0.1/24", "dev", bridge),
                 ("-n", n1, "link", "set", bridge, "up"),
                 ("-n", n1, "link", "add", second, "type", "veth", "peer", "name", f"dw0{tag}",
                  "netns", n0),
                 ("-n", n1, "addr", "add", "10.233.0.2/24", "dev", second),
                 ("-n", n1, "link", "set", second, "up"),
                 ("-n", n0, "link", "set", f"dw0{tag}", "up"),
                 ("-n", n1, "route", "add", "default", "via", "10.231.0.1", "dev",
                  veth)]:  # fmt: skip
        res = _ip(*step)
        if res.returncode != 0:
            pytest.skip(f"ip {' '.join(step)}: {res.stderr.strip()}")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n127.0.1.1 dtest-node\n")
    checks = _doctor_as_loopback_host(n1, str(hosts), host_address=True)
    assert checks["network.interfaces"]["data"]["outward"] == {
        "interface": veth,
        "address": "10.231.0.2",
        "via": "the default route",
    }
    hostname = checks["network.hostname"]
    assert (
        hostname["status"] == "warn"
        and f"NCCL_SOCKET_IFNAME={veth} " in hostname["fix"]
        and "10.231.0.2" in hostname["fix"]
    ), hostname
    assert bridge not in hostname["fix"]
    assert (
        checks["host_address"]["data"] == "10.231.0.2"
    )  # cluster/base.py's master address when the hostname is loopback
    # with --master-addr, the route to it decides (here through the second veth, not the default
    # route)
    checks = _doctor_as_loopback_host(n1, str(hosts), "--master-addr", "10.233.0.9")
    assert checks["network.interfaces"]["data"]["outward"] == {
        "interface": second,
        "address": "10.233.0.2",
        "via": "the route to 10.233.0.9",
    }
    assert f"NCCL_SOCKET_IFNAME={second} " in checks["network.hostname"]["fix"]
    assert checks["network.master"]["data"]["interface"] == second
