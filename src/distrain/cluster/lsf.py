"""IBM LSF `jsrun` (and `blaunch` tasks that carry jsrun's variables): JSM_NAMESPACE_*, LSB_*."""

from __future__ import annotations

import os

from distrain.cluster.base import ClusterEnvironment, ClusterError, env_int


def lsf_hosts() -> list[str]:
    """The job's hosts in LSF's order, once each: LSB_DJOB_HOSTFILE (per slot), else LSB_MCPU_HOSTS.

    LSB_MCPU_HOSTS reads ``"hostA 1 hostB 42 hostC 42"``: pairs of a host and its slot count.
    """
    path = os.environ.get("LSB_DJOB_HOSTFILE", "")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                names = [line.strip() for line in f if line.strip()]
        except OSError as e:
            raise ClusterError(f"lsf: cannot read LSB_DJOB_HOSTFILE={path}: {e.strerror}") from None
    else:
        names = os.environ.get("LSB_MCPU_HOSTS", "").split()[::2]
    return list(dict.fromkeys(names))


class LSFEnvironment(ClusterEnvironment):
    """A task started by `jsrun` inside an LSF job (`bsub`)."""

    name = "lsf"

    @classmethod
    def detect(cls) -> bool:
        """True when jsrun's rank and size and LSF's job id are set, and no mpirun inside disagrees.

        jsrun (Spectrum MPI) also sets OMPI_COMM_WORLD_*, with the same values. When those name
        another world size, an `mpirun` was started inside a jsrun task: every rank inherited
        the task's JSM_NAMESPACE_RANK, and Open MPI's variables are the truth.
        """
        if not all(
            k in os.environ for k in ("JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "LSB_JOBID")
        ):
            return False
        ompi_size = os.environ.get("OMPI_COMM_WORLD_SIZE")
        return ompi_size is None or ompi_size == os.environ["JSM_NAMESPACE_SIZE"]

    def rank(self) -> int:
        """JSM_NAMESPACE_RANK."""
        return env_int("JSM_NAMESPACE_RANK")

    def world_size(self) -> int:
        """JSM_NAMESPACE_SIZE."""
        return env_int("JSM_NAMESPACE_SIZE")

    def local_rank(self) -> int:
        """JSM_NAMESPACE_LOCAL_RANK (0 for a job of one task)."""
        return env_int("JSM_NAMESPACE_LOCAL_RANK", 0 if self.world_size() == 1 else None)

    def local_world_size(self) -> int:
        """JSM_NAMESPACE_LOCAL_SIZE, else every task on one node."""
        return env_int("JSM_NAMESPACE_LOCAL_SIZE", self.world_size())

    def compute_hosts(self) -> list[str]:
        """The hosts that run tasks: the job's hosts without the launch node, when LSF lists one.

        On jsrun clusters the first host of the list is the launch (batch) node, which runs the
        job script but no task; the list then holds one host more than the job has nodes.
        """
        hosts = lsf_hosts()
        if len(hosts) == self.num_nodes() + 1:
            return hosts[1:]
        return hosts

    def master_addr(self) -> str:
        """MASTER_ADDR when set; 127.0.0.1 on one node; else the first compute host."""
        if "MASTER_ADDR" in os.environ:
            return os.environ["MASTER_ADDR"]
        if self.num_nodes() == 1:
            return "127.0.0.1"
        hosts = self.compute_hosts()
        if not hosts:
            raise ClusterError(
                "lsf: set MASTER_ADDR; neither LSB_DJOB_HOSTFILE nor LSB_MCPU_HOSTS names the hosts"
            )
        return hosts[0]

    def master_port(self) -> int:
        """MASTER_PORT when set, else derived from LSB_JOBID (the same on every task)."""
        if "MASTER_PORT" in os.environ:
            return env_int("MASTER_PORT")
        return 15000 + env_int("LSB_JOBID") % 20000
