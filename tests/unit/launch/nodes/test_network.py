"""launch/nodes/network.py: which interface and address a multi-node `distrain run` uses
(fixed tables).

interface_addresses/route_to/name resolution are replaced by monkeypatch: no socket is opened.
"""

from __future__ import annotations

import argparse

import pytest

from distrain.errors import UsageError
from distrain.launch.nodes import network
from distrain.launch.nodes.network import NetworkChoice, max_nodes, plan_network

TABLE = {"lo": ["127.0.0.1"], "eth0": ["10.0.0.2"], "ib0": ["192.168.5.2"]}


@pytest.fixture(autouse=True)
def tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        network, "interface_addresses", lambda: {k: list(v) for k, v in TABLE.items()}
    )
    monkeypatch.setattr(network, "_hostname_loopback", lambda: None)
    names = {
        "localhost": "127.0.0.1",
        "node0": "10.0.0.1",
        "self-alias": "127.0.1.1",
        "public": "8.8.8.8",
    }
    monkeypatch.setattr(network, "_resolve", lambda host, what: names.get(host, host))
    routes = {
        "10.0.0.1": ("10.0.0.2", "eth0"),
        "192.168.5.1": ("192.168.5.2", "ib0"),
        "8.8.8.8": ("10.0.0.2", "eth0"),
    }
    monkeypatch.setattr(
        network, "route_to", lambda ip, port=9: routes.get(ip, ("10.0.0.2", "eth0"))
    )


def _choose(
    args: argparse.Namespace, env: dict[str, str], iface: str | None
) -> network.NetworkChoice | None:
    """plan_network with --nnodes read as the plan reads it (options/validate.py)."""
    return plan_network(args, env, iface, max_nodes(args.nnodes))


def _args(**over: object) -> argparse.Namespace:
    values = {"nnodes": "2", "rdzv_backend": "static", "rdzv_endpoint": "", "rdzv_conf": "",
              "master_addr": "node0",
              "master_port": "29500", "node_rank": "1", "local_addr": None}  # fmt: skip
    values.update(over)
    return argparse.Namespace(**values)


@pytest.mark.parametrize(("text", "expected"), [("1", 1), ("1:4", 4), ("3", 3)])
def test_max_nodes(text: str, expected: int) -> None:
    assert max_nodes(text) == expected


def test_max_nodes_refuses_junk() -> None:
    with pytest.raises(UsageError, match="--nnodes expects N or MIN:MAX"):
        max_nodes("two")


def test_one_node_without_iface_needs_no_plan() -> None:
    env: dict[str, str] = {}
    assert _choose(_args(nnodes="1"), env, None) is None
    assert env == {}


def test_static_worker_node_routes_to_the_master() -> None:
    args, env = _args(), {}
    choice = _choose(args, env, None)
    assert choice is not None
    assert (choice.iface, choice.address, choice.target_ip, choice.port) == (
        "eth0",
        "10.0.0.2",
        "10.0.0.1",
        29500,
    )
    assert choice.store == "store on node0"
    assert env == {
        "GLOO_SOCKET_IFNAME": "eth0",
        "NCCL_SOCKET_IFNAME": "eth0",
        "DISTRAIN_BIND_ADDR": "10.0.0.2",
    }
    assert args.local_addr is None  # read only: the plan takes choice.address


def test_user_ifname_variables_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    env: dict[str, str] = {}
    _choose(_args(), env, None)
    assert env["NCCL_SOCKET_IFNAME"] == "ib0" and env["GLOO_SOCKET_IFNAME"] == "eth0"


def test_master_on_this_node_hosts_the_store() -> None:
    choice = _choose(_args(master_addr="10.0.0.2", node_rank="0"), {}, None)
    assert (
        choice is not None
        and choice.iface == "eth0"
        and choice.store == "store on this node (rank 0)"
    )
    assert choice.warnings == ()


def test_iface_that_cannot_reach_the_master_is_refused() -> None:
    with pytest.raises(
        UsageError,
        match=r"--iface ib0 \(192.168.5.2\) cannot reach --master-addr node0 .*use --iface eth0",
    ):
        _choose(_args(), {}, "ib0")


def test_unknown_iface_lists_the_known_ones() -> None:
    with pytest.raises(UsageError, match=r"--iface wlan0: no such interface .*eth0 \(10.0.0.2\)"):
        _choose(_args(), {}, "wlan0")


def test_master_resolving_to_loopback_is_refused_on_other_nodes() -> None:
    with pytest.raises(
        UsageError, match="resolves to loopback 127.0.1.1 on this node, so this 2-node job"
    ):
        _choose(_args(master_addr="self-alias"), {}, None)


def test_localhost_master_means_every_node_on_this_machine() -> None:
    choice = _choose(_args(master_addr="localhost"), {}, None)
    assert choice is not None and choice.iface == "lo"
    assert any("loopback" in w for w in choice.warnings)


def test_public_master_address_warns_about_the_open_store() -> None:
    choice = _choose(_args(master_addr="public"), {}, None)
    assert choice is not None and any("public address" in w for w in choice.warnings)


def test_c10d_endpoint_on_this_node_marks_the_host() -> None:
    args = _args(rdzv_backend="c10d", rdzv_endpoint="10.0.0.2:29400", rdzv_conf="join_timeout=60")
    choice = _choose(args, {}, None)
    assert (
        choice is not None
        and choice.port == 29400
        and choice.store == "rendezvous store on this node"
    )
    assert choice.is_host is True and args.rdzv_conf == "join_timeout=60"


def test_c10d_endpoint_elsewhere_is_not_the_host_and_user_is_host_wins() -> None:
    args = _args(rdzv_backend="c10d", rdzv_endpoint="node0:29400")
    choice = _choose(args, {}, None)
    assert choice is not None and choice.is_host is False
    args = _args(rdzv_backend="c10d", rdzv_endpoint="node0:29400", rdzv_conf="is_host=1")
    choice = _choose(args, {}, None)
    assert choice is not None and choice.is_host is None  # the user's is_host stays


def test_c10d_without_endpoint_is_refused() -> None:
    with pytest.raises(
        UsageError, match="--rdzv-backend c10d with several nodes needs --rdzv-endpoint"
    ):
        _choose(_args(rdzv_backend="c10d"), {}, None)


def test_summary_line() -> None:
    choice = NetworkChoice("eth0", "10.0.0.2", "node0", "10.0.0.1", 29500, "store on node0")
    assert choice.summary("node 1/2") == (
        "distrain run: node 1/2 · interface eth0 (10.0.0.2) routes to node0 (10.0.0.1):29500 "
        "· store on node0"
    )
    same = NetworkChoice("eth0", "10.0.0.2", "10.0.0.1", "10.0.0.1", None, "s")
    assert "routes to 10.0.0.1 · s" in same.summary("n")
