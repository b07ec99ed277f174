"""Which attempts get the rejoin bound, and how the missing ranks are named (start/store.py)."""

from __future__ import annotations

import pytest

from distrain.settings import Settings
from distrain.worker.start.store import describe, rejoin_bound

STATIC_RESTART = {
    "DISTRAIN_LAUNCHER": "distrain-run",
    "TORCHELASTIC_RESTART_COUNT": "1",
    "GROUP_WORLD_SIZE": "2",
}


@pytest.mark.parametrize(
    ("env", "bound"),
    [
        (STATIC_RESTART, 60.0),
        (
            {**STATIC_RESTART, "TORCHELASTIC_RESTART_COUNT": "0"},
            None,
        ),  # first attempt: init timeout
        ({**STATIC_RESTART, "GROUP_WORLD_SIZE": "1"}, None),  # one node: no peer node to lose
        (
            {**STATIC_RESTART, "DISTRAIN_RDZV_ENDPOINT": "h:29400"},
            None,
        ),  # c10d: agents see membership
        ({**STATIC_RESTART, "DISTRAIN_LAUNCHER": ""}, None),  # plain torchrun: nothing to stop
    ],
)
def test_only_a_restarted_attempt_of_a_multi_node_static_job_is_bounded(
    env: dict[str, str], bound: float | None
) -> None:
    assert rejoin_bound(60.0, Settings.read(env)) == bound


def test_missing_ranks_are_named_with_their_nodes() -> None:
    assert describe([1], 1) == "node 1 (rank 1)"
    assert describe([2, 3, 4], 2) == "node 1 (ranks 2, 3), node 2 (rank 4)"
