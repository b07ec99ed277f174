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
import dataclasses
import datetime as dt
import os
import time
import uuid
from dataclasses import dataclass

from distrain.contract import RDZV_ENDPOINT
from distrain.coordination.stop_claim import stop_key
from distrain.launch.options.validate import node_range
from distrain.net import listening_here, split_endpoint

#: distrain's defaults for --rdzv-conf keys (seconds / count); torch's own are 5, 3 and 30
NODE_LOSS_DEFAULTS = {
    "keep_alive_interval": "2",
    "keep_alive_max_attempt": "3",
    "last_call_timeout": "2",
}


@dataclass(frozen=True)
class Rendezvous:
    """How this node meets the others: torchrun's rendezvous options, as the agent gets them."""

    backend: str
    endpoint: str
    id: str
    conf: str
    nnodes: str
    node_rank: int
    master_addr: str
    master_port: int | None
    local_addr: str | None
    standalone: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Rendezvous:
        """The rendezvous torchrun's parsed options ask for."""
        port = args.master_port
        return cls(
            str(args.rdzv_backend),
            str(args.rdzv_endpoint or ""),
            str(args.rdzv_id),
            str(args.rdzv_conf or ""),
            str(args.nnodes),
            int(args.node_rank),
            str(args.master_addr),
            None if port is None else int(port),
            args.local_addr,
            bool(args.standalone),
        )

    @property
    def max_nodes(self) -> int:
        """The upper bound of ``--nnodes`` (torch's parse_min_max_nnodes, through node_range)."""
        return node_range(self.nnodes)[1]

    @property
    def static(self) -> bool:
        """torchrun's static rendezvous: node ranks given, rank 0's store at the master."""
        return self.backend == "static" and not self.endpoint

    def on_port(self, port: int) -> Rendezvous:
        """This rendezvous once its store listens on `port` (an endpoint planned on port 0)."""
        host, sep, planned = self.endpoint.rpartition(":")
        if not sep or planned != "0":
            return self
        return dataclasses.replace(self, endpoint=f"{host}:{port}")


def node_loss_conf(backend: str, nodes: int, conf: str) -> str:
    """``--rdzv-conf`` with NODE_LOSS_DEFAULTS added for a c10d job of up to `nodes` nodes, more
    than one (keys not given)."""
    if backend != "c10d" or nodes < 2:
        return conf
    given = {item.split("=", 1)[0].strip() for item in conf.split(",") if item.strip()}
    extra = [f"{key}={value}" for key, value in NODE_LOSS_DEFAULTS.items() if key not in given]
    return ",".join(x for x in [conf, *extra] if x)


def torch_defaults(r: Rendezvous) -> Rendezvous:
    """What ``torch.distributed.run.run()`` would fill in before its agent starts.

    ``--standalone``, or a one-node static job without a port: c10d on ``localhost:0``; a
    master port of 29500 when none is given.  Done here once so the agent's options are final.
    """
    if r.standalone or (r.static and r.master_port is None and r.max_nodes == 1):
        c10d = "c10d", "localhost:0", str(uuid.uuid4())
        r = dataclasses.replace(r, standalone=False, backend=c10d[0], endpoint=c10d[1], id=c10d[2])
    if r.master_port is None:
        r = dataclasses.replace(r, master_port=29500)
    return r


def pass_endpoint(r: Rendezvous) -> None:
    """Tell the workers the c10d endpoint: a rank whose error would recur closes the rendezvous
    there (worker/lifecycle/stop_job.py), so no node restarts the job."""
    if r.backend == "c10d" and r.endpoint:
        os.environ[RDZV_ENDPOINT] = r.endpoint


def stop_reason(r: Rendezvous, seconds: float = 5.0) -> str | None:
    """Why a rank closed the rendezvous (an error a restart would repeat); None if unknown."""
    if r.backend != "c10d" or not r.endpoint or not r.id:
        return None
    try:
        import torch.distributed as dist

        host, port = split_endpoint(r.endpoint)
        timeout = dt.timedelta(seconds=seconds)
        store = dist.TCPStore(host, port, is_master=False, timeout=timeout, wait_for_workers=False)
        key = stop_key(r.id)
        reason = store.get(key).decode() if store.check([key]) else None
        store.add(key + "/read", 1)  # the store's host waits for every node's read (below)
        return reason
    except Exception:  # the store's host has gone already: the caller says what it knows
        return None


#: how long the node hosting the rendezvous store stays for the other nodes to read the reason
READ_WAIT_S = 15.0


def wait_until_read(r: Rendezvous, bound_s: float = READ_WAIT_S) -> None:
    """On the node whose launcher hosts the c10d store: stay until every node's launcher read
    why the job stopped (``stop_reason``), at most `bound_s`. The store ends with this process;
    without the wait a node that came later ended with the store's RendezvousConnectionError
    as its last line instead of the cause (seen under load, 2 nodes on one machine)."""
    if r.backend != "c10d" or not r.endpoint or not r.id:
        return
    host, port = split_endpoint(r.endpoint)
    try:
        if not listening_here(port):
            return
        import torch.distributed as dist

        timeout = dt.timedelta(seconds=5)
        store = dist.TCPStore(host, port, is_master=False, timeout=timeout, wait_for_workers=False)
        key, nodes = stop_key(r.id) + "/read", r.max_nodes
        deadline = time.monotonic() + bound_s
        while store.add(key, 0) < nodes and time.monotonic() < deadline:
            time.sleep(0.2)
    except Exception:  # best effort: the job is over either way
        return
