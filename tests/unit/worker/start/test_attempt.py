"""start/attempt.py: every rank agrees on the attempt, whatever its node's restart count says.

Ranks are threads on torch's in-memory HashStore (no socket): the store outlives attempts the
way torch's static rendezvous and torchrun's shared c10d store do.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest
import torch.distributed as dist

from distrain.errors import DistrainError
from distrain.worker.start.attempt import agree_attempt, attempt_prefix

TIMEOUT = dt.timedelta(seconds=20)


def _attempt(store: dist.Store, world: int, order: list[int]) -> dict[int, int]:
    """Start ranks in `order` (one thread each); return each rank's agreed attempt."""
    found: dict[int, int] = {}

    def rank(r: int) -> None:
        found[r] = agree_attempt(store, r, world, TIMEOUT, lambda: store)

    threads = [threading.Thread(target=rank, args=(r,)) for r in order]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return found


@pytest.mark.parametrize("order", [[0, 1, 2], [2, 1, 0], [1, 0, 2]])
def test_every_rank_gets_the_same_attempt_whoever_starts_first(order: list[int]) -> None:
    store = dist.HashStore()
    assert _attempt(store, 3, order) == {0: 0, 1: 0, 2: 0}
    assert _attempt(store, 3, order[::-1]) == {0: 1, 1: 1, 2: 1}


def test_a_failed_attempt_leaves_nothing_the_next_one_reads() -> None:
    store = dist.HashStore()
    assert _attempt(store, 2, [0, 1]) == {0: 0, 1: 0}
    # attempt 1 dies after rank 1 asked and before rank 0 started: its request stays unanswered
    store.add("distrain/attempts/asked", 1)
    store.set(f"distrain/attempts/ask/{int(store.add('distrain/attempts/asked', 0))}", "1 dead")
    # the next attempt (elastic: one more node) agrees on a number no earlier attempt used
    assert _attempt(store, 4, [3, 1, 0, 2]) == {0: 1, 1: 1, 2: 1, 3: 1}


def test_a_lone_rank_needs_nobody() -> None:
    store = dist.HashStore()
    assert agree_attempt(store, 0, 1, TIMEOUT, lambda: store) == 0
    assert agree_attempt(store, 0, 1, TIMEOUT, lambda: store) == 1


def test_no_rank_0_is_one_line_naming_the_wait() -> None:
    store = dist.HashStore()
    store.set_timeout(dt.timedelta(seconds=0.2))
    with pytest.raises(
        DistrainError, match="rank 1: rank 0 did not say which attempt this is within 0.2 s"
    ):
        agree_attempt(store, 1, 2, dt.timedelta(seconds=0.2), lambda: store)


def test_the_prefix_names_the_attempt() -> None:
    assert attempt_prefix(3) == "distrain/attempt_3"
