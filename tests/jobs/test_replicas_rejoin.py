"""A group back from its own checkpoint at the step a live group is at copies the live group.

The live group's step that did not commit consumed a batch of its loader, the checkpoint holds
the positions of the last commit: two groups at one step with two states.  TorchFT heals only a
group behind, so the group came back "from its own state", the groups trained on other batches
to the end, and only the end check failed the job (the launcher-death test under load, after a
``got exception in pg configure``).  The order is forced: group 1 saves every step and dies in
step 5's backward, while group 0 waits in its all-reduce (group 0's step 5 does not commit);
group 0 then waits until group 1's replacement restores, so both meet at step 5.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from helpers import SCRIPTS, python, run

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchft") is None,
    reason="torchft not installed (pip install 'distrain[ft]')",
)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("late", "every"),
    [(0, 1), (6, 1), (6, 0)],
    ids=["configured", "configure-failed", "configure-failed-no-checkpoint"],
)
def test_a_group_back_from_disk_at_the_live_step_copies_the_live_group(
    tmp_path: Path, late: int, every: int
) -> None:
    """Group 1 is back from its checkpoint at step 5, group 0 at step 5 after a step it did not
    commit: group 1 heals from group 0 (loader positions included) and the groups end equal.
    `configure-failed`: the replacement configures TorchFT's process group 6 s late (a loaded
    machine), past the survivor's 5 s gloo bound: that first quorum copies nothing, and the
    next one must (`…-no-checkpoint`: the replacement starts at step 0, and the copy in a later
    step's quorum could not move its loader, whose loop had begun).  Before, group 1 "rejoined
    at step 5 (0) from its own state" and the job ended with "replica groups ended with
    different states"."""
    out = tmp_path / "out"
    out.mkdir()
    cmd = [python(), "-m", "distrain.cli", "run", "--cpu", "--replicas", "2", "-n", "1",
           str(SCRIPTS / "replica_job.py"), "--out", str(out), "--dir", str(tmp_path / "ckpt"),
           "--steps", "20", "--every", str(every), "--kill-at", "5", "--kill-group", "1",
           "--kill-in-backward", "--hold-failed", f"5:0:{out}/restoring.1.0.1",
           "--slow-configure", str(late)]  # fmt: skip
    res = run(cmd, timeout=280)
    assert res.returncode == 0, res.stderr[-4000:]
    resumed = [tuple(map(int, line.split())) for line in (out / "resumed").read_text().splitlines()]
    assert [step for _, group, _, step in resumed if group == 1] == [0, 5], resumed  # healed
    err = res.stderr
    assert "distrain run: replica group 1 healed from group 0 at step 5" in err, err[-4000:]
    assert "replica groups 0, 1 ended at step 20 with equal states" in err, err[-4000:]
    finals = {
        int(p.name.split(".")[1]): json.loads(p.read_text()) for p in out.glob("final.*.json")
    }
    assert finals[0]["step"] == finals[1]["step"] == 20
    assert finals[0]["params"] == finals[1]["params"], finals
