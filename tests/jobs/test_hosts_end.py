"""`distrain run --hosts`: how a failed job ends when its hosts end at different times.

Each host is a network namespace running a real sshd (helpers/ssh_cluster.py), as in
test_hosts.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO, python
from helpers.ssh_cluster import (
    SshCluster,
    assert_clean as _assert_clean,
    ssh_cluster,
    start_job as _start,
    wait_job as _wait,
)

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]

RUN = [python(), "-m", "distrain.cli", "run"]
CKPT = str(REPO / "tests" / "scripts" / "ckpt_worker.py")


@pytest.fixture
def cluster2(tmp_path: Path) -> Iterator[SshCluster]:
    """Two ssh hosts and a launching machine."""
    with ssh_cluster(2, tmp_path) as made:
        yield made


def test_a_host_still_training_when_its_peer_failed_gives_the_resume_hint(
    cluster2: SshCluster, tmp_path: Path
) -> None:
    """Rank 0 (h0) is still inside step 10 (--linger) when rank 1's host h1 has failed and ended:
    h0 is left to find the loss at its next collective and say its own verdict, which holds the
    resume hint, instead of being stopped at once (SIGTERM in the middle of its verdict: the
    last line lost the hint under load, CI).  No SIGTERM reached it: no checkpoint line."""
    log = tmp_path / "job.log"
    argv = RUN + ["--hosts", "h0:1,h1:1", *cluster2.ssh_opts, CKPT, "--dir", str(tmp_path / "c"),
                  "--every", "4", "--raise-at", "10", "--linger", "5",
                  "--out", str(tmp_path / "m.pt")]  # fmt: skip
    assert _wait(_start(cluster2, argv, log), log, 200) == 1
    lines = log.read_text().rstrip().splitlines()
    assert lines[-1].startswith("distrain run: job failed: host h1: rank 1 (pid ") and lines[
        -1
    ].endswith(
        "ValueError: injected failure on rank 1; rerun the same command to resume from step 8 "
        f"({tmp_path / 'c' / 'step_00000008'})"
    ), lines[-6:]
    assert not [ln for ln in lines if "SIGTERM" in ln], lines[-6:]
    _assert_clean(cluster2)
