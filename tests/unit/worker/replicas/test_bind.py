"""worker/replicas/bind.py: TorchFT's manager server gets the job's address in front of its port."""

from __future__ import annotations

import importlib.util

import pytest

from distrain.errors import DistrainError
from distrain.worker.replicas.bind import host_port, manager_server_on

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchft") is None, reason="torchft not installed"
)


def test_host_port_brackets_ipv6_only() -> None:
    assert host_port("127.0.0.1", 0) == "127.0.0.1:0"
    assert host_port("::1", "29500") == "[::1]:29500"
    assert host_port("node-3", 5) == "node-3:5"


def test_bind_is_rewritten_inside_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import torchft.manager as tm

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(tm, "ManagerServer", lambda **kw: calls.append(kw) or "server")
    fake = tm.ManagerServer
    with manager_server_on("10.1.2.3"):
        assert tm.ManagerServer(replica_id="r", bind="[::]:4321") == "server"
    assert tm.ManagerServer is fake  # restored: only the Manager built inside is affected
    assert calls == [{"replica_id": "r", "bind": "10.1.2.3:4321"}]


def test_an_unknown_call_is_refused_not_bound_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    import torchft.manager as tm

    monkeypatch.setattr(tm, "ManagerServer", lambda *a, **kw: "server")
    with (
        manager_server_on("127.0.0.1"),
        pytest.raises(DistrainError, match="no longer passes bind"),
    ):
        tm.ManagerServer("r", "http://lh", "host", "[::]:0")
