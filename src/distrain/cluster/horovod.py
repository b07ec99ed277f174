"""`horovodrun --gloo` (Horovod's own launcher without MPI): HOROVOD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE.

In MPI mode horovodrun is mpirun and the Open MPI environment applies.  In gloo mode there is
no MPI to agree on a store address, so rank 0 proposes one (127.0.0.1 on one node, its routable
address otherwise, and a free port) and Horovod itself broadcasts it: under horovodrun Horovod is
installed by definition, and it is only imported here.
"""

from __future__ import annotations

import os

from ..net import free_port, host_address
from .base import ClusterEnvironment, ClusterError, env_int


class HorovodEnvironment(ClusterEnvironment):
    """Started by ``horovodrun`` in gloo mode."""

    name = "horovod"
    _master: tuple[str, int] | None = None

    @classmethod
    def detect(cls) -> bool:
        """True when HOROVOD_RANK and HOROVOD_SIZE are set."""
        return "HOROVOD_RANK" in os.environ and "HOROVOD_SIZE" in os.environ

    def rank(self) -> int:
        """HOROVOD_RANK."""
        return env_int("HOROVOD_RANK")

    def world_size(self) -> int:
        """HOROVOD_SIZE."""
        return env_int("HOROVOD_SIZE")

    def local_rank(self) -> int:
        """HOROVOD_LOCAL_RANK."""
        return env_int("HOROVOD_LOCAL_RANK", 0)

    def local_world_size(self) -> int:
        """HOROVOD_LOCAL_SIZE."""
        return env_int("HOROVOD_LOCAL_SIZE", self.world_size())

    def node_rank(self) -> int:
        """HOROVOD_CROSS_RANK: the index of this host."""
        return env_int("HOROVOD_CROSS_RANK", super().node_rank())

    def num_nodes(self) -> int:
        """HOROVOD_CROSS_SIZE."""
        return env_int("HOROVOD_CROSS_SIZE", super().num_nodes())

    def _agree(self) -> tuple[str, int]:
        if self._master is not None:
            return self._master
        if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
            self._master = (os.environ["MASTER_ADDR"], env_int("MASTER_PORT"))
            return self._master
        try:
            import horovod.torch as hvd
        except ImportError:
            raise ClusterError("horovod: HOROVOD_RANK is set but horovod.torch does not import; set MASTER_ADDR/MASTER_PORT") from None
        hvd.init()
        proposal = None
        if self.rank() == 0:
            addr = "127.0.0.1" if self.local_world_size() == self.world_size() else host_address()
            proposal = (addr, free_port("0.0.0.0"))
        addr, port = hvd.broadcast_object(proposal, root_rank=0, name="distrain.master")
        self._master = (str(addr), int(port))
        return self._master

    def master_addr(self) -> str:
        """MASTER_ADDR, or rank 0's address broadcast through Horovod."""
        return self._agree()[0]

    def master_port(self) -> int:
        """MASTER_PORT, or a free port on rank 0 broadcast through Horovod."""
        return self._agree()[1]
