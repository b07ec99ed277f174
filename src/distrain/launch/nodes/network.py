"""Multi-node `distrain run`: which interface and address this node uses, and who hosts the store.

torchrun leaves four things to the user that break multi-node jobs in containers and clusters
whose hostname resolves to loopback (``127.0.0.1`` / ``127.0.1.1``):

- gloo/NCCL advertise the address of the hostname unless GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME
  name an interface → peers are told to connect to 127.0.0.1;
- the elastic agent advertises ``socket.getfqdn()`` as this node's address unless
  ``--local-addr`` is given → workers get MASTER_ADDR=localhost;
- the c10d rendezvous guesses whether this node hosts its store by comparing hostnames unless
  ``--rdzv-conf is_host=…`` says so → two hosts, or none;
- a master address that resolves to loopback silently makes a node talk to itself.

:func:`plan_network` asks the kernel which local address routes to the master / rendezvous
endpoint (a connected UDP socket; nothing is sent), and fills all four in.  ``--iface NAME``
overrides the interface; one that cannot reach the master is refused before anything starts.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
from dataclasses import dataclass

from distrain.contract import BIND_ADDR
from distrain.errors import UsageError
from distrain.launch.options.validate import node_range
from distrain.net import interface_addresses, is_loopback, route_to


@dataclass(frozen=True)
class NetworkChoice:
    """What this node uses to reach the others (printed by the launcher)."""

    iface: str
    address: str
    target: str
    target_ip: str
    port: int | None
    store: str
    warnings: tuple[str, ...] = ()
    #: ``--rdzv-conf is_host=…`` for a c10d job whose store host torch would guess (else None)
    is_host: bool | None = None

    def summary(self, node: str) -> str:
        """The one line `distrain run` prints on every node."""
        port = f":{self.port}" if self.port else ""
        target = (
            self.target if self.target == self.target_ip else f"{self.target} ({self.target_ip})"
        )
        return (
            f"distrain run: {node} · interface {self.iface} ({self.address}) routes to "
            f"{target}{port} · {self.store}"
        )


def max_nodes(nnodes: str) -> int:
    """The upper bound of torchrun's ``--nnodes N`` or ``--nnodes MIN:MAX``."""
    return node_range(nnodes)[1]


def loopback_interface() -> str:
    """The name of the interface holding 127.0.0.1 ("lo" on Linux)."""
    return _own_interface("127.0.0.1", interface_addresses()) or "lo"


