"""Every node of a static multi-node job stops when a rank stops the job, on any node.

A static rendezvous gives the launchers no membership signal: when a rank freezes for good
(SIGSTOP, never resumed), its own node's agent sees it running and waits, whatever the other
nodes do (chaos campaign, benchmarks/chaos/RESULTS.md).  A rank that stops the job (the
watchdog's verdict on a frozen node, the rejoin bound: worker/lifecycle/stop_job.py) leaves why in
the agents' store, the TCPStore torch's static rendezvous serves from node 0's `distrain run` at
``--master-addr``:``--master-port``; a rank 0 frozen with its own store leaves that one alive.
Each node's `distrain run` looks there once a second (a thread here) and, on reading the
reason, stops its own node as the rank's SIGTERM would (torch's agent restarts nothing) and
SIGKILLs a worker of its own that is stopped, which cannot obey SIGTERM (torch's agent would
wait 30 s for it); its last line gives the reason.

Node 0's watch also says when another node's launcher ended (peer_gone.py): a restarted rank
then stops at once rather than wait for that node's ranks until ``DISTRAIN_REJOIN_TIMEOUT``.

Nothing new listens: each launcher is one more client of the store torch already serves.
Node 0's launcher holds a share of that server (torch's multi-tenant stores share one per
port in a process) and, when the job stopped, ends only once every other node read why or
stopped looking (at most READ_WAIT_S): the store ends with it.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading
import time
from typing import Any

from distrain.contract import STATIC_STORE
from distrain.coordination.stop_claim import JOB_STOPPED_KEY, claim_stop
from distrain.launch.nodes.peer_gone import GoneLook, conns_key, own_connections
from distrain.launch.nodes.rendezvous import Rendezvous
from distrain.net import reachable, split_endpoint

#: seconds between two looks at the store
POLL_S = 1.0
#: bound on node 0's wait for the other nodes to read why the job stopped
READ_WAIT_S = 15.0
#: seconds from this launcher's SIGTERM to its SIGKILL of a stopped (frozen) worker
KILL_AFTER_S = 2.0
#: a node whose look-counter did not move for this long has stopped looking (its launcher ended)
GONE_S = 4.0


class StopWatch:
    """One launcher's watch of the job-stopped key; see the module docstring."""

    def __init__(self, host: str, port: int, node: int, nodes: int, folder: str | None) -> None:
        self.host, self.port, self.node, self.nodes, self.folder = host, port, node, nodes, folder
        self._done = threading.Event()
        #: held from this watch's claim to its signal; stand_down takes it (no signal after it)
        self._signalling = threading.Lock()
        self._stood_down = False
        #: why the job stopped, when this watch (not a rank of its node) stopped this launcher
        self.reason: str | None = None
        self._store: Any = None
        self._server: Any = None  # node 0: a share of the agents' store server, kept to the end
        self._gone = GoneLook(port, nodes) if node == 0 else None
        self._named = ""  # another node: its connections, as named in the store
        self._thread = threading.Thread(target=self._run, name="distrain-stop-watch", daemon=True)

    def start(self) -> StopWatch:
        """Start watching; returns self."""
        self._thread.start()
        return self

    def _connect(self) -> Any:
        import torch.distributed as dist

        timeout = dt.timedelta(seconds=10)
        store = dist.TCPStore(
            self.host, self.port, is_master=False, timeout=timeout, wait_for_workers=False
        )
        if self.node == 0:  # the agent's server is up in this process: share it (same port)
            try:
                self._server = dist.TCPStore(
                    self.host,
                    self.port,
                    is_master=True,
                    multi_tenant=True,
                    timeout=timeout,
                    wait_for_workers=False,
                )
            except Exception:  # not shared after all: the store then ends with the agent
                self._server = None
        return store

    def _run(self) -> None:
        while not self._done.wait(POLL_S):
            # a silent look first: torch's client prints a stack of frames for each failed try
            if not reachable(self.host, self.port):
                if self._store is not None:
                    return  # node 0's launcher ended: nobody will say anything more
                continue  # not up yet (nodes may start minutes apart)
            try:
                if self._store is None:
                    self._store = self._connect()
                self._store.add(f"{JOB_STOPPED_KEY}/alive/{self.node}", 1)
                self._say_who_i_am()
                if not self._store.check([JOB_STOPPED_KEY]):
                    continue
                reason = bytes(self._store.get(JOB_STOPPED_KEY)).decode()
                self._store.set(f"{JOB_STOPPED_KEY}/read/{self.node}", "1")
            except Exception:  # the store went between the look and the call: as above
                return
            with self._signalling:
                if self._stood_down or not claim_stop(self.folder):
                    return  # the agent ended, or one of this node's ranks stopped it already
                self.reason = reason  # this launcher's last line says it
                os.kill(os.getpid(), signal.SIGTERM)  # torch's handler runs in the main thread
            self._kill_stopped()
            return

    def stand_down(self) -> None:
        """The agent has ended: never signal this launcher from now on.

        Its end removes the job's folder, the stop claim with it, so a look at the store after
        that would claim anew and SIGTERM a launcher already printing its last lines (CI: torch's
        handler raised in ``shutil.rmtree``, a traceback for a last line).  Waits for a signal
        under way; the watch keeps its store for :meth:`finish`.
        """
        with self._signalling:
            self._stood_down = True
        self._done.set()

    def _say_who_i_am(self) -> None:
        """Another node: name this launcher's connections once; node 0: look for gone nodes."""
        try:
            if self._gone is not None:
                self._gone.look(self._store)
            elif not self._named:
                self._named = own_connections(self.host, self.port)
                if self._named:
                    self._store.set(conns_key(self.node), self._named)
        except Exception:  # best effort (psutil refused): a restarted rank waits to its bound
            return

    def _kill_stopped(self) -> None:
        """SIGKILL this launcher's stopped (SIGSTOP) descendants once its agent sent SIGTERM.

        A stopped process cannot obey SIGTERM: torch's agent would wait its 30 s grace for
        nothing before its own SIGKILL (measured: the frozen rank's node ended 30 s after the
        other).  This node's job is ending either way; a live process keeps its grace.
        """
        import psutil

        time.sleep(KILL_AFTER_S)  # the agent's SIGTERM first: every live worker gets its turn
        for proc in psutil.Process().children(recursive=True):
            try:
                if proc.status() == psutil.STATUS_STOPPED:
                    proc.kill()
            except psutil.Error:  # gone meanwhile
                continue

    def finish(self) -> None:
        """At the launcher's end: stop watching; node 0 waits for the other nodes (module doc)."""
        self._done.set()
        try:
            if self.node == 0 and self._store is not None:
                if self._store.check([JOB_STOPPED_KEY]):
                    self._wait_for_readers()
        except Exception:  # best effort: the job is over either way
            pass
        self._store = self._server = None

    def _wait_for_readers(self) -> None:
        """Until every other node read the reason, or its watch stopped looking (READ_WAIT_S)."""
        others = [n for n in range(self.nodes) if n != self.node]
        seen: dict[int, tuple[int, float]] = {}
        deadline = time.monotonic() + READ_WAIT_S
        while time.monotonic() < deadline:
            now, waiting = time.monotonic(), []
            for n in others:
                if self._store.check([f"{JOB_STOPPED_KEY}/read/{n}"]):
                    continue
                if self._gone is not None and n in self._gone.gone:
                    continue  # its launcher ended: it reads nothing
                count = int(self._store.add(f"{JOB_STOPPED_KEY}/alive/{n}", 0))
                if seen.get(n, (None, 0.0))[0] != count:
                    seen[n] = (count, now)
                if now - seen[n][1] > GONE_S:
                    continue  # that node's launcher stopped looking (or never did): it ended
                waiting.append(n)
            if not waiting:
                return
            time.sleep(0.2)


def start(rdzv: Rendezvous, folder: str | None) -> StopWatch | None:
    """For a static multi-node job: tell the workers where the agents' store is (STATIC_STORE)
    and start this launcher's watch of it; None for any other job."""
    nodes = rdzv.max_nodes
    if rdzv.backend != "static" or rdzv.standalone or nodes < 2:
        return None
    if rdzv.endpoint:  # torchrun's static rendezvous serves its store there instead
        host, port = split_endpoint(rdzv.endpoint, 29500)
    else:  # torchrun's default port
        host, port = rdzv.master_addr, int(rdzv.master_port or 29500)
    os.environ[STATIC_STORE] = f"{host}:{port}"
    return StopWatch(host, port, rdzv.node_rank, nodes, folder).start()
