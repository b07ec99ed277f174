"""`horovodrun --gloo` (Horovod's launcher without MPI): HOROVOD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE.

In MPI mode horovodrun is mpirun and the Open MPI environment applies.  In gloo mode there is
no MPI to agree on a store address, so rank 0 proposes one (127.0.0.1 on one node, its routable
address otherwise, and a free port) and Horovod itself broadcasts it: under horovodrun Horovod is
installed by definition, and it is only imported here.
"""

from __future__ import annotations

import os

from distrain.cluster.base import AgreedMasterEnvironment, ClusterError, env_int


class HorovodEnvironment(AgreedMasterEnvironment):
    """Started by ``horovodrun`` in gloo mode."""

    name = "horovod"

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

    def _broadcast(self, proposal: tuple[str, int] | None) -> tuple[str, int]:
        try:
            import horovod.torch as hvd
        except ImportError:
            raise ClusterError(
                "horovod: HOROVOD_RANK is set but horovod.torch does not import; set "
                "MASTER_ADDR/MASTER_PORT"
            ) from None
        hvd.init()
        return hvd.broadcast_object(proposal, root_rank=0, name="distrain.master")
