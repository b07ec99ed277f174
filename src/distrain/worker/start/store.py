"""The c10d store a worker's process group forms on: restart-safe, listening only where asked, and
formed within a bounded time in a restarted attempt of a multi-node static job.

A restarted attempt waits for its peers a bounded time, then stops. A static rendezvous has no
membership signal: when one node's launcher dies (or a rank of one node fails where the other
node's agent sees nothing), the surviving node's agent restarts its own ranks, and those wait for
peers that never come, for the init timeout (10 min), again after each restart. A first attempt
keeps that timeout (nodes may start minutes apart); a restarted one (this node's agent counted a
restart) waits ``DISTRAIN_REJOIN_TIMEOUT`` seconds (default 60) for every rank to check in under
the attempt's prefix. On expiry the rank names the ranks (and nodes) that never came back and
stops its node's `distrain run`, and every other node's (worker/lifecycle/stop_job.py), whose last
lines say so: a restart could only wait again. Rerunning the job on every node resumes it.

It stops as soon as node 0's launcher says that the launcher of a node whose ranks are missing
ended (launch/nodes/peer_gone.py: its connections to the agents' store closed): nothing will
restart those ranks, so the wait could only run out (a lost node cost 60 s of it before).
"""

from __future__ import annotations

import datetime as dt
import socket
import time

import torch.distributed as dist

from distrain.cluster import ClusterEnvironment
from distrain.coordination.stop_claim import gone_key
from distrain.errors import DistrainError, recurring
from distrain.net import is_loopback, listen_socket, reachable, split_endpoint
from distrain.settings import Settings
from distrain.worker.lifecycle.stop_job import stop_static_job
from distrain.worker.start.attempt import agree_attempt, attempt_prefix


def store_listen_fd(master_addr: str, port: int, bind_addr: str | None = None) -> int | None:
    """A socket for rank 0's store, listening only where the job's ranks reach it.

    torch's TCPStore server listens on every interface; given ``master_listen_fd`` it uses our
    socket instead.  The address is the one `distrain run` chose (DISTRAIN_BIND_ADDR), else the
    master address itself when it is loopback (every rank is on this machine: distrain.spawn,
    mpirun on one node, torchrun on one node).  None (torch's default) only when neither says
    where; an address that cannot be bound is an error, never a fall-back to every interface.
    """
    bind = bind_addr or ""
    if not bind:
        try:
            resolved = socket.gethostbyname(master_addr)
        except OSError:
            return None  # torch reports the unresolvable address itself
        if not is_loopback(resolved):
            return None
        bind = resolved
    try:
        sock = listen_socket(bind, port)
    except OSError as err:
        raise DistrainError(
            f"rank 0's store cannot listen on {bind}:{port}: {err.strerror or err}"
        ) from None
    return sock.detach()  # TCPStore owns the descriptor from here on (and closes it)


def restart_safe_store(
    env: ClusterEnvironment,
    timeout: dt.timedelta,
    settings: Settings,
    rejoin_s: float | None = None,
) -> tuple[dist.Store, int]:
    """A TCPStore client/server under a per-attempt prefix, and the attempt's number.

    After torchrun restarts a worker group, keys written by the previous attempt (and a
    half-torn-down store shared with the agent) make gloo's connectFullMesh fail or hang
    (pytorch#135712).  A prefix per attempt gives each attempt a clean namespace; the attempt
    is agreed through the store (.attempt), never the agent's per-node restart count, which
    differs between nodes after one node's worker failed under c10d.  In a restarted attempt
    of a multi-node static job, forming waits `rejoin_s` seconds at most (the module's doc).
    """
    bind_addr = settings.bind_addr
    bound = rejoin_bound(rejoin_s, settings) if rejoin_s else None
    forming = timeout if bound is None else dt.timedelta(seconds=bound)
    started = time.monotonic()
    store: dist.TCPStore | None = None
    prefixed: dist.Store | None = None
    gone: tuple[list[int], str] | None = None
    try:
        store, attempt = _attempt_store(env, forming, bind_addr)
        prefixed = dist.PrefixStore(attempt_prefix(attempt), store)
        if bound is not None:
            gone = await_peers(
                prefixed,
                env.rank(),
                env.world_size(),
                bound - (time.monotonic() - started),
                GoneNodes(settings.static_store, env.local_world_size()),
            )
    except RuntimeError:  # DistError (a store timing out, refused), DistrainError (no reply)
        if bound is None or time.monotonic() - started < 0.9 * bound:
            raise  # not the bound running out: a restart may heal it
        missing = missing_ranks(prefixed, env.world_size())
        raise stop(missing, env.local_world_size(), bound, settings) from None
    if gone is not None:
        raise stop(gone[0], env.local_world_size(), bound or 0.0, settings, why=gone[1])
    if bound is not None:
        store.set_timeout(timeout)  # the group's own waits from here keep the init timeout
    return prefixed, attempt


