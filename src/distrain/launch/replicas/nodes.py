"""`distrain run --replicas R --nnodes M`: which groups run on this node, and the nodes' roll call.

Each node runs R/M whole groups (group g on node g // (R/M)); every group is a one-node job of
its own.  Node 0 runs the lighthouse on ``--master-addr``:``--master-port`` and, one port above,
a small TCPStore (torch's) where every node's launcher says it is running (a beat a second) or
finished: node 0 keeps the lighthouse until every node finished or went silent, because the
other nodes' groups still need it after node 0's own groups are done.  A node learns its own
address for the other groups from the route to the master (or ``--iface``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from distrain.contract import NODE0_WAIT
from distrain.coordination.replica_marks import (
    ft_done,
    ft_ended,
    ft_started,
    mark_ft_done,
    mark_ft_end,
    mark_ft_start,
)
from distrain.errors import UsageError
from distrain.launch.options.validate import node_range
from distrain.launch.replicas.lighthouse import node0_wait_s
from distrain.net import interface_addresses, is_loopback, listen_socket, route_to

#: torchrun's default --master-port, where node 0's lighthouse listens when none is given
DEFAULT_PORT = 29500
#: a node whose beat stopped changing this long is taken as gone (node 0 stops waiting for it)
SILENT_S = 30.0
BEAT_S = 1.0


@dataclass(frozen=True)
class Placement:
    """Where the groups run: `groups` in all, `nodes` nodes, this is node `node`."""

    groups: int
    per_group: int
    nodes: int = 1
    node: int = 0
    master_addr: str = "127.0.0.1"
    port: int = DEFAULT_PORT

    @property
    def local(self) -> list[int]:
        """The groups this node runs."""
        per_node = self.groups // self.nodes
        return list(range(self.node * per_node, (self.node + 1) * per_node))

    @property
    def multi_node(self) -> bool:
        """True when the groups are spread over several nodes."""
        return self.nodes > 1


def place(args: argparse.Namespace, groups: int) -> Placement:
    """The Placement `args` asks for; UsageError (one line) when the groups do not fit the nodes."""
    per_group = int(args.nproc_per_node)
    text = str(getattr(args, "nnodes", "1"))
    nodes, high = node_range(text)
    if high != nodes:
        raise UsageError(f"--replicas needs a fixed number of nodes (got --nnodes {text})")
    try:
        node = int(getattr(args, "node_rank", 0) or 0)
    except ValueError:
        raise UsageError(f"--node-rank expects an integer (got {args.node_rank!r})") from None
    if nodes == 1:
        return Placement(groups, per_group)
    if groups % nodes:
        raise UsageError(
            f"--replicas {groups} does not divide over --nnodes {nodes}: each node runs the same "
            "number of whole groups"
        )
    if not 0 <= node < nodes:
        raise UsageError(f"--node-rank must be 0…{nodes - 1} (got {node})")
    master = str(getattr(args, "master_addr", "") or "")
    try:
        loopback = not master or is_loopback(socket.gethostbyname(master))
    except OSError:
        raise UsageError(f"--master-addr {master}: cannot resolve it") from None
    if loopback:
        raise UsageError(
            "--replicas across nodes needs --master-addr: node 0's address, where the "
            "lighthouse listens"
        )
    port = int(args.master_port) if getattr(args, "master_port", None) else DEFAULT_PORT
    return Placement(groups, per_group, nodes, node, master, port)


def node_address(placement: Placement, iface: str | None) -> tuple[str, str | None]:
    """This node's address (and interface) for other nodes: ``--iface``'s, else master's route."""
    if iface:
        addrs = interface_addresses().get(iface)
        if not addrs:
            raise UsageError(
                f"--iface {iface}: no such interface with an IPv4 address on this node"
            )
        return addrs[0], iface
    try:
        return route_to(placement.master_addr, placement.port)
    except OSError as err:
        raise UsageError(f"no route to --master-addr {placement.master_addr}: {err}") from None


