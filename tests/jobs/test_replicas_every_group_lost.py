"""Every replica group lost at once: the group back first waits for the one with the newer state.

Each group restarts from its own newest checkpoint, and those differ: a group that healed after its
last save has an older one.  The group back first used to train alone from its older step, so the
other, back later with a newer state, found it at the same step with another history (two states, no
heal: `test_two_by_two_…_every_group_killed` ended with "replica groups ended with different states"
once under load) or ahead (the newer state thrown away).  Here the order is forced: group 1 is
killed at step 12 (its last save: step 10), comes back after group 0 saved step 40 (group 0 waits at
step 42 until it restores) and heals from group 0, then both are killed at their first step together
at or after 45; group 0's restart is held 10 s, so group 1 (disk: step 10) is back first.
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


@pytest.mark.timeout(400)
def test_the_group_back_first_heals_from_the_newer_state(tmp_path: Path) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    out.mkdir()
    group0_saved_40 = ckpt / "replica_0" / "step_00000040"
    cmd = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "1",
           str(SCRIPTS / "replica_job.py"),
           "--out", str(out), "--dir", str(ckpt), "--steps", "80", "--every", "10",
           "--kill", "12:1:0", "--hold-start", f"1:1:{group0_saved_40}", "--hold",
           f"42:0:{out}/restoring.1.0.1",
           "--kill", "45:0:0", "--kill", "45:1:0", "--hold-start", "0:1:10"]  # fmt: skip
    res = run(cmd, timeout=360, env={"DISTRAIN_FT_START_WAIT": "120"})
    assert res.returncode == 0, res.stderr[-4000:]
    assert "0/2 groups continue" in res.stderr, res.stderr[-4000:]  # the second fault took both
    resumed = [tuple(map(int, line.split())) for line in (out / "resumed").read_text().splitlines()]
    by_group = {g: [step for _, gg, _, step in resumed if gg == g] for g in (0, 1)}
    assert len(by_group[0]) == 2 and len(by_group[1]) == 3, resumed
    assert by_group[1][1] >= 40, resumed  # the first replacement healed from group 0
    # after the second fault: group 0 from its disk (step 40 or later); group 1, back first with
    # its disk's step 10, waited for it and healed from it instead of training alone from there
    assert by_group[0][1] >= 40 and by_group[1][2] == by_group[0][1], resumed
    finals = {
        int(p.name.split(".")[1]): json.loads(p.read_text()) for p in out.glob("final.*.json")
    }
    assert {f["step"] for f in finals.values()} == {80}, finals
    assert finals[0]["params"] == finals[1]["params"], finals
