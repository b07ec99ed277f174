"""Network: interfaces, what the hostname resolves to, the master address and default ports."""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any

import psutil

from distrain.net import interface_addresses, is_loopback, outward_interface, port_in_use, route_to
from distrain.tools.doctor.bounded import ProbeTimeout, call_bounded
from distrain.tools.doctor.check import Check

GROUP = "network"
#: torchrun's default --master-port and the c10d rendezvous default port
DEFAULT_PORTS = (29500, 29400)
#: a reachability test must answer quickly or report a firewall/black hole
CONNECT_TIMEOUT_S = 2.0
IFNAME_FIX = (
    "For multi-node jobs set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME={iface} or map the "
    "hostname to {addr} in /etc/hosts."
)


def _non_loopback() -> list[tuple[str, str]]:
    return [
        (name, addr)
        for name, addrs in sorted(interface_addresses().items())
        for addr in addrs
        if name != "lo" and not is_loopback(addr)
    ]


def outward(master_addr: str | None = None) -> tuple[str, str, str] | None:
    """(interface, address, why) the other nodes reach this one through: the route to the master
    when one is named (`ip route get`), else the default route. Never the alphabetically first
    interface: on a Docker host that is the ``docker0`` bridge, which no other machine reaches."""
    if master_addr:
        with contextlib.suppress(OSError, ProbeTimeout):
            ip = call_bounded(lambda: socket.gethostbyname(master_addr), CONNECT_TIMEOUT_S)
            chosen = outward_interface(ip)
            if chosen and chosen[0] != "lo":
                return chosen[0], chosen[1], f"the route to {master_addr}"
    chosen = outward_interface()
    if chosen:
        return chosen[0], chosen[1], "the default route"
    others = _non_loopback()
    if len({name for name, _ in others}) == 1:
        return others[0][0], others[0][1], "the only interface with an address"
    return None  # several and no route: any pick would be a guess


def probe_interfaces(master_addr: str | None = None) -> Check:
    """Interfaces with their IPv4 addresses and link state, and the one other nodes reach."""
    stats = psutil.net_if_stats()
    addrs = interface_addresses()
    parts = []
    data: dict[str, Any] = {}
    for name in sorted(set(stats) | set(addrs)):
        up = stats[name].isup if name in stats else None
        data[name] = {"addresses": addrs.get(name, []), "up": up}
        parts.append(f"{name} {'up' if up else 'down'} {','.join(addrs.get(name, [])) or '-'}")
    if not _non_loopback():
        return Check(
            "network.interfaces",
            GROUP,
            "interfaces",
            "warn",
            "; ".join(parts),
            "Only loopback has an address: single-node jobs work, other hosts "
            "cannot reach this one.",
            {"interfaces": data, "outward": None},
        )
    chosen = outward(master_addr)
    data = {"interfaces": data, "outward": None}
    if chosen is None:
        parts.append(
            "no default route: set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to the "
            "interface the nodes share"
        )
    else:
        data["outward"] = {"interface": chosen[0], "address": chosen[1], "via": chosen[2]}
        parts.append(f"other nodes reach this one via {chosen[0]} ({chosen[1]}, {chosen[2]})")
    return Check("network.interfaces", GROUP, "interfaces", "info", "; ".join(parts), None, data)


def probe_hostname(master_addr: str | None = None) -> Check:
    """The hostname and its addresses; loopback is fine on one node and a trap on many."""
    host = socket.gethostname()
    try:
        infos = call_bounded(
            lambda: socket.getaddrinfo(host, None, socket.AF_INET), CONNECT_TIMEOUT_S
        )
    except (OSError, ProbeTimeout) as err:
        return Check(
            "network.hostname",
            GROUP,
            "hostname",
            "warn",
            f"{host} does not resolve ({err})",
            f"Add '<this node's address> {host}' to /etc/hosts: gloo resolves the hostname to "
            "advertise itself.",
            {"hostname": host, "addresses": []},
        )
    resolved = sorted({str(info[4][0]) for info in infos})
    data = {"hostname": host, "addresses": resolved}
    if all(is_loopback(a) for a in resolved):
        chosen = outward(master_addr)
        iface, addr = chosen[:2] if chosen else ("<iface>", "<address>")
        return Check(
            "network.hostname",
            GROUP,
            "hostname",
            "warn",
            f"{host} resolves to {', '.join(resolved)} (loopback): peers on other nodes would be "
            "told to connect to themselves",
            IFNAME_FIX.format(iface=iface, addr=addr),
            data,
        )
    return Check(
        "network.hostname",
        GROUP,
        "hostname",
        "ok",
        f"{host} resolves to {', '.join(resolved)}",
        None,
        data,
    )


