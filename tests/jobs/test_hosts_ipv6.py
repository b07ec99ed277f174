"""`distrain run --hosts` to IPv6 addresses over real sshd (helpers/ssh_cluster.py hosts, each
given an IPv6 address too): ssh goes over IPv6; the nodes talk IPv4, so the job needs --iface,
and says so in one line without it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers import python
from helpers.ssh_cluster import assert_clean, ssh_cluster

pytestmark = [
    pytest.mark.netns,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not os.path.exists("/proc/net/if_inet6"), reason="this kernel has no IPv6 (ipv6.disable=1)"
    ),
]

SCRIPT = ("import os\nprint('node', os.environ['GROUP_RANK'], 'master', "
          "os.environ['MASTER_ADDR'], flush=True)\n")  # fmt: skip


def test_ipv6_hosts_start_a_job_whose_nodes_talk_ipv4(tmp_path: Path) -> None:
    script = tmp_path / "show.py"
    script.write_text(SCRIPT)
    with ssh_cluster(2, tmp_path) as c:
        v6 = [f"fd00:200::{i + 1}" for i in range(2)]
        for i, addr in enumerate(v6):  # nodad: usable at once, no duplicate-address wait
            subprocess.run(["ip", "-n", c.hosts.names[i], "addr", "add", f"{addr}/64", "dev",
                            "eth0", "nodad"],
                           check=True, timeout=30)  # fmt: skip
        subprocess.run(["ip", "-n", c.hosts.names[2], "addr", "add", "fd00:200::99/64", "dev",
                        "eth0", "nodad"],
                       check=True, timeout=30)  # fmt: skip
        argv = [python(), "-m", "distrain.cli", "run", "--hosts", f"[{v6[0]}]:1,[{v6[1]}]:1",
                *c.ssh_opts]  # fmt: skip
        bad = subprocess.run(c.launch_cmd([*argv, str(script)]), capture_output=True, text=True,
                             timeout=120)  # fmt: skip
        assert bad.returncode == 2 and bad.stderr == (
            f"distrain run: error: host {v6[0]}: the others reach it at IPv6 {v6[0]}, "
            "but a job's nodes "
            "talk IPv4: give --iface NAME, an interface with an IPv4 address\n"
        ), bad.stderr
        res = subprocess.run(c.launch_cmd([*argv, "--iface", "eth0", str(script)]),
                             capture_output=True, text=True, timeout=240)  # fmt: skip
        out = res.stdout + res.stderr
        assert res.returncode == 0, out[-3000:]
        for i, addr in enumerate(v6):  # each host's output under its IPv6 name
            assert f"[{addr}] node {i} master {c.hosts.addrs[0]}" in out, out[-3000:]
        assert_clean(c)
