"""`distrain run --hosts … --replicas R`: groups over ssh hosts; a lost host is a lost group.

Two namespace hosts with a real sshd each (helpers/ssh_cluster.py), one replica group per host,
TorchFT's lighthouse on host 0 at the address host 1 reaches it by.  Host 1's ssh session is
SIGKILLed mid-run: its watcher stops its node, host 0's group trains on in the same process to
the last step, and no process is left on either host.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import REPO, python
from helpers.ssh_cluster import (
    assert_clean,
    ssh_cluster,
    ssh_of,
    start_job,
    until,
    wait_job,
)

pytestmark = [pytest.mark.netns, pytest.mark.timeout(420)]

RUN = [python(), "-m", "distrain.cli", "run"]
SCRIPT = str(REPO / "tests" / "scripts" / "replica_job.py")
STEPS = 40


def test_a_lost_host_is_a_lost_replica_group_and_the_other_trains_on(tmp_path: Path) -> None:
    out, log = tmp_path / "out", tmp_path / "job.log"
    out.mkdir()
    with ssh_cluster(2, tmp_path) as c:
        argv = RUN + ["--hosts", "h0:1,h1:1", "--replicas", "2", *c.ssh_opts, SCRIPT, "--out",
                      str(out),
                      "--dir", str(tmp_path / "ckpt"), "--steps", str(STEPS), "--step-sleep",
                      "0.1"]  # fmt: skip
        proc = start_job(c, argv, log)
        # both groups took their first step together, across the hosts' link
        # (TorchFT's start takes minutes at load 20 on 2 cores: 120 s were once not enough)
        until(lambda: (out / "first.1.0").exists() and (out / "first.0.0").exists(), proc, log, 240)
        ssh_of(proc, "h1").kill()
        code = wait_job(proc, log, 240)
        text = log.read_text()
        assert code == 0, text[-4000:]
        first_host = c.hosts.addrs[0]
        assert (
            "distrain run: 2 hosts (h0, h1), 2 replica groups of 1, 1 per host; master h0 at "
            + first_host
            in text
        ), text[-3000:]
        assert f"(groups 0–0 on node 0/2); TorchFT lighthouse on {first_host}:" in text
        assert (
            "distrain run: host h1 lost: its ssh session was killed (SIGKILL); its "
            "replica group(s) 1 "
            "with it, the groups of 1 host(s) train on" in text
        ), text[-3000:]
        assert text.rstrip().endswith("distrain run: job finished on 1 of 2 host(s); lost: h1")
        # group 0 never restarted and trained to the last step
        starts = [line.split() for line in (out / "starts").read_text().splitlines()]
        assert [group for _, group, _ in starts].count("0") == 1, starts
        assert (
            out / "first.0.0"
        ).read_text() == "0 2\n"  # its first step: both groups, across hosts
        final = json.loads((out / "final.0.0.json").read_text())
        assert final["step"] == STEPS, final
        # host 1 said its group ended for good: group 0 neither waited for it at its end
        # (DISTRAIN_FT_LINGER) nor host 0 kept the lighthouse up for host 1
        assert "ended without meeting" not in text and "lighthouse stays up" not in text, text[
            -3000:
        ]
        assert_clean(c)
