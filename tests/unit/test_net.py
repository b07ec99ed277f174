"""net.py: loopback recognition, the interface table and this host's reachable address (patched)."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from distrain import net


@pytest.mark.parametrize(("address", "loopback"),
                         [("127.0.0.1", True), ("127.0.1.1", True), ("::1", True),
                          ("localhost", True),
                                                    ("10.0.0.1", False), ("1270.0.0.1", False),
                          ("0.0.0.0", False)])  # fmt: skip
def test_is_loopback(address: str, loopback: bool) -> None:
    assert net.is_loopback(address) is loopback


def _addr(family: int, address: str) -> SimpleNamespace:
    return SimpleNamespace(family=family, address=address)


@pytest.fixture
def interfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {"lo": [_addr(socket.AF_INET, "127.0.0.1")],
             "eth0": [_addr(socket.AF_INET6, "fe80::1"), _addr(socket.AF_INET, "10.0.0.2")],
             "docker0": [_addr(socket.AF_INET6, "fe80::2")]}  # fmt: skip
    import psutil  # net imports it where it is used (not at its top: `import distrain` stays light)

    monkeypatch.setattr(psutil, "net_if_addrs", lambda: table)


def test_interface_addresses_lists_ipv4_only(interfaces: None) -> None:
    assert net.interface_addresses() == {"lo": ["127.0.0.1"], "eth0": ["10.0.0.2"]}


def test_host_address_avoids_a_loopback_hostname(
    interfaces: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(net.socket, "gethostbyname", lambda name: "127.0.1.1")
    assert net.host_address() == "10.0.0.2"
    monkeypatch.setattr(net.socket, "gethostbyname", lambda name: "192.0.2.5")
    assert net.host_address() == "192.0.2.5"


def test_default_route_is_the_lowest_metric_default_not_the_first_name(tmp_path: Path) -> None:
    table = tmp_path / "route"
    table.write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        # a subnet route, not a default:
        "docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
        "wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n"
        "eth1\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
        "aaa0\t00000000\t0100000A\t0002\t0\t0\t0\t00000000\t0\t0\t0\n"  # not up
    )
    assert net.default_route(str(table)) == "eth1"
    table.write_text("Iface\tDestination\n")
    assert net.default_route(str(table)) is None
    assert net.default_route(str(tmp_path / "absent")) is None
