"""A plain `python train.py`: one process, no process group."""

from __future__ import annotations

from distrain.cluster.base import ClusterEnvironment


class SingleProcessEnvironment(ClusterEnvironment):
    """The fallback: world size 1, rank 0."""

    name = "single"

    @classmethod
    def detect(cls) -> bool:
        """Always applies; it is tried last."""
        return True

    def rank(self) -> int:
        """0."""
        return 0

    def world_size(self) -> int:
        """1."""
        return 1

    def local_rank(self) -> int:
        """0."""
        return 0

    def local_world_size(self) -> int:
        """1."""
        return 1

    def forms_process_group(self) -> bool:
        """A plain `python train.py` has no process group."""
        return False

    def master_port(self) -> int:
        """Unused with one process."""
        return 0