def _ifname_fix(var: str, present: set[str]) -> str:
    chosen = outward()
    lead = f"{chosen[0]} (the interface of {chosen[2]}), or " if chosen else ""
    return f"Set {var} to {lead}one of: {', '.join(sorted(present))}."


def probe_ifname_env() -> list[Check]:
    """GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME name interfaces that exist."""
    out = []
    present = set(psutil.net_if_stats())
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        raw = os.environ.get(var)
        if not raw:
            continue
        # NCCL accepts prefixes and ^exclusions; check plain names only
        names = [n for n in raw.split(",") if n and not n.startswith(("^", "="))]
        missing = [
            n
            for n in names
            if not any(p == n or (var.startswith("NCCL") and p.startswith(n)) for p in present)
        ]
        out.append(
            Check(
                f"network.{var.lower()}",
                GROUP,
                var,
                "fail" if missing else "ok",
                f"{var}={raw}" + (f": no interface {', '.join(missing)}" if missing else ""),
                _ifname_fix(var, present) if missing else None,
                {"value": raw, "missing": missing},
            )
        )
    return out


def _listener(port: int) -> str | None:
    with contextlib.suppress(Exception):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                if conn.pid:
                    with contextlib.suppress(psutil.Error):
                        return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
                    return f"pid {conn.pid}"
                return "another process"
    return None


def probe_ports(ports: tuple[int, ...] = DEFAULT_PORTS) -> list[Check]:
    """Whether each default port is free to bind on this host, and who holds it if not."""
    out = []
    for port in ports:
        if port_in_use(port):
            holder = _listener(port)
            out.append(
                Check(
                    f"network.port.{port}",
                    GROUP,
                    f"port {port}",
                    "warn",
                    f"in use{' by ' + holder if holder else ''}",
                    "Pass another --master-port/--rdzv-endpoint port, or leave it out on one node "
                    "(distrain run picks a free one).",
                    {"port": port, "free": False, "holder": holder},
                )
            )
        else:
            out.append(
                Check(
                    f"network.port.{port}",
                    GROUP,
                    f"port {port}",
                    "ok",
                    "free",
                    None,
                    {"port": port, "free": True},
                )
            )
    return out


def _connect(addr: str, port: int) -> str:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect((addr, port))
        except ConnectionRefusedError:
            return "refused"
        except TimeoutError:
            return "timeout"
        except OSError as err:
            return f"error: {err.strerror or err}"
    return "open"


def probe_master(master_addr: str, master_port: int | None) -> Check:
    """Can this host reach `master_addr[:master_port]`, and through which interface?"""
    data: dict[str, Any] = {"master_addr": master_addr, "master_port": master_port}
    try:
        ip = call_bounded(lambda: socket.gethostbyname(master_addr), CONNECT_TIMEOUT_S)
        local, iface = route_to(ip)
    except (OSError, ProbeTimeout) as err:
        return Check(
            "network.master",
            GROUP,
            "master address",
            "fail",
            f"{master_addr}: cannot resolve or route ({err})",
            "Use the master node's IP address, or fix DNS / /etc/hosts on this node.",
            data,
        )
    data.update(ip=ip, local_address=local, interface=iface)
    via = f"via {iface or '?'} ({local})"
    note = " (loopback: single-node only)" if is_loopback(ip) else ""
    if master_port is None:
        return Check(
            "network.master",
            GROUP,
            "master address",
            "ok",
            f"{master_addr} -> {ip} {via}{note}",
            None,
            data,
        )
    result = _connect(ip, master_port)
    data["connect"] = result
    seen = f"{master_addr}:{master_port} -> {ip} {via}: {result}{note}"
    if result == "open":
        return Check(
            "network.master",
            GROUP,
            "master address",
            "ok",
            seen + " (something is listening)",
            None,
            data,
        )
    if result == "refused":
        return Check(
            "network.master",
            GROUP,
            "master address",
            "warn",
            seen + " (host answers, nothing listens on the port)",
            "Fine before rank 0 starts; otherwise start rank 0 first or check the port number.",
            data,
        )
    return Check(
        "network.master",
        GROUP,
        "master address",
        "fail",
        seen,
        f"No answer: open TCP port {master_port} (and the workers' ports) in the firewall, or "
        "check the address.",
        data,
    )


def probe(master_addr: str | None, master_port: int | None, ports: tuple[int, ...]) -> list[Check]:
    """All network checks."""
    checks = [probe_interfaces(master_addr), probe_hostname(master_addr), *probe_ifname_env()]
    if master_addr:
        checks.append(probe_master(master_addr, master_port))
    checks.extend(probe_ports(ports))
    return checks
