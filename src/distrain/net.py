"""Small network helpers: free and held ports, this host's address, `host:port` endpoints."""

from __future__ import annotations

import contextlib
import socket


def free_port(host: str = "127.0.0.1") -> int:
    """Ask the kernel for a port that is free right now on `host`."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def reserve_port(host: str = "0.0.0.0", port: int = 0) -> socket.socket:
    """A socket that holds `port` (0: a free one) for the caller until it is closed.

    OSError when the port cannot be held: something listens there, or a connection without
    ``SO_REUSEADDR`` uses it.

    A port from :func:`free_port` is free only at the moment it is asked for: any loopback
    connection on the machine may take it as its source port before the listener binds it
    (``EADDRINUSE`` in rank 0's store, pytorch#126510).  Bound, not listening, with
    ``SO_REUSEADDR``, this socket keeps the port from the kernel's choices (a connection's source
    port, another bind to port 0, a bind without ``SO_REUSEADDR``) while a listener that sets
    ``SO_REUSEADDR`` binds it as if it were free: ours (:func:`listen_socket`), torch's
    TCPStore and torchft's servers all do.  Nothing connects to it: it never accepts.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def port_in_use(port: int, host: str = "0.0.0.0") -> bool:
    """True when binding `host:port` fails because something already listens there."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on `host`:`port` only (port 0: any free one); OSError when it cannot.

    For torch's TCPStore ``master_listen_fd``: the store otherwise listens on every interface.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((socket.gethostbyname(host), port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def listening_here(port: int) -> bool:
    """Whether this process listens on `port` (e.g. its agent hosts the rendezvous store)."""
    import psutil

    return any(
        c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
        for c in psutil.Process().net_connections("tcp")
    )


def reachable(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when something accepts a TCP connection at `host`:`port` now (closed at once).

    A silent look before a TCPStore client connects: torch's C++ client prints a warning with a
    stack of frames for every failed try, where this says nothing.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost'."""
    return address == "localhost" or address.startswith("127.") or address == "::1"


def interface_addresses() -> dict[str, list[str]]:
    """IPv4 addresses per network interface."""
    import psutil  # here, not at the top: `import distrain` (every host's ssh check) skips it

    out: dict[str, list[str]] = {}
    for name, addrs in psutil.net_if_addrs().items():
        v4 = [a.address for a in addrs if a.family == socket.AF_INET]
        if v4:
            out[name] = v4
    return out


def route_address(target: str, port: int = 9) -> str:
    """The local address the kernel would use to reach `target`.

    A connected UDP socket sends nothing but makes the kernel pick the route.
    """
    family, _, _, _, where = socket.getaddrinfo(target, port, 0, socket.SOCK_DGRAM)[0]
    with contextlib.closing(socket.socket(family, socket.SOCK_DGRAM)) as sock:
        sock.connect(where)  # IPv4 or IPv6, as `target` resolves
        return str(sock.getsockname()[0])


def route_to(target: str, port: int = 9) -> tuple[str, str | None]:
    """The local address (and its interface) the kernel would use to reach `target`."""
    local = route_address(target, port)
    for name, addrs in interface_addresses().items():
        if local in addrs:
            return local, name
    return local, None


#: the kernel's IPv4 routing table (what `ip route` prints)
PROC_ROUTE = "/proc/net/route"
_RTF_UP = 0x1


def default_route(table: str = PROC_ROUTE) -> str | None:
    """The interface of the IPv4 default route of lowest metric (`ip route show default`), or None.

    The interface other hosts reach this one through; alphabetical order would pick a Docker
    bridge (``docker0``) or a VPN before ``eth0``.
    """
    best: tuple[int, str] | None = None
    try:
        with open(table, encoding="ascii") as f:
            rows = [line.split() for line in f.readlines()[1:]]
    except OSError:
        return None
    for row in rows:
        if len(row) < 8 or row[1] != "00000000" or row[7] != "00000000":
            continue
        try:
            up, metric = int(row[3], 16) & _RTF_UP, int(row[6])
        except ValueError:
            continue
        if up and (best is None or metric < best[0]):
            best = (metric, row[0])
    return best[1] if best else None


def outward_interface(target: str | None = None) -> tuple[str, str] | None:
    """(interface, address) this host uses toward `target`, else toward its default route.

    `ip route get TARGET` semantics for a target; without one, the default route's interface and
    its first IPv4 address. None when neither exists (an isolated host or namespace).
    """
    table = interface_addresses()
    if target:
        with contextlib.suppress(OSError):
            local, iface = route_to(target)
            if iface is not None:
                return iface, local
    iface = default_route()
    if iface and table.get(iface):
        return iface, table[iface][0]
    return None


def host_address() -> str:
    """An address of this host that other hosts can reach: the hostname's, unless it is loopback.

    Falls back to the address of the default route's interface (hostnames mapped to 127.0.1.1
    are a classic multi-node trap), then to the first non-loopback address by interface name (no
    default route: an isolated host or namespace, where any choice is a guess).
    """
    try:
        resolved = socket.gethostbyname(socket.gethostname())
    except OSError:
        resolved = "127.0.0.1"
    if not is_loopback(resolved):
        return resolved
    routed = outward_interface()
    if routed is not None:
        return routed[1]
    others = [
        a
        for name, addrs in sorted(interface_addresses().items())
        if name != "lo"
        for a in addrs
        if not is_loopback(a)
    ]
    return others[0] if others else resolved


def split_endpoint(endpoint: str, default_port: int = 29400) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``, or a bare host: torch's default port) → (host, port)."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit() or (host.startswith("[") != host.endswith("]")):
        return endpoint.strip("[]"), default_port
    return host.strip("[]"), int(port)
