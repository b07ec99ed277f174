"""torchrun / TorchElastic (also `distrain run` and modern `torch.distributed.launch --use-env`)."""

from __future__ import annotations

import os

from distrain.cluster.base import ClusterEnvironment, env_int


class TorchElasticEnvironment(ClusterEnvironment):
    """Started by torch's elastic agent: RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK, TORCHELASTIC_*"""

    name = "torchelastic"

    @classmethod
    def detect(cls) -> bool:
        """True when TORCHELASTIC_RUN_ID or the full RANK/WORLD_SIZE/LOCAL_RANK set is present."""
        if "TORCHELASTIC_RUN_ID" in os.environ:
            return True
        return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"))

    def rank(self) -> int:
        """RANK."""
        return env_int("RANK")

    def world_size(self) -> int:
        """WORLD_SIZE."""
        return env_int("WORLD_SIZE")

    def local_rank(self) -> int:
        """LOCAL_RANK."""
        return env_int("LOCAL_RANK")

    def local_world_size(self) -> int:
        """LOCAL_WORLD_SIZE (falls back to WORLD_SIZE on one node)."""
        return env_int("LOCAL_WORLD_SIZE", self.world_size())

    def node_rank(self) -> int:
        """GROUP_RANK, the agent's index."""
        return env_int("GROUP_RANK", super().node_rank())

    def num_nodes(self) -> int:
        """GROUP_WORLD_SIZE when present."""
        return env_int("GROUP_WORLD_SIZE", super().num_nodes())

    def store_is_external(self) -> bool:
        """The agent hosts the store when TORCHELASTIC_USE_AGENT_STORE is True."""
        return os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
