"""Host 0's probe holds the master port it chose until its node ends (no check-then-free race)."""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Iterator

import pytest

from distrain.launch.hosts import node


@pytest.fixture
def probe_holds() -> Iterator[list[socket.socket]]:
    def let_go() -> None:  # other tests' probes held theirs too, in this process
        for sock in node._HELD:
            sock.close()
        node._HELD.clear()

    let_go()
    yield node._HELD
    let_go()


def _plain_bind_fails(port: int) -> bool:
    """A bind without SO_REUSEADDR, as the kernel's choice of a source port treats the port."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as err:
            return err.errno == errno.EADDRINUSE
    return False


def _store_binds(port: int) -> bool:
    """The job's store binds and listens with SO_REUSEADDR, as torch's TCPStore does."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))
        sock.listen(1)
        return True


@pytest.mark.parametrize("count", [1, 3])
def test_a_chosen_port_and_those_above_stay_held_for_the_store(
    probe_holds: list[socket.socket], count: int
) -> None:
    port, error = node._port(0, count)
    assert error is None and port is not None
    assert len(probe_holds) == count
    for k in range(count):
        assert _plain_bind_fails(port + k), f"port {port + k} was let go"
        assert _store_binds(port + k)


def test_a_named_port_is_held_and_a_listened_one_refused(
    probe_holds: list[socket.socket],
) -> None:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        busy = int(taken.getsockname()[1])
        assert node._port(busy) == (None, f"master port {busy} is already in use there")
    port, error = node._port(busy)  # free again: held now
    assert (port, error) == (busy, None)
    assert _plain_bind_fails(busy) and _store_binds(busy)
