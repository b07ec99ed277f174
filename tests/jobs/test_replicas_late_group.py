"""A replica group lost after every other group ended: the job still ends with the right state.

Chaos campaign seed 9103 trial 14: the README's script (no checkpoint) under `--replicas 2 -n 1`,
group 0's worker SIGKILLed at step 80, the job's last, after group 1 had ended.  Group 1 had met
group 0 twice at the final step and left; group 0's replacement found no live group, "rejoined at
step 0 from its own state", trained 80 steps alone and the job failed at its very end with
``replica groups ended with different states``.  Now no group leaves before every other group
reported its final state (its done mark, worker/replicas/rejoin.py), and a group lost after its
mark ends its replacement at once: its run was over.  Forced here: group 0's process, at its exit
after distrain's end, waits until group 1 ended, then SIGKILLs itself; the job must end with the
uninterrupted run's state, exit code 0.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from helpers import SCRIPTS, python, run

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchft") is None,
    reason="torchft not installed (pip install 'distrain[ft]')",
)

ENDED = re.compile(
    r"replica groups 0, 1 ended at step 30 with equal states \(rank 0: sha256 (\w+)\)"
)


def _job(tmp_path: Path, name: str, *extra: str) -> tuple[Path, str, int]:
    out = tmp_path / name
    out.mkdir()
    cmd = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "1",
           str(SCRIPTS / "replica_job.py"), "--out", str(out),
           "--dir", str(tmp_path / f"{name}.ckpt"), "--steps", "30", *extra]  # fmt: skip
    res = run(cmd, timeout=170)
    return out, res.stderr, res.returncode


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The uninterrupted run's final state (rank 0's sha256 on the launcher's end line)."""
    _, err, code = _job(tmp_path_factory.mktemp("late"), "reference")
    assert code == 0, err[-3000:]
    ended = ENDED.search(err)
    assert ended, err[-3000:]
    return ended[1]


@pytest.mark.timeout(400)
def test_a_group_lost_after_the_others_ended_ends_with_their_state(
    tmp_path: Path, reference: str
) -> None:
    """Killed at its exit after group 1 ended: the replacement ends at once (its run was over)."""
    out, err, code = _job(tmp_path, "faulted", "--kill-at-exit", "0:1")
    assert (out / "killed_at_exit.0").exists(), err[-3000:]  # the fault hit, after group 1 ended
    assert "replica group 0 lost at step 30" in err, err[-3000:]
    assert code == 0, err[-3000:]
    said = "replica group 0's replacement ends at once: the group was lost after its run was over"
    assert said in err, err[-3000:]
    assert "rejoined at step 0" not in err, err[-3000:]  # it did not retrain alone
    ended = ENDED.search(err)
    assert ended and ended[1] == reference, err[-3000:]  # the uninterrupted run's state
    assert len((out / "starts").read_text().splitlines()) == 2  # the replacement ran no script


@pytest.mark.timeout(400)
def test_a_group_lost_before_its_final_report_heals_from_a_group_that_ended_its_script(
    tmp_path: Path, reference: str
) -> None:
    """Killed at distrain's end after it reported its final state, once group 1 had reported
    its own (before, group 1 left then): group 1 still answers quorums, the replacement heals
    from it at the final step."""
    out, err, code = _job(tmp_path, "faulted", "--kill-before-done", "0:1")
    assert (out / "killed_before_done.0").exists(), err[-3000:]
    assert "replica group 0 lost at step 30" in err, err[-3000:]
    assert code == 0, err[-3000:]
    assert "replica group 0 healed from group 1 at step 30" in err, err[-3000:]
    ended = ENDED.search(err)
    assert ended and ended[1] == reference, err[-3000:]
