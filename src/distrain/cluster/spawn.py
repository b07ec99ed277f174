"""Processes started by `distrain.spawn` (torch.multiprocessing.spawn with the env contract set)."""

from __future__ import annotations

import os

from distrain.cluster.base import ClusterEnvironment, env_int
from distrain.contract import SPAWN as SPAWN_MARKER


class SpawnEnvironment(ClusterEnvironment):
    """`distrain.spawn(fn, nprocs)`: one node, ranks 0..n-1, a free port chosen by the parent."""

    name = "spawn"

    @classmethod
    def detect(cls) -> bool:
        """True inside a worker started by distrain.spawn."""
        return os.environ.get(SPAWN_MARKER) == "1"

    def rank(self) -> int:
        """RANK set by the spawn wrapper."""
        return env_int("RANK")

    def world_size(self) -> int:
        """WORLD_SIZE set by the spawn wrapper."""
        return env_int("WORLD_SIZE")

    def local_rank(self) -> int:
        """Same as rank: spawn is single-node."""
        return env_int("LOCAL_RANK", self.rank())

    def local_world_size(self) -> int:
        """Same as world size: spawn is single-node."""
        return self.world_size()