def _attempt_store(
    env: ClusterEnvironment, timeout: dt.timedelta, bind_addr: str | None
) -> tuple[dist.TCPStore, int]:
    """Rank 0's store server (or a client of it) and the attempt agreed through it."""
    is_master = env.rank() == 0 and not env.store_is_external()
    # listen only where the ranks connect (the chosen interface, or loopback on one node)
    listen_fd = (
        store_listen_fd(env.master_addr(), env.master_port(), bind_addr) if is_master else None
    )
    # master_listen_fd: a keyword the stubs lack
    listen = {"master_listen_fd": listen_fd} if listen_fd is not None else {}
    store = dist.TCPStore(
        env.master_addr(),
        env.master_port(),
        world_size=None if not is_master else env.world_size(),
        is_master=is_master,
        timeout=timeout,
        wait_for_workers=False,
        **listen,  # type: ignore[arg-type]
    )

    def connect() -> dist.Store:
        return dist.TCPStore(
            env.master_addr(),
            env.master_port(),
            is_master=False,
            timeout=timeout,
            wait_for_workers=False,
        )

    return store, agree_attempt(store, env.rank(), env.world_size(), timeout, connect)


def shared_store(prefix: str) -> dist.Store:
    """The default process group's store under `prefix`: every rank of the group shares it.

    A store, not a collective: usable from a background thread, in any order (the checkpoint
    writers report their files through it).
    """
    from torch.distributed.distributed_c10d import _get_default_store

    return dist.PrefixStore(prefix, _get_default_store())


# -- a restarted attempt's bounded wait for its peers

_REJOINED = "distrain/rejoined"


def rejoin_bound(seconds: float, settings: Settings) -> float | None:
    """`seconds` in a restarted attempt of a multi-node static job under `distrain run`; None."""
    if settings.launcher != "distrain-run" or settings.rdzv_endpoint:
        return None  # not distrain run, or a c10d rendezvous (its agents see membership changes)
    if settings.restart_count == 0:
        return None
    return seconds if settings.group_world_size > 1 else None


#: seconds between two looks at the store in the wait; between two asks whether a node is gone
_LOOK_S, _GONE_LOOK_S = 0.05, 0.5


class GoneNodes:
    """Which of the missing ranks' nodes node 0's launcher says ended (launch/nodes/peer_gone.py),
    asked of the agents' store at `endpoint` (DISTRAIN_STATIC_STORE); never, without one."""

    def __init__(self, endpoint: str | None, local_world: int) -> None:
        self.endpoint, self.local = endpoint, max(1, local_world)
        self._store: dist.Store | None = None

    def __call__(self, missing: list[int]) -> tuple[list[int], str] | None:
        """The missing ranks of the gone nodes and what node 0 said of them; None: none gone."""
        nodes = sorted({r // self.local for r in missing})
        try:
            store = self._connect()
            if store is None:
                return None
            marked = [n for n in nodes if store.check([gone_key(n)])]
            said = {n: bytes(store.get(gone_key(n))).decode() for n in marked}
        except Exception:  # node 0's store is gone with its launcher: the bound then stands
            return None
        if not said:
            return None
        words = "; ".join(sorted(set(said.values())))  # node 0 says the same of each
        return [r for r in missing if r // self.local in said], words

    def _connect(self) -> dist.Store | None:
        if self._store is None and self.endpoint:
            host, port = split_endpoint(self.endpoint)
            if reachable(host, port):  # silent: torch's client prints a stack on each failure
                timeout = dt.timedelta(seconds=5)
                self._store = dist.TCPStore(
                    host, port, is_master=False, timeout=timeout, wait_for_workers=False
                )
        return self._store


def await_peers(
    store: dist.Store,
    rank: int,
    world: int,
    seconds: float,
    gone: GoneNodes | None = None,
) -> tuple[list[int], str] | None:
    """Check in under this attempt's prefix and wait until every rank did (at most `seconds`).

    Returns None once all did; the missing ranks of nodes whose launchers ended, and why, as soon
    as `gone` says so.  Raises DistrainError when `seconds` ran out.
    """
    store.set(f"{_REJOINED}/{rank}", "1")
    keys = [f"{_REJOINED}/{r}" for r in range(world)]
    started = time.monotonic()
    asked = started
    while not store.check(keys):
        now = time.monotonic()
        if now - started > max(1.0, seconds):
            raise DistrainError(f"not every rank checked in within {seconds:g} s")
        if gone is not None and now - asked >= _GONE_LOOK_S:
            asked = now
            said = gone(missing_ranks(store, world))
            if said is not None:
                return said
        time.sleep(_LOOK_S)
    return None


def missing_ranks(store: dist.Store | None, world: int) -> list[int]:
    """The ranks that did not check in; rank 0 when its store cannot be asked (it went with it)."""
    if store is None:
        return [0]
    try:
        return [r for r in range(world) if not store.check([f"{_REJOINED}/{r}"])] or [0]
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


def stop(
    missing: list[int], local_world: int, seconds: float, settings: Settings, why: str = ""
) -> DistrainError:
    """Stop this node's launcher for good and return the error the rank raises; `why`: what
    node 0's launcher said of a gone node, when that (not the bound) ended the wait."""
    attempt = settings.restart_count
    who = describe(missing, local_world)
    if why:
        reason = f"{who} did not rejoin attempt {attempt}: {why}"
    else:
        reason = (
            f"{who} did not rejoin attempt {attempt} within {seconds:g} s (DISTRAIN_REJOIN_TIMEOUT)"
        )
    stop_static_job(reason, settings)  # every node: a frozen rank's own agent would wait for good
    return recurring(DistrainError(reason))