def _resolve(host: str, what: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        raise UsageError(f"{what} {host!r} does not resolve to an address on this node") from None


def _own_interface(ip: str, table: dict[str, list[str]]) -> str | None:
    for name, addrs in table.items():
        if ip in addrs:
            return name
    return None


def _target(args: argparse.Namespace) -> tuple[str, int | None, str]:
    """(host, port, what) this node must reach: the master (static) or the rendezvous endpoint."""
    if args.rdzv_backend == "static" and not args.rdzv_endpoint:
        port = int(args.master_port) if args.master_port is not None else None
        return str(args.master_addr), port, "--master-addr"
    endpoint = str(args.rdzv_endpoint or "")
    if not endpoint:
        raise UsageError(
            f"--rdzv-backend {args.rdzv_backend} with several nodes needs --rdzv-endpoint HOST:PORT"
        )
    host, _, port_text = endpoint.rpartition(":")
    if not host:
        host, port_text = endpoint, ""
    port = int(port_text) if port_text.isdigit() else None
    return host.strip("[]"), port, "--rdzv-endpoint"


def _conf_has(conf: str, key: str) -> bool:
    return any(item.split("=", 1)[0].strip() == key for item in conf.split(",") if item.strip())


def _public(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_global
    except ValueError:
        return False


def _hostname_loopback() -> str | None:
    """The loopback address this host's name resolves to, or None."""
    try:
        resolved = socket.gethostbyname(socket.gethostname())
    except OSError:
        return None
    return resolved if is_loopback(resolved) else None


def plan_network(
    args: argparse.Namespace, env: dict[str, str], iface: str | None, nodes: int
) -> NetworkChoice | None:
    """Choose interface, address and store host for a job of at most `nodes` nodes (``--nnodes``
    as the plan read it); add to `env`.

    `args` is only read: the plan takes the address (``--local-addr`` when not given) and
    ``is_host`` from the returned choice.

    Returns None for a one-node job without ``--iface`` (loopback is right there).
    Raises UsageError when the master cannot be reached the way the user asked.
    """
    if nodes <= 1 and not iface:
        return None
    host, port, what = _target(args)
    target = _Target(host, what, _resolve(host, what), interface_addresses(), nodes)
    warnings: list[str] = []
    static = args.rdzv_backend == "static" and not args.rdzv_endpoint
    node_rank = int(args.node_rank) if static else None
    if iface:
        address = _given_iface(iface, target)
    else:
        iface, address = _chosen_iface(target, static and node_rank == 0, warnings)
    warnings += _warnings(target, static and node_rank == 0, iface, address)
    env.setdefault("GLOO_SOCKET_IFNAME", os.environ.get("GLOO_SOCKET_IFNAME", iface))
    env.setdefault("NCCL_SOCKET_IFNAME", os.environ.get("NCCL_SOCKET_IFNAME", iface))
    env[BIND_ADDR] = address  # rank 0's store listens here only (see store_listen_fd)

    is_host = None
    if static:
        store = "store on this node (rank 0)" if node_rank == 0 else f"store on {host}"
    elif args.rdzv_backend == "c10d":
        hosts = _own_interface(target.ip, target.table) is not None or (
            is_loopback(target.ip) and nodes <= 1
        )
        # several agents on one machine (loopback): torch's own try-host-then-client logic is right
        if iface != "lo" and not _conf_has(args.rdzv_conf or "", "is_host"):
            is_host = hosts
        store = (
            "rendezvous store on this node"
            if hosts and iface != "lo"
            else f"rendezvous store on {host}"
        )
    else:
        store = f"rendezvous via {args.rdzv_backend} at {host}"
    return NetworkChoice(iface, address, host, target.ip, port, store, tuple(warnings), is_host)


@dataclass(frozen=True)
class _Target:
    """The master the nodes meet at, as this node sees it."""

    host: str
    #: what the address is ("--master-addr", "the rendezvous endpoint")
    what: str
    ip: str
    #: this node's interfaces and their addresses
    table: dict[str, list[str]]
    nodes: int


def _given_iface(iface: str, t: _Target) -> str:
    """The address of ``--iface``; UsageError when it cannot reach the master."""
    if iface not in t.table:
        known = ", ".join(f"{n} ({','.join(a)})" for n, a in sorted(t.table.items())) or "none"
        raise UsageError(
            f"--iface {iface}: no such interface with an IPv4 address on this node (have: {known})"
        )
    address = t.table[iface][0]
    own = _own_interface(t.ip, t.table)
    routed_local, routed_iface = route_to(t.ip)
    reaches = (
        own == iface
        or (own is None and routed_iface == iface)
        or (is_loopback(t.ip) and iface == "lo")
    )
    if not reaches:
        via = f"{routed_iface} ({routed_local})" if routed_iface else routed_local
        raise UsageError(
            f"--iface {iface} ({address}) cannot reach {t.what} {t.host} ({t.ip}): this node "
            f"routes it via {via}; "
            f"use --iface {routed_iface} or leave --iface out"
        )
    return address


def _chosen_iface(t: _Target, store_here: bool, warnings: list[str]) -> tuple[str, str]:
    """The interface and address that reach the master, without ``--iface``."""
    host, what, target_ip, table = t.host, t.what, t.ip, t.table
    if is_loopback(target_ip) and (is_loopback(host) or host == target_ip):
        # "localhost" / 127.x named on purpose: every node of this job runs on this machine
        warnings.append(
            f"{what} {host} is loopback: every node of this job must run on this machine"
        )
        return "lo", target_ip
    if is_loopback(target_ip):
        outward = {
            n: a for n, a in table.items() if n != "lo" and not all(is_loopback(x) for x in a)
        }
        if store_here and len(outward) == 1:
            iface, addrs = next(iter(outward.items()))
            address = addrs[0]
            warnings.append(
                f"{what} {host} resolves to loopback {target_ip} on this node (a "
                "/etc/hosts entry?); "
                f"the other nodes must use {address}; advertising {iface} ({address}) "
                "instead of loopback"
            )
            return iface, address
        choices = ", ".join(f"{n} ({a[0]})" for n, a in sorted(outward.items())) or "none"
        raise UsageError(
            f"{what} {host} resolves to loopback {target_ip} on this node, so this "
            f"{t.nodes}-node job "
            "would only ever talk to itself; pass the master's real IP address (this "
            f"node has: {choices})"
        )
    own = _own_interface(target_ip, table)
    if own is not None:
        return own, target_ip
    address, routed = route_to(target_ip)
    if routed is None:
        raise UsageError(
            f"no interface of this node holds {address}, the address routing to {host}; use --iface"
        )
    return routed, address


def _warnings(t: _Target, store_here: bool, iface: str, address: str) -> list[str]:
    """What the network choice warns about: a store behind NAT, a public address, loopback."""
    host, what, target_ip = t.host, t.what, t.ip
    warnings: list[str] = []
    if store_here and not is_loopback(target_ip) and _own_interface(target_ip, t.table) is None:
        warnings.append(
            f"{what} {host} ({target_ip}) is not an address of this node, yet node 0 "
            "hosts the store: "
            "the other nodes reach it only if that address forwards here (NAT); otherwise run "
            "node 0 on that host"
        )
    if _public(target_ip):
        warnings.append(
            f"{what} {host} is a public address: torch's store has no authentication, "
            "so keep its port "
            "firewalled (or use a private network)"
        )
    loop_name = _hostname_loopback()
    if loop_name and iface != "lo":
        warnings.append(
            f"this node's hostname {socket.gethostname()!r} resolves to {loop_name}; "
            "gloo/NCCL and the agent "
            f"would advertise loopback, so distrain pins them to {iface} ({address})"
        )
    return warnings
