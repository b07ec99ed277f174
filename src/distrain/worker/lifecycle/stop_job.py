"""A failure that every restart would repeat: stop the whole job instead of restarting it.

torch's elastic agent restarts a failed worker group whatever the failure, until
``--max-restarts`` runs out: a checkpoint that does not fit the job (``saved with a dataset of
96 samples, this one has 120``) was refused again on every attempt.  A rank whose error recurs
(``DistrainError.recurs``) closes the job's c10d rendezvous before it exits, through torch's
public ``RendezvousHandler.set_closed()``: the agent of every node then finds the rendezvous
closed at its next round and ends, and no attempt starts again.  The reason is left in the
rendezvous store, where `distrain run` reads it for its last line on every node.

Only under `distrain run` with a c10d rendezvous (it passes the endpoint, DISTRAIN_RDZV_ENDPOINT):
a static rendezvous has nothing to close.  There :func:`stop_static_job` leaves the reason in
the agents' store on node 0 (DISTRAIN_STATIC_STORE), where every node's `distrain run` watches
for it (launch/nodes/stop_watch.py), and stops the node's own `distrain run` at once: a restarted
attempt whose peers never came back (worker/start/store.py), a watchdog's verdict on a frozen rank,
whose own node's agent sees it running and would otherwise wait for good.
"""

from __future__ import annotations

import datetime as dt
import os
import signal

from distrain.coordination.stop_claim import JOB_STOPPED_KEY, claim_stop, stop_key
from distrain.events import emit
from distrain.log import get_logger
from distrain.net import split_endpoint
from distrain.settings import Settings

_log = get_logger("failure")

#: bound on reaching the rendezvous store (it is up: this rank's agent rendezvoused through it)
STORE_TIMEOUT_S = 10.0


def stop_the_job(reason: str, settings: Settings) -> bool:
    """Close this job's rendezvous so no node restarts it; False when there is none to close."""
    endpoint, run_id = settings.rdzv_endpoint, settings.run_id
    if not endpoint or not run_id:
        return False
    try:
        import torch.distributed as dist
        from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
            C10dRendezvousBackend,
        )
        from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

        host, port = split_endpoint(endpoint)
        timeout = dt.timedelta(seconds=STORE_TIMEOUT_S)
        store = dist.TCPStore(host, port, is_master=False, timeout=timeout, wait_for_workers=False)
        store.set(stop_key(run_id), reason)
        backend = C10dRendezvousBackend(store, run_id)
        DynamicRendezvousHandler.from_backend(run_id, store, backend, 1, 1).set_closed()
        return True
    except Exception as err:  # the job then restarts as before; say why it could not stop
        _log.warning(f"distrain: could not stop the job's rendezvous ({type(err).__name__}: {err})")
        return False


def stop_this_node(reason: str, settings: Settings) -> bool:
    """Stop this node's `distrain run` so its agent restarts nothing; False when there is none.

    A static rendezvous has no shared state to close.  The first of the node's ranks and its
    launcher's watch to claim the stop (stop_claim.STOP_MARK) signals the launcher; a rank first
    reports why in the job's event stream (a ``stop`` event: the launcher's last line says it).
    On SIGTERM torch's agent stops its workers and ends, as on a user's SIGTERM.  Only an
    ancestor of this process is signalled.
    """
    pid, folder = settings.launcher_pid or "", settings.job_dir
    if not pid.isdigit():
        return False
    import psutil

    try:
        if int(pid) not in {p.pid for p in psutil.Process().parents()}:
            return False
        # one SIGTERM per launcher: a second one while torch's agent stops its workers would
        # interrupt that (every rank of the node, and the launcher's own watch, may stop it)
        if claim_stop(folder):
            emit("stop", reason=reason)  # before the signal: the launcher reads it as it ends
            os.kill(int(pid), signal.SIGTERM)
        return True
    except (OSError, psutil.Error) as err:
        _log.warning(f"distrain: could not stop this node's launcher ({type(err).__name__}: {err})")
        return False


#: in every watchdog verdict that names a frozen rank (worker/lifecycle/watchdog.py)
FROZEN = "frozen or gone"


def frozen_node(frozen: set[int], world: int, local_world: int) -> int | None:
    """A node all of whose ranks are in `frozen` (static: node n holds ranks n·L … n·L+L−1).

    Its agent sees them running and waits for good; a node with one live rank restarts by
    itself (that rank exits with the watchdog's code and its agent stops the others).
    """
    local = max(1, local_world)
    for node in range(world // local):
        if all(r in frozen for r in range(node * local, (node + 1) * local)):
            return node
    return None


def stop_for_frozen(verdict: str, frozen: set[int] | None, world: int, settings: Settings) -> bool:
    """After a watchdog's verdict on a frozen rank: stop every node of a static multi-node job
    when a whole node is frozen (a restart would only wait for it at the rejoin bound)."""
    if not settings.static_store or FROZEN not in verdict:
        return False  # one node: its agent restarts the job, the frozen rank with it
    if frozen_node(frozen or set(), world, settings.local_world_size) is None:
        return False
    return stop_static_job(watchdog_reason(verdict), settings)


#: bound on reaching node 0's agent store from a rank (it may have gone with node 0's launcher)
STATIC_STORE_TIMEOUT_S = 5.0


def tell_every_node(reason: str, settings: Settings) -> str:
    """Leave `reason` in a static multi-node job's agent store for every node's `distrain run`.

    Returns the reason that stands: the first one left (several ranks may stop the job at once),
    or `reason` itself when there is no such store or it cannot be reached (node 0's launcher
    is gone: the other nodes' ranks then fail or stop at the rejoin bound on their own).
    """
    endpoint = settings.static_store
    if not endpoint:
        return reason
    from distrain.net import reachable

    host, port = split_endpoint(endpoint)
    if not reachable(host, port, STATIC_STORE_TIMEOUT_S):  # silent: torch's client is not
        _log.warning(f"distrain: node 0's store ({endpoint}) does not answer: only this node stops")
        return reason
    try:
        import torch.distributed as dist

        timeout = dt.timedelta(seconds=STATIC_STORE_TIMEOUT_S)
        store = dist.TCPStore(host, port, is_master=False, timeout=timeout, wait_for_workers=False)
        standing = bytes(store.compare_set(JOB_STOPPED_KEY, "", reason)).decode() or reason
        store.set(f"{JOB_STOPPED_KEY}/read/{settings.group_rank or '0'}", "1")
        return standing
    except Exception as err:  # best effort: this node stops either way
        _log.warning(f"distrain: could not tell the other nodes ({type(err).__name__}: {err})")
        return reason


def stop_static_job(reason: str, settings: Settings) -> bool:
    """Stop every node of a static multi-node job: the reason for all (:func:`tell_every_node`),
    then this node's `distrain run` (:func:`stop_this_node`, whose answer this is)."""
    return stop_this_node(tell_every_node(reason, settings), settings)


def watchdog_reason(verdict: str) -> str:
    """The watchdog's verdict as a launcher's last line says it: without its prefix and the
    sentence about stacks and the exit code (the launcher's line says what happens instead)."""
    text = verdict.strip().removeprefix("distrain watchdog: ")
    for tail in (". Every rank's Python stack", ". This rank's Python stack"):
        text = text.split(tail, 1)[0]
    return f"the watchdog: {text.rstrip('.')}"
