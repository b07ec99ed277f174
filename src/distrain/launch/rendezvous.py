"""c10d rendezvous timings that let the survivors of a lost node train again within seconds.

When a node dies (power, kernel, SIGKILL of everything on it), the survivors' collectives fail
at once (the dead peer's connections reset) and each survivor's agent re-joins the rendezvous.
With torch's defaults the new round then waits for two things (torch's dynamic_rendezvous.py):

- the dead node is still a participant of the old round until its keep-alive heartbeat is
  ``keep_alive_interval × keep_alive_max_attempt`` old: 5 s × 3 = 10–15 s after the kill;
- the round, once ``min`` nodes are in, waits ``last_call_timeout`` (30 s) for more nodes.

So a 1:2 job lost ~45 s plus the restart.  distrain's defaults for multi-node c10d jobs: a
heartbeat every 2 s, dead after 3 missed (4–6 s), and a 2 s last call.  A 1 s heartbeat was
tried and dropped: every heartbeat rewrites the shared state (compare-and-set), and on a loaded
machine a node joining the first round kept losing that race to the other node's heartbeats,
so the job started without it.  How long nodes may take to *arrive* is ``join_timeout``
(600 s, unchanged); a node arriving after the last call joins at the next round (the job
restarts once to take it in).  Any key given in ``--rdzv-conf`` wins.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import time

from ..contract import RDZV_ENDPOINT, split_endpoint, stop_key

#: distrain's defaults for --rdzv-conf keys (seconds / count); torch's own are 5, 3 and 30
NODE_LOSS_DEFAULTS = {
    "keep_alive_interval": "2",
    "keep_alive_max_attempt": "3",
    "last_call_timeout": "2",
}


def _max_nodes(nnodes: str) -> int:
    try:
        return int(str(nnodes).split(":")[-1])
    except ValueError:
        return 1


def apply_defaults(args: argparse.Namespace) -> None:
    """Add NODE_LOSS_DEFAULTS to a multi-node c10d job's ``--rdzv-conf`` (keys not given)."""
    if args.rdzv_backend != "c10d" or _max_nodes(args.nnodes) < 2:
        return
    given = {
        item.split("=", 1)[0].strip() for item in (args.rdzv_conf or "").split(",") if item.strip()
    }
    extra = [f"{key}={value}" for key, value in NODE_LOSS_DEFAULTS.items() if key not in given]
    args.rdzv_conf = ",".join(x for x in [args.rdzv_conf, *extra] if x)


def pass_endpoint(args: argparse.Namespace) -> None:
    """Tell the workers the c10d endpoint: a rank whose error would recur closes the rendezvous
    there (train/stop_job.py), so no node restarts the job."""
    if args.rdzv_backend == "c10d" and args.rdzv_endpoint:
        os.environ[RDZV_ENDPOINT] = str(args.rdzv_endpoint)


def stop_reason(args: argparse.Namespace, seconds: float = 5.0) -> str | None:
    """Why a rank closed the rendezvous (an error a restart would repeat); None if unknown."""
    if args.rdzv_backend != "c10d" or not args.rdzv_endpoint or not args.rdzv_id:
        return None
    try:
        import torch.distributed as dist

        host, port = split_endpoint(str(args.rdzv_endpoint))
        timeout = dt.timedelta(seconds=seconds)
        store = dist.TCPStore(host, port, is_master=False, timeout=timeout, wait_for_workers=False)
        key = stop_key(str(args.rdzv_id))
        reason = store.get(key).decode() if store.check([key]) else None
        store.add(key + "/read", 1)  # the store's host waits for every node's read (below)
        return reason
    except Exception:  # the store's host has gone already: the caller says what it knows
        return None


#: how long the node hosting the rendezvous store stays for the other nodes to read the reason
READ_WAIT_S = 15.0


def wait_until_read(args: argparse.Namespace, bound_s: float = READ_WAIT_S) -> None:
    """On the node whose launcher hosts the c10d store: stay until every node's launcher read
    why the job stopped (``stop_reason``), at most `bound_s`. The store ends with this process;
    without the wait a node that came later ended with the store's RendezvousConnectionError
    as its last line instead of the cause (seen under load, 2 nodes on one machine)."""
    if args.rdzv_backend != "c10d" or not args.rdzv_endpoint or not args.rdzv_id:
        return
    host, port = split_endpoint(str(args.rdzv_endpoint))
    try:
        import psutil

        listening = any(
            c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
            for c in psutil.Process().net_connections("tcp")
        )
        if not listening:
            return
        import torch.distributed as dist

        timeout = dt.timedelta(seconds=5)
        store = dist.TCPStore(host, port, is_master=False, timeout=timeout, wait_for_workers=False)
        key, nodes = stop_key(str(args.rdzv_id)) + "/read", _max_nodes(args.nnodes)
        deadline = time.monotonic() + bound_s
        while store.add(key, 0) < nodes and time.monotonic() < deadline:
            time.sleep(0.2)
    except Exception:  # best effort: the job is over either way
        return