class RollCall:
    """The nodes' roll call on node 0's TCPStore (``--master-port`` + 1)."""

    def __init__(self, placement: Placement) -> None:
        import torch.distributed as dist

        self.placement = placement
        self._last_beat = 0.0
        self._started: set[int] = set()  # groups whose start mark is shared (share_starts)
        self._ended: set[int] = set()  # groups whose end mark is shared (share_ends)
        self._done: set[int] = set()  # groups whose done mark is shared (share_dones)
        self._last_look = 0.0
        self.said_done = False
        self._heard: dict[int, tuple[str, float]] = {}  # node → (its last beat, seen since)
        self._gone: set[int] = set()  # nodes found silent (mark_silent)
        first = placement.node == 0
        wait_s = node0_wait_s()
        try:
            # node 0's store on the master address only (TCPStore alone listens on every interface)
            fd = (
                listen_socket(placement.master_addr, placement.port + 1).detach() if first else None
            )
            self.store: Any = dist.TCPStore(
                placement.master_addr,
                placement.port + 1,
                world_size=None,
                is_master=first,
                timeout=dt.timedelta(seconds=wait_s),
                wait_for_workers=False,
                master_listen_fd=fd,
            )
        except Exception as err:  # noqa: BLE001 - torch raises several kinds; one line either way
            where = f"{placement.master_addr}:{placement.port + 1}"
            if first:
                raise UsageError(f"--replicas: node 0 cannot listen on {where}: {err}") from None
            raise UsageError(
                f"--replicas: node 0 is not reachable at {where} after {wait_s:g} s (set "
                f"{NODE0_WAIT} to wait longer)"
            ) from None

    def beat(self) -> None:
        """Say this node is still running (at most once a second)."""
        now = time.monotonic()
        if now - self._last_beat >= BEAT_S:
            self._last_beat = now
            self.store.set(f"node{self.placement.node}", f"running {now}")

    def share_starts(self, folder: str, local: list[int]) -> None:
        """Carry the groups' start marks (coordination.replica_marks) between node folder and store.

        A group's first quorum waits until every group's mark is in its node's folder; a group
        on another node marks its own folder, so each launcher publishes its groups' marks and
        copies the other nodes' in.
        """
        if len(self._started) == self.placement.groups:
            return
        self._carry(
            self._started,
            "start",
            lambda g: ft_started(folder, g),
            lambda g: mark_ft_start(folder, g),
            local,
        )

    def share_ends(self, folder: str, local: list[int]) -> None:
        """Carry the groups' end marks (coordination.replica_marks) between nodes, as start marks.

        A group that ended waits for the others to meet it (train/replica_end.py) unless they
        ended too; a group on another node ends there.
        """
        self._carry(
            self._ended,
            "end",
            lambda g: ft_ended(folder, g),
            lambda g: mark_ft_end(folder, g),
            local,
        )

    def share_dones(self, folder: str, local: list[int]) -> None:
        """Carry the groups' done marks (every process reported its final state) between nodes:
        a group that ended waits for the others' (worker/replicas/rejoin.py), as for end marks."""
        self._carry(
            self._done,
            "done",
            lambda g: ft_done(folder, g),
            lambda g: mark_ft_done(folder, g),
            local,
        )

    def _carry(
        self,
        done: set[int],
        key: str,
        marked: Callable[[int], bool],
        write_mark: Callable[[int], None],
        local: list[int],
    ) -> None:
        """This node's groups' marks (in their state files) into the store as ``<key><group>``;
        the other nodes' from the store into the files here; `done` holds the groups carried."""
        for g in range(self.placement.groups):
            if g in done:
                continue
            if g in local:
                if marked(g):
                    self.store.set(f"{key}{g}", "1")
                    done.add(g)
            elif self.store.check([f"{key}{g}"]):
                write_mark(g)
                done.add(g)

    def finished(self) -> None:
        """Say this node's groups have all ended."""
        self.store.set(f"node{self.placement.node}", "done")
        self.said_done = True

    def leave(self, folder: str, local: list[int]) -> None:
        """A stopped node (its ssh session lost, a SIGTERM): its groups end here for good.

        Their end marks and this node's ``done`` go to the store, so that the other nodes' groups
        do not wait for them at their end (DISTRAIN_FT_LINGER) nor node 0 for this node.
        Nothing to say after :meth:`finished` (node 0's store may be closed by then).
        """
        if self.said_done:
            return
        self.store.set_timeout(dt.timedelta(seconds=5))  # a stopping node never waits long
        for g in local:
            mark_ft_end(folder, g)
        self.share_ends(folder, local)
        self.finished()

    def mark_silent(self, folder: str) -> None:
        """Another node's groups whose beat stopped for SILENT_S (a lost machine) ended for good."""
        now = time.monotonic()
        if now - self._last_look < BEAT_S:
            return
        self._last_look = now
        per_node = self.placement.groups // self.placement.nodes
        for n in range(self.placement.nodes):
            if n == self.placement.node or n in self._gone:
                continue
            key = f"node{n}"
            value = bytes(self.store.get(key)).decode() if self.store.check([key]) else ""
            if self._heard.get(n, ("", 0.0))[0] != value:
                self._heard[n] = (value, now)
            if value and value != "done" and now - self._heard[n][1] >= SILENT_S:
                self._gone.add(n)
                for g in range(n * per_node, (n + 1) * per_node):
                    mark_ft_end(folder, g)

    def wait_for_others(self, say: Any) -> None:
        """On node 0: return once every other node finished or fell silent for SILENT_S."""
        others = [n for n in range(1, self.placement.nodes)]
        seen: dict[int, tuple[str, float]] = {}
        said = False
        while True:
            now = time.monotonic()
            waiting = []
            for n in others:
                value = (
                    bytes(self.store.get(f"node{n}")).decode()
                    if self.store.check([f"node{n}"])
                    else ""
                )
                if value == "done":
                    continue
                if seen.get(n, ("", 0.0))[0] != value:
                    seen[n] = (value, now)
                if now - seen[n][1] < SILENT_S:
                    waiting.append(n)
            if not waiting:
                return
            if not said:
                say(
                    "node 0's groups ended; the lighthouse stays up for node(s) "
                    f"{', '.join(map(str, waiting))}"
                )
                said = True
            time.sleep(0.2)
