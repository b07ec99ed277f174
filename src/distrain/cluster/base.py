"""The contract every launcher environment fulfils."""

from __future__ import annotations

import os
import socket
from abc import ABC, abstractmethod

from distrain.contract import RESTART_COUNT
from distrain.errors import DistrainError


class ClusterError(DistrainError):
    """A launcher environment is incomplete or inconsistent; the message says what to set."""

    recurs = True
    one_line = False


def env_int(name: str, default: int | None = None) -> int:
    """Read an integer environment variable, with a clear error when it is not one."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ClusterError(f"environment variable {name} is not set")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ClusterError(f"environment variable {name}={raw!r} is not an integer") from None


class ClusterEnvironment(ABC):
    """Who launched this process, and where it sits in the job.

    Subclasses are small: ``detect()`` says whether the environment applies, the getters read
    its variables.  ``MASTER_ADDR``/``MASTER_PORT`` are where the c10d store lives.
    """

    #: short name printed in the start-up line
    name: str = "base"

    @classmethod
    @abstractmethod
    def detect(cls) -> bool:
        """True when this process was started by this environment."""

    @abstractmethod
    def rank(self) -> int:
        """Global rank of this process."""

    @abstractmethod
    def world_size(self) -> int:
        """Number of processes in the job."""

    @abstractmethod
    def local_rank(self) -> int:
        """Rank of this process on its node (selects the GPU)."""

    @abstractmethod
    def local_world_size(self) -> int:
        """Number of processes on this node."""

    def node_rank(self) -> int:
        """Index of this node; defaults to rank // local_world_size."""
        return self.rank() // max(1, self.local_world_size())

    def num_nodes(self) -> int:
        """Number of nodes; defaults to world_size // local_world_size."""
        return max(1, self.world_size() // max(1, self.local_world_size()))

    def master_addr(self) -> str:
        """Host of the rendezvous store."""
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    def master_port(self) -> int:
        """Port of the rendezvous store."""
        return env_int("MASTER_PORT")

    def restart_count(self) -> int:
        """How many times the launcher restarted this worker group (0 on the first start)."""
        return env_int(RESTART_COUNT, 0)

    def store_is_external(self) -> bool:
        """True when the store at MASTER_ADDR:MASTER_PORT is hosted by the launcher, not rank 0."""
        return False

    def forms_process_group(self) -> bool:
        """True when a launcher started this process: init() forms a group, even of one process."""
        return True

    def check_devices(self, gpus_visible: int) -> None:
        """Raise ClusterError when the launcher's task layout cannot use `gpus_visible` GPUs."""
        return None  # most launchers start exactly the processes asked for

    def validate(self) -> None:
        """Raise ClusterError when the values are inconsistent."""
        world, rank = self.world_size(), self.rank()
        if world < 1:
            raise ClusterError(f"{self.name}: world size {world} < 1")
        if not 0 <= rank < world:
            raise ClusterError(f"{self.name}: rank {rank} outside [0, {world})")
        local_world, local_rank = self.local_world_size(), self.local_rank()
        if not 0 <= local_rank < max(1, local_world):
            raise ClusterError(f"{self.name}: local rank {local_rank} outside [0, {local_world})")

    def export_env(self) -> None:
        """Write the torchrun-style variables so torch.distributed's env:// works everywhere."""
        os.environ["RANK"] = str(self.rank())
        os.environ["WORLD_SIZE"] = str(self.world_size())
        os.environ["LOCAL_RANK"] = str(self.local_rank())
        os.environ["LOCAL_WORLD_SIZE"] = str(self.local_world_size())
        if self.name != "single":
            os.environ["MASTER_ADDR"] = self.master_addr()
            os.environ["MASTER_PORT"] = str(self.master_port())

    def describe(self) -> dict[str, object]:
        """The values as a dict, for logs and the doctor."""
        return {
            "launcher": self.name,
            "rank": self.rank(),
            "world_size": self.world_size(),
            "local_rank": self.local_rank(),
            "local_world_size": self.local_world_size(),
            "node_rank": self.node_rank(),
            "num_nodes": self.num_nodes(),
        }


class AgreedMasterEnvironment(ClusterEnvironment):
    """Launchers that set no store address (mpirun, horovodrun --gloo): rank 0 proposes one.

    MASTER_ADDR/MASTER_PORT win when both are set. Otherwise rank 0 proposes 127.0.0.1 on one
    node (its routable address across nodes) and a free port, and the launcher's own channel
    (``_broadcast``: mpi4py, Horovod) hands the proposal to every rank.
    """

    _master: tuple[str, int] | None = None
    #: rank 0's proposed port, kept from other programs until its store binds it
    _held_port: socket.socket | None = None

    def _broadcast(self, proposal: tuple[str, int] | None) -> tuple[str, int]:
        """Send rank 0's `proposal` to every rank; raise ClusterError naming what to set."""
        raise NotImplementedError

    def _agree(self) -> tuple[str, int]:
        if self._master is not None:
            return self._master
        if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
            self._master = (os.environ["MASTER_ADDR"], env_int("MASTER_PORT"))
            return self._master
        from distrain.net import host_address, reserve_port

        proposal = None
        if self.rank() == 0:
            addr = "127.0.0.1" if self.local_world_size() == self.world_size() else host_address()
            # held for this process's life: its own store binds it later (net.reserve_port)
            self._held_port = reserve_port()
            proposal = (addr, int(self._held_port.getsockname()[1]))
        addr, port = self._broadcast(proposal)
        self._master = (str(addr), int(port))
        return self._master

    def master_addr(self) -> str:
        """MASTER_ADDR, or rank 0's address broadcast by the launcher's channel."""
        return self._agree()[0]

    def master_port(self) -> int:
        """MASTER_PORT, or a free port chosen by rank 0 and broadcast by the launcher's channel."""
        return self._agree()[1]
