"""`distrain run --hosts … --nnodes 1:3` with a per-process batch: a host lost, no sample lost.

Three ssh hosts (namespaces with a real sshd, helpers/ssh_cluster.py), one rank each, a
per-process batch of 4: a global batch of 12, then 8 once h2's ssh session is SIGKILLed.  The
job goes on from its checkpoint at the next sample of the epoch (often between two global
batches of 8: the position is a multiple of 12), and every epoch trains on its permutation once.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import REPO, python
from helpers.samples import batches_in_epoch, check_epochs, committed
from helpers.ssh_cluster import assert_clean, ssh_cluster, ssh_of, start_job, until, wait_job

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(400)]

SCRIPT = str(REPO / "tests" / "scripts" / "elastic_samples.py")
SAMPLES, EPOCHS = 240, 2


def _trained_on_three(samples: Path, ckpt: Path) -> bool:
    """A start on 3 ranks made a checkpoint 2 steps past where it resumed."""
    if not samples.exists() or not ckpt.exists():
        return False
    starts = committed(samples)[1]
    saved = [int(p.name.split("_")[1]) for p in ckpt.glob("step_*")]
    return bool(starts and saved and starts[-1]["world"] == 3) and max(saved) >= (
        starts[-1]["resumed"] + 2
    )


def test_a_host_lost_mid_epoch_and_the_rest_of_the_epoch_is_trained_once(
    tmp_path: Path,
) -> None:
    with ssh_cluster(3, tmp_path) as c:
        log, ckpt, samples = tmp_path / "job.log", tmp_path / "ckpt", tmp_path / "samples.jsonl"
        argv = [python(), "-m", "distrain.cli", "run", "--hosts", "h0:1,h1:1,h2:1", "--nnodes",
                "1:3", *c.ssh_opts, SCRIPT, "--dir", str(ckpt), "--samples-log", str(samples),
                "--samples", str(SAMPLES), "--epochs", str(EPOCHS)]  # fmt: skip
        proc = start_job(c, argv, log)
        until(lambda: _trained_on_three(samples, ckpt), proc, log, timeout=200)
        ssh_of(proc, "h2").kill()
        code = wait_job(proc, log, 300)
        text = log.read_text()
        assert code == 0, text[-4000:]
        steps = check_epochs(samples, SAMPLES, EPOCHS)
        assert committed(samples)[1][-1]["world"] == 2, text[-4000:]
        assert batches_in_epoch(steps, 0) == [12, 8], steps
        assert re.search(
            r"distrain: resumed at sample \d+ of epoch 0 with global batch 8 \(was 12: the "
            r"world changed 3 → 2\)",
            text,
        ), text[-4000:]
        assert_clean(c)
