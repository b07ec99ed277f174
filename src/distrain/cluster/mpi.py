"""Open MPI and MPICH / Intel MPI (`mpirun`, `mpiexec`, and `horovodrun` on top of them)."""

from __future__ import annotations

import os

from distrain.cluster.base import AgreedMasterEnvironment, ClusterError, env_int


class _MPIEnvironment(AgreedMasterEnvironment):
    """Shared logic: MASTER_ADDR/PORT from the environment, else agreed on through mpi4py."""

    _RANK = _SIZE = _LOCAL_RANK = _LOCAL_SIZE = ""

    @classmethod
    def detect(cls) -> bool:
        """True when this MPI flavour's rank variable is set."""
        return cls._RANK in os.environ and cls._SIZE in os.environ

    def rank(self) -> int:
        """The MPI world rank."""
        return env_int(self._RANK)

    def world_size(self) -> int:
        """The MPI world size."""
        return env_int(self._SIZE)

    def local_rank(self) -> int:
        """The rank on this node."""
        return env_int(self._LOCAL_RANK, 0 if self.world_size() == 1 else None)

    def local_world_size(self) -> int:
        """Processes on this node."""
        if self._LOCAL_SIZE and self._LOCAL_SIZE in os.environ:
            return env_int(self._LOCAL_SIZE)
        return env_int("LOCAL_WORLD_SIZE", self.world_size())

    def _broadcast(self, proposal: tuple[str, int] | None) -> tuple[str, int]:
        try:
            from mpi4py import MPI
        except ImportError:
            raise ClusterError(
                f"{self.name}: set MASTER_ADDR and MASTER_PORT (e.g. mpirun -x "
                "MASTER_ADDR=<rank 0 host>"
                " -x MASTER_PORT=29500 ...) or pip install mpi4py so the ranks can agree on them"
            ) from None
        return MPI.COMM_WORLD.bcast(proposal, root=0)


class OpenMPIEnvironment(_MPIEnvironment):
    """Open MPI's `mpirun`: OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE."""

    name = "openmpi"
    _RANK, _SIZE = "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"
    _LOCAL_RANK, _LOCAL_SIZE = "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"

    def node_rank(self) -> int:
        """OMPI_COMM_WORLD_NODE_RANK is per-node process index, so derive from ranks instead."""
        return self.rank() // max(1, self.local_world_size())


class MPICHEnvironment(_MPIEnvironment):
    """MPICH / Intel MPI / Hydra: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS."""

    name = "mpich"
    _RANK, _SIZE = "PMI_RANK", "PMI_SIZE"
    _LOCAL_RANK, _LOCAL_SIZE = "MPI_LOCALRANKID", "MPI_LOCALNRANKS"
