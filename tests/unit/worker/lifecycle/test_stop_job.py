"""What stops every node of a static multi-node job (lifecycle/stop_job.py), one-SIGTERM claim."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrain.coordination.stop_claim import STOP_MARK, claim_stop
from distrain.settings import Settings
from distrain.worker.lifecycle.stop_job import frozen_node, stop_for_frozen, watchdog_reason


@pytest.mark.parametrize(
    ("frozen", "local", "world", "node"),
    [
        ({1}, 1, 2, 1),  # -n 1: the frozen rank is its whole node
        ({0}, 1, 2, 0),
        ({3}, 2, 4, None),  # rank 2 lives: it exits 124 and its agent restarts node 1
        ({2, 3}, 2, 4, 1),
        (set(), 1, 2, None),
    ],
)
def test_a_node_counts_as_frozen_only_when_all_its_ranks_are(
    frozen: set[int], local: int, world: int, node: int | None
) -> None:
    assert frozen_node(frozen, world, local) == node


def test_a_verdict_becomes_a_last_line_without_the_stack_sentence() -> None:
    verdict = (
        "distrain watchdog: no training progress for 8 s; stuck: rank 1 (node 1, host h, pid 7) "
        "at step 5 in x.py:3 in f — stopped answering (process frozen or gone); rank 0 waits for "
        "it. Every rank's Python stack follows on its stderr; exiting with code 124."
    )
    assert watchdog_reason(verdict) == (
        "the watchdog: no training progress for 8 s; stuck: rank 1 (node 1, host h, pid 7) at "
        "step 5 in x.py:3 in f — stopped answering (process frozen or gone); rank 0 waits for it"
    )


def test_only_a_static_multi_node_job_stops_on_a_frozen_verdict() -> None:
    one_node = Settings.read({"LOCAL_WORLD_SIZE": "1"})
    # one node: the agent restarts the group (the frozen rank with it); nothing is stopped
    assert (
        stop_for_frozen("… stopped answering (process frozen or gone) …", {1}, 2, one_node) is False
    )
    static = Settings.read({"LOCAL_WORLD_SIZE": "1", "DISTRAIN_STATIC_STORE": "10.0.0.1:29500"})
    # a rank that is stuck but alive exits 124 itself: every agent restarts, nothing stops
    assert (
        stop_for_frozen("… is not in a collective while the others wait …", {1}, 2, static) is False
    )


def test_the_stop_mark_is_claimed_once(tmp_path: Path) -> None:
    assert claim_stop(str(tmp_path)) is True
    assert claim_stop(str(tmp_path)) is False
    assert sorted(p.name for p in tmp_path.iterdir()) == [STOP_MARK]
    assert claim_stop(None) is True  # nothing to claim: the caller signals
    assert claim_stop(str(tmp_path / "gone")) is True  # the launcher's folder went: signal anyway


def test_the_launcher_reads_why_a_rank_stopped_it_from_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from distrain.events import emit
    from distrain.launch.report.job_summary import stop_reason

    assert stop_reason(str(tmp_path)) is None
    monkeypatch.setenv("DISTRAIN_JOB_DIR", str(tmp_path))
    emit("stop", reason="node 1 (rank 1) did not rejoin attempt 1 within 30 s")
    assert stop_reason(str(tmp_path)) == "node 1 (rank 1) did not rejoin attempt 1 within 30 s"
