"""cluster/mpi.py: Open MPI (OMPI_COMM_WORLD_*), MPICH/Intel MPI (PMI_*, MPI_LOCAL*), the master."""

from __future__ import annotations

import contextlib
import socket
import sys

import pytest

import distrain.net
from distrain.cluster import MPICHEnvironment, OpenMPIEnvironment
from distrain.cluster.base import ClusterError
from distrain.net import listen_socket


def _set(monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> None:
    for k, v in values.items():
        monkeypatch.setenv(k, v)


def test_openmpi_detected_by_rank_and_size(monkeypatch: pytest.MonkeyPatch) -> None:
    assert OpenMPIEnvironment.detect() is False
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    assert OpenMPIEnvironment.detect() is False
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert OpenMPIEnvironment.detect() is True
    assert MPICHEnvironment.detect() is False


def test_openmpi_getters(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
                       "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                       "OMPI_COMM_WORLD_NODE_RANK": "1"})  # fmt: skip
    env = OpenMPIEnvironment()
    assert (env.rank(), env.world_size(), env.local_rank(), env.local_world_size()) == (5, 8, 1, 2)
    # NODE_RANK is a per-node process index in Open MPI: the node comes from the ranks
    assert (env.node_rank(), env.num_nodes()) == (2, 4)


def test_mpich_getters(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(
        monkeypatch,
        {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
    )
    assert MPICHEnvironment.detect() is True
    env = MPICHEnvironment()
    assert (env.rank(), env.world_size(), env.local_rank(), env.local_world_size()) == (3, 4, 1, 2)
    assert env.node_rank() == 1


def test_local_size_falls_back_to_local_world_size_then_world(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _set(monkeypatch, {"PMI_RANK": "0", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0"})
    env = MPICHEnvironment()
    assert env.local_world_size() == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert env.local_world_size() == 2


def test_local_rank_is_required_unless_world_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {"PMI_RANK": "0", "PMI_SIZE": "1"})
    assert MPICHEnvironment().local_rank() == 0
    monkeypatch.setenv("PMI_SIZE", "2")
    with pytest.raises(ClusterError, match="MPI_LOCALRANKID is not set"):
        MPICHEnvironment().local_rank()


def test_master_from_environment_wins_without_broadcast(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch,
         {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
          "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                       "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "29555"})  # fmt: skip
    env = OpenMPIEnvironment()

    def no_broadcast(proposal: object) -> tuple[str, int]:
        raise AssertionError("the environment's MASTER_ADDR/PORT must be used")

    monkeypatch.setattr(env, "_broadcast", no_broadcast)
    assert (env.master_addr(), env.master_port()) == ("10.0.0.9", 29555)


def test_rank0_proposes_loopback_on_one_node(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch,
         {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
          "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                       "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})  # fmt: skip
    monkeypatch.setattr(distrain.net, "host_address", lambda: "192.0.2.7")
    proposals: list[object] = []
    env = OpenMPIEnvironment()
    monkeypatch.setattr(env, "_broadcast", lambda p: proposals.append(p) or p)
    port = env.master_port()
    assert (env.master_addr(), env.master_port()) == ("127.0.0.1", port)
    assert proposals == [("127.0.0.1", port)]  # agreed once, then remembered
    # the port is held until rank 0's own store binds it: nothing else may take it meanwhile
    with socket.socket() as other:
        with pytest.raises(OSError):
            other.bind(("127.0.0.1", port))
    with contextlib.closing(listen_socket("127.0.0.1", port)):  # rank 0's store can
        pass


def test_rank0_proposes_its_routable_address_across_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch,
         {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4",
          "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                       "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})  # fmt: skip
    monkeypatch.setattr(distrain.net, "host_address", lambda: "192.0.2.7")
    env = OpenMPIEnvironment()
    monkeypatch.setattr(env, "_broadcast", lambda p: p)
    assert env.master_addr() == "192.0.2.7"


def test_other_ranks_propose_nothing_and_take_the_broadcast(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _set(monkeypatch, {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"})
    seen: list[object] = []
    env = MPICHEnvironment()
    monkeypatch.setattr(env, "_broadcast", lambda p: seen.append(p) or ("10.0.0.1", "29501"))
    assert (env.master_addr(), env.master_port()) == ("10.0.0.1", 29501)
    assert seen == [None]


def test_without_mpi4py_the_error_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"})
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import fails
    with pytest.raises(ClusterError, match="mpich: set MASTER_ADDR and MASTER_PORT"):
        MPICHEnvironment().master_addr()
