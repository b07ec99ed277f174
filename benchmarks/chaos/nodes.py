"""The two-node kinds' machines: network namespaces joined by veth (tests/helpers/netns_hosts.py).

Each trial of a two-node kind gets its own pair of namespaces, made before its first start and
deleted after its verdict. Every namespace made is also kept in ``LIVE`` until deleted, so the
campaign deletes them when it ends by a crash, a SIGTERM or Ctrl-C (:func:`delete_all`). The
oracle asks each namespace which processes are still in it (``ip netns pids``): any is a
leftover. Links break or slow down by `ip link set … down` and a `tc … tbf` qdisc; netem (delay,
loss) does not exist on these kernels, tbf does.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
# forget and named_semaphores: for memory_faults.py, which reaches tests/helpers through here
from helpers.netns_hosts import (  # noqa: E402
    Hosts,
    forget,  # noqa: F401
    hosts,
    machine_dies,
    named_semaphores,  # noqa: F401
)

#: the namespaces made and not yet deleted, for the campaign's last cleanup
LIVE: dict[str, Hosts] = {}
#: the issue's throttle: 1 Mbit/s, a 32 kbit bucket, packets dropped after 400 ms in the queue
TBF = ["root", "tbf", "rate", "1mbit", "burst", "32kbit", "latency", "400ms"]


@contextmanager
def machines(n: int) -> Iterator[Hosts]:
    """`n` namespace hosts for one trial; deleted (their processes killed) afterwards."""
    with hosts(n) as made:
        LIVE[made.hub] = made
        try:
            yield made
        finally:
            kill_inside(made)
            LIVE.pop(made.hub, None)


def pids_inside(made: Hosts) -> list[int]:
    """Every process still inside one of the hosts' namespaces."""
    found = []
    for ns in [*made.names, made.hub]:
        res = subprocess.run(
            ["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30, check=False
        )
        found += [int(p) for p in res.stdout.split()]
    return found


def kill_inside(made: Hosts) -> list[int]:
    """SIGCONT and SIGKILL every process inside the hosts' namespaces; their pids."""
    pids = pids_inside(made)
    machine_dies(pids, (signal.SIGCONT, signal.SIGKILL))  # their semaphores' names go too
    return pids


def delete_all() -> None:
    """Kill the processes in, and delete, every namespace the campaign still has (its last act)."""
    for made in list(LIVE.values()):
        kill_inside(made)
        for ns in [*made.names, made.hub]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30, check=False)
        LIVE.pop(made.hub, None)


def link(made: Hosts, i: int, up: bool) -> None:
    """Host i's link down or up, both ends (the cable pulled, then put back)."""
    state = "up" if up else "down"
    for ns, dev in ((made.names[i], made.iface), (made.hub, made.ports[i])):
        subprocess.run(
            ["ip", "-n", ns, "link", "set", dev, state], check=True, capture_output=True, timeout=30
        )


def throttle(made: Hosts, i: int, on: bool) -> None:
    """Host i's link limited to 1 Mbit/s both ways (a tbf qdisc at each end), or the limit off."""
    for ns, dev in ((made.names[i], made.iface), (made.hub, made.ports[i])):
        if on:
            argv = ["tc", "qdisc", "add", "dev", dev, *TBF]
        else:
            argv = ["tc", "qdisc", "del", "dev", dev, "root"]
        subprocess.run(
            ["ip", "netns", "exec", ns, *argv], check=on, capture_output=True, timeout=30
        )
