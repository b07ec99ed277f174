"""A restarted attempt of a multi-node static job waits for its peers a bounded time, then stops.

A static rendezvous has no membership signal: when one node's launcher dies (or a rank of one
node fails where the other node's agent sees nothing), the surviving node's agent restarts its
own ranks, and those wait for peers that never come, for the init timeout (10 min), again after
each restart.  A first attempt keeps that timeout (nodes may start minutes apart); a restarted
one (this node's agent counted a restart) waits ``DISTRAIN_REJOIN_TIMEOUT`` seconds (default
60) for every rank to check in under the attempt's prefix.  On expiry the rank names the ranks
(and nodes) that never came back and stops its node's `distrain run`, and every other node's
(worker/lifecycle/stop_job.py), whose last lines say so: a restart could only wait again.
Rerunning the job on every node resumes it.
"""

from __future__ import annotations

import datetime as dt

import torch.distributed as dist

from distrain.errors import DistrainError, recurring
from distrain.settings import Settings
from distrain.worker.lifecycle.stop_job import stop_static_job

_NS = "distrain/rejoined"


def rejoin_bound(seconds: float, settings: Settings) -> float | None:
    """`seconds` in a restarted attempt of a multi-node static job under `distrain run`; None."""
    if settings.launcher != "distrain-run" or settings.rdzv_endpoint:
        return None  # not distrain run, or a c10d rendezvous (its agents see membership changes)
    if settings.restart_count == 0:
        return None
    return seconds if settings.group_world_size > 1 else None


def await_peers(store: dist.Store, rank: int, world: int, seconds: float) -> None:
    """Check in under this attempt's prefix and wait until every rank did (at most `seconds`)."""
    store.set(f"{_NS}/{rank}", "1")
    store.wait([f"{_NS}/{r}" for r in range(world)], dt.timedelta(seconds=max(1.0, seconds)))


def missing_ranks(store: dist.Store | None, world: int) -> list[int]:
    """The ranks that did not check in; rank 0 when its store cannot be asked (it went with it)."""
    if store is None:
        return [0]
    try:
        return [r for r in range(world) if not store.check([f"{_NS}/{r}"])] or [0]
    except Exception:  # rank 0's store is gone: rank 0 is the one missing
        return [0]


def describe(missing: list[int], local_world: int) -> str:
    """``node 1 (rank 1)`` / ``node 1 (ranks 2, 3), node 2 (rank 4)`` (static: in order)."""
    nodes: dict[int, list[int]] = {}
    for r in missing:
        nodes.setdefault(r // max(1, local_world), []).append(r)
    parts = []
    for node, ranks in sorted(nodes.items()):
        label = "rank" if len(ranks) == 1 else "ranks"
        parts.append(f"node {node} ({label} {', '.join(map(str, ranks))})")
    return ", ".join(parts)


def stop(missing: list[int], local_world: int, seconds: float, settings: Settings) -> DistrainError:
    """Stop this node's launcher for good and return the error the rank raises."""
    attempt = settings.restart_count
    who = describe(missing, local_world)
    reason = (
        f"{who} did not rejoin attempt {attempt} within {seconds:g} s (DISTRAIN_REJOIN_TIMEOUT)"
    )
    stop_static_job(reason, settings)  # every node: a frozen rank's own agent would wait for good
    return recurring(DistrainError(reason))
