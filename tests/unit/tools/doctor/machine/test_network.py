"""tools/doctor/machine/network.py: interface-name variables and port findings, from patched
facts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from distrain.tools.doctor.machine import network


@pytest.fixture
def interfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        network,
        "psutil",
        SimpleNamespace(net_if_stats=lambda: {"lo": None, "eth0": None, "ib0": None}),
    )


def test_unset_variables_give_no_findings(interfaces: None) -> None:
    assert network.probe_ifname_env() == []


def test_existing_interfaces_are_ok(interfaces: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth0")
    monkeypatch.setenv(
        "NCCL_SOCKET_IFNAME", "^docker,ib"
    )  # NCCL: exclusions skipped, prefixes accepted
    checks = network.probe_ifname_env()
    assert [(c.id, c.status) for c in checks] == [
        ("network.gloo_socket_ifname", "ok"),
        ("network.nccl_socket_ifname", "ok"),
    ]


def test_a_missing_interface_fails_with_the_choices(
    interfaces: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth")  # gloo wants an exact name, not a prefix
    monkeypatch.setattr(
        network, "outward", lambda master_addr=None: ("ib0", "10.1.0.2", "the default route")
    )
    (check,) = network.probe_ifname_env()
    assert check.status == "fail" and check.seen == "GLOO_SOCKET_IFNAME=eth: no interface eth"
    assert (
        check.fix == "Set GLOO_SOCKET_IFNAME to ib0 (the interface of the default route), or one "
        "of: eth0, ib0, lo."
    )
    monkeypatch.setattr(
        network, "outward", lambda master_addr=None: None
    )  # no route: the choices alone
    assert network.probe_ifname_env()[0].fix == "Set GLOO_SOCKET_IFNAME to one of: eth0, ib0, lo."


def test_ports_in_use_name_the_holder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(network, "port_in_use", lambda port: port == 29500)
    monkeypatch.setattr(network, "_listener", lambda port: "pid 7 (python)")
    busy, free = network.probe_ports((29500, 29400))
    assert (busy.status, busy.seen, busy.data["holder"]) == (
        "warn",
        "in use by pid 7 (python)",
        "pid 7 (python)",
    )
    assert (free.status, free.seen, free.data) == ("ok", "free", {"port": 29400, "free": True})
