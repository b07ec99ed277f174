"""Where the checkpoint directory lives: shared by every node, or one private disk per node.

At ``restore()`` rank 0 writes a random token into ``DIR/.distrain-shared-probe`` and every rank
checks that it reads the same token back.  When all do, ``DIR`` is shared: the job writes one
checkpoint, rank 0 seals it.  When some do not, each node has its own ``DIR``: every node keeps
a *complete* checkpoint there (its lowest rank writes the full, replicated model and optimizer
state, the shared state and seals; each rank adds its own RNG file), so any surviving node can
resume the job alone.  FSDP shards cannot be kept that way (no node holds the whole model), so
a sharded model with per-node directories is refused at start with one line.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

from distrain.checkpoint.files import CheckpointError, atomic_write
from distrain.process.info import ProcessInfo

PROBE = ".distrain-shared-probe"


@dataclass
class Topology:
    """How this job's ranks share the checkpoint directory, seen from one rank."""

    shared: bool
    #: the rank that seals this rank's checkpoint (rank 0, or the lowest rank of this node)
    leader: int
    #: the ranks whose files go into the same directory as this rank's (all ranks when shared)
    members: list[int]
    #: every rank's leader, by rank
    leaders: list[int]

    @property
    def per_node(self) -> bool:
        """True when each node has its own directory."""
        return not self.shared

    @classmethod
    def single(cls) -> Topology:
        """One process: trivially shared."""
        return cls(shared=True, leader=0, members=[0], leaders=[0])


def detect(process: ProcessInfo, directory: str) -> Topology:
    """Find out (collectively) whether every rank sees the same `directory`."""
    os.makedirs(directory, exist_ok=True)
    if not process.distributed or process.world_size == 1:
        return Topology.single()
    probe = os.path.join(directory, PROBE)
    first = process.rank == 0  # of this process group: under --replicas is_main is group 0's alone
    token = secrets.token_hex(16) if first else ""
    if first:
        atomic_write(probe, lambda f: f.write(token.encode()))
    token = process.broadcast_object(
        token
    )  # after rank 0's write: the file is there if it is visible
    try:
        with open(probe) as f:
            sees = f.read() == token
    except OSError:
        sees = False
    views = process.gather_object((process.node_rank, sees))
    if all(seen for _, seen in views):
        ranks = list(range(process.world_size))
        return Topology(shared=True, leader=0, members=ranks, leaders=[0] * process.world_size)
    by_node: dict[int, list[int]] = {}
    for rank, (node, _) in enumerate(views):
        by_node.setdefault(node, []).append(rank)
    leaders = [min(by_node[node]) for node, _ in views]
    members = by_node[process.node_rank]
    return Topology(shared=False, leader=min(members), members=members, leaders=leaders)


def refuse_sharded(directory: str, sharded: list[str], topology: Topology) -> None:
    """FSDP shards with per-node directories: no node could resume alone, so stop now."""
    if topology.per_node and sharded:
        raise CheckpointError(
            f"checkpoint directory {directory} is not shared between nodes (each node "
            "sees its own), and "
            f"{', '.join(sharded)} is sharded (FSDP): no node would hold the whole model. "
            "Put the directory "
            "on storage every node can read (NFS, Lustre, a mounted bucket), or train "
            "with strategy='ddp'"
        )
