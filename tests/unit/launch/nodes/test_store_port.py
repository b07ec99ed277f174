"""launch/nodes/store_port.py: rank 0's store port stays held from torch's choice to rank 0's bind.

Real torch: the rendezvous's own ``RendezvousStoreInfo.build`` chooses the port, then every
source port the kernel can give is taken by loopback connections (what a busy machine's gloo
meshes do), then rank 0's TCPStore binds.  In a network namespace of its own with 16 ephemeral
ports, so the race torch leaves open (pytorch#126510) is lost every time, not once in a suite.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = r"""
import datetime as dt, socket, subprocess, sys
open("/proc/sys/net/ipv4/ip_local_port_range", "w").write("40000 40015")
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
import torch.distributed as dist
from torch.distributed.elastic.rendezvous.api import RendezvousStoreInfo
if sys.argv[1] == "held":
    from distrain.launch.nodes import store_port
    store_port.install()
server = socket.socket()
server.bind(("127.0.0.1", 50000))
server.listen(64)
port = RendezvousStoreInfo.build(0, dist.HashStore(), "127.0.0.1").master_port
sources = []
while True:  # until the kernel has no source port left to give
    conn = socket.socket()
    try:
        conn.connect(("127.0.0.1", 50000))
    except OSError:
        break
    sources.append(conn)
used = sorted(c.getsockname()[1] for c in sources)
try:
    dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                  timeout=dt.timedelta(seconds=5))
    bound = "bound"
except RuntimeError as err:
    bound = "EADDRINUSE" if "in use" in str(err) else type(err).__name__
print(bound, port in used, len(used))
"""


def _probe(mode: str) -> list[str]:
    result = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", PROBE, mode],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.split()


@pytest.fixture(scope="module", autouse=True)
def namespaces() -> None:
    # a namespace of its own, and its source-port range writable (a container may mount
    # /proc/sys read-only)
    probe = "echo '40000 40015' > /proc/sys/net/ipv4/ip_local_port_range"
    if subprocess.run(
        ["unshare", "-n", "sh", "-c", probe], capture_output=True, timeout=30
    ).returncode:
        pytest.skip("needs a network namespace with a writable ip_local_port_range (root)")


def test_the_held_port_is_no_source_port_and_rank_0_binds_it() -> None:
    bound, taken, count = _probe("held")
    assert (bound, taken) == ("bound", "False")
    assert count == "15"  # every other port of the 16 went to a connection


def test_without_it_torch_frees_the_port_and_rank_0_loses_it() -> None:
    """The race this module closes, shown on torch alone: the guard above is not vacuous."""
    bound, taken, count = _probe("torch")
    assert (bound, taken, count) == ("EADDRINUSE", "True", "16")
