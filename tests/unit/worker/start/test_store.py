"""start/store.py: where rank 0's store listens (DISTRAIN_BIND_ADDR, else loopback, else torch's).

Name resolution and the listening socket are replaced by monkeypatch: no socket is opened.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from distrain.errors import DistrainError
from distrain.worker.start import store


@pytest.fixture
def sockets(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    opened: list[tuple[str, int]] = []

    def listen(host: str, port: int) -> SimpleNamespace:
        opened.append((host, port))
        return SimpleNamespace(detach=lambda: 99)

    monkeypatch.setattr(store, "listen_socket", listen)
    names = {"localhost": "127.0.0.1", "node0": "10.0.0.1"}
    monkeypatch.setattr(
        store, "socket", SimpleNamespace(gethostbyname=lambda host: names.get(host, host))
    )
    return opened


def test_the_chosen_bind_address_wins(
    sockets: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert store.store_listen_fd("node0", 29500, "10.0.0.2") == 99
    assert sockets == [("10.0.0.2", 29500)]


def test_a_loopback_master_listens_on_loopback_only(sockets: list[tuple[str, int]]) -> None:
    assert store.store_listen_fd("localhost", 29501) == 99
    assert sockets == [("127.0.0.1", 29501)]


def test_otherwise_torch_decides(sockets: list[tuple[str, int]]) -> None:
    assert store.store_listen_fd("node0", 29500) is None
    assert sockets == []


def test_an_address_that_cannot_be_bound_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(host: str, port: int) -> None:
        raise OSError(99, "Cannot assign requested address")

    monkeypatch.setattr(store, "listen_socket", refuse)
    with pytest.raises(
        DistrainError,
        match="rank 0's store cannot listen on 10.9.9.9:29500: Cannot assign requested address",
    ):
        store.store_listen_fd("node0", 29500, "10.9.9.9")
